"""Read the default config of every causal language model transformers ships, as transformers saves
it, and say what kvcalc makes of each: read cleanly, read with a warning naming the fields it does
not model, or refused with an error. With ``--probe``, every config read cleanly is also measured
by ``kvcalc probe`` (shrunk random model on CPU) and any difference is listed.

A development check, not a test: it needs transformers (and torch for --probe), takes minutes with
--probe, and its answer changes with each transformers release. Run it after upgrading transformers
or changing the config reader:

    python scripts/transformers_sweep.py [--probe] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from kvcalc.errors import KvcalcError
from kvcalc.inputs.hf.configs import read_config


def saved_defaults() -> dict[str, str]:
    """model_type -> the JSON its config class writes with every default, for each causal LM."""
    import transformers  # here, as everywhere in kvcalc: only where it is needed
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = {}
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        config_class = getattr(transformers, CONFIG_MAPPING_NAMES.get(model_type, ""), None)
        if config_class is None:
            continue
        try:
            text = config_class().to_json_string()
        except Exception:  # a config class that needs arguments: nothing to read
            continue
        if "__float__" not in text:  # an infinite float transformers cannot read back
            found[model_type] = text
    return found


def probe(path: Path) -> str:
    """'match', or what kvcalc probe said."""
    run = subprocess.run(
        [sys.executable, "-m", "kvcalc", "probe", str(path), "--tokens", "40", "--device", "cpu", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if run.returncode == 0:
        return "match"
    if run.returncode == 1 and run.stdout:
        report = json.loads(run.stdout)
        return f"MISMATCH estimated {report['estimated_bytes']:,} measured {report['measured_bytes']:,}"
    return "not probed: " + (run.stderr.strip().splitlines() or ["?"])[-1][:160]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="also measure every config read cleanly")
    parser.add_argument("--out", type=Path, help="keep the saved configs in this folder")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    folder = args.out or Path(tempfile.mkdtemp(prefix="kvcalc-sweep-"))
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"clean": 0, "warned": 0, "refused": 0, "mismatch": 0}
    for model_type, text in saved_defaults().items():
        try:
            spec = read_config(json.loads(text), name=model_type)
        except KvcalcError as error:
            counts["refused"] += 1
            print(f"refused  {model_type}: {error}")
            continue
        if spec.warnings:
            counts["warned"] += 1
            print(f"warned   {model_type}: {', '.join(w.split(chr(39))[1] for w in spec.warnings)}")
            continue
        counts["clean"] += 1
        line = f"clean    {model_type}"
        if args.probe:
            path = folder / f"{model_type}.json"
            path.write_text(text)
            outcome = probe(path)
            counts["mismatch"] += outcome.startswith("MISMATCH")
            line += f": {outcome}"
        print(line)
    print(", ".join(f"{name} {count}" for name, count in counts.items()))
    return 1 if counts["mismatch"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
