"""Every model type the installed transformers ships with a cache, measured: kvcalc's
``--engine transformers`` figure beside the bytes of the real cache, or kvcalc's refusal.

For each model type in transformers' registries of causal language models, image/audio-text
models (their text part) and encoder-decoders, the sweep takes the config class's own defaults and
every real config in this repository of that type (tests/fixtures/*.json, model_presets/*.yaml).
Each is made tiny where that cannot change the layout kvcalc reads (windows and chunks cut to 16
tokens so that a 40-token run crosses them; ``is_decoder`` on for encoders that transformers runs
as causal LMs; infinite floats, which a saved config cannot hold, made finite), then ``kvcalc
probe`` builds the shrunk random-weight model, runs a real prefill and decode on the CPU and
compares the cache it measured with the estimate of the same config. Each case ends as one of:

- ``exact``: measured bytes equal the estimate, and kvcalc warned of nothing;
- ``refused``: kvcalc stops with an error naming the field that decides the cache;
- ``warned``: kvcalc gives its figure with a warning naming the fields it does not model, and
  the figure differs from the measurement (or transformers cannot measure it);
- ``warned, exact``: a warning, yet the figure equals transformers' cache: a false alarm for this
  engine (the field may still decide another engine's cache: GPT-Neo's local window);
- ``unmeasured``: transformers itself cannot build or run the config (its own default often
  lacks a field), or keeps no cache kvcalc's probe can read; the reason is transformers' own;
- ``mismatch``: kvcalc gave a figure without a warning and the real cache differs. Never allowed.

``--check`` compares every outcome with the record (docs/transformers-coverage.json) and fails
on any mismatch and on any outcome that changed (a new false alarm among them); ``--write``
rewrites the record and the table in docs/transformers-coverage.md. It takes about five minutes on two cores:

    python scripts/transformers_sweep.py --check
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "docs" / "transformers-coverage.json"
TABLE = ROOT / "docs" / "transformers-coverage.md"
# Windows and chunks are cut to this many tokens, below the 40 the probe runs.
SMALL_WINDOW = 16
TOKENS = 40
_WINDOW_KEYS = ("sliding_window", "sliding_window_size", "attention_window_size", "attention_chunk_size", "window_size")
_REGISTRIES = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "decoder"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "multimodal"),
    ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "multimodal"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "encoder-decoder"),
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "encoder-decoder"),
)


def registry() -> dict[str, str]:
    """model_type -> its role, for every model type transformers can run with a cache."""
    from transformers.models.auto import modeling_auto

    found: dict[str, str] = {}
    for name, role in _REGISTRIES:
        for model_type in getattr(modeling_auto, name):
            found.setdefault(model_type, role)
    return dict(sorted(found.items()))


def _finite(value: Any) -> Any:
    """The config with every infinite or NaN float replaced by 2^31 (JSON cannot hold them, and
    transformers cannot read its own placeholder back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return float(2**31)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def tiny(config: dict[str, Any], role: str) -> dict[str, Any]:
    """The config as the sweep runs it (the module's docstring)."""
    data = _finite(json.loads(json.dumps(config, default=str)))
    for part in (data, *(v for v in data.values() if isinstance(v, dict) and "model_type" in v)):
        for key in _WINDOW_KEYS:
            value = part.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > SMALL_WINDOW:
                part[key] = SMALL_WINDOW
        if role == "decoder" and part.get("is_decoder") is False and not part.get("is_encoder_decoder"):
            part["is_decoder"] = True  # BertLMHeadModel and its kin cache only as decoders
    return data


def default_config(model_type: str) -> dict[str, Any] | str:
    """The config class's defaults, as it saves them; or why there are none."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config_class = getattr(transformers, CONFIG_MAPPING_NAMES.get(model_type, ""), None)
    if config_class is None:
        return "transformers has no config class for it"
    try:
        return dict(config_class().to_dict())
    except Exception as exc:  # a config class that needs arguments
        return f"its config class has no defaults ({type(exc).__name__})"


def real_configs() -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, config) for every real config in the repository: fixtures and presets."""
    import yaml

    for path in sorted((ROOT / "tests" / "fixtures").glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("model_type"), str):
            yield f"tests/fixtures/{path.name}", data
    for path in sorted((ROOT / "model_presets").glob("*.yaml")):
        preset = yaml.safe_load(path.read_text())
        yield f"model_presets/{path.name}", preset["config"]


def run_case(config: dict[str, Any], folder: Path, label: str) -> dict[str, Any]:
    """One case's outcome and detail."""
    from kvcalc.api import estimate, probe
    from kvcalc.errors import KvcalcError
    from kvcalc.inputs.hf.configs import read_config

    try:
        spec = read_config(config, name=label)
    except KvcalcError as exc:
        return {"outcome": "refused", "detail": str(exc)}
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    fields = sorted({w.split("'")[1] for w in spec.warnings})
    try:  # kvcalc's side alone: the estimate under transformers' rules
        estimate(str(path), tokens=TOKENS, engine="transformers")
    except KvcalcError as exc:
        return {"outcome": "refused", "detail": str(exc)}
    try:
        report = probe(str(path), tokens=TOKENS, decode=2, device="cpu")
    except KvcalcError as exc:
        if spec.warnings:
            return {"outcome": "warned", "detail": ", ".join(fields), "measured": f"not measured: {exc}"[:200]}
        return {"outcome": "unmeasured", "detail": str(exc)[:200]}
    except Exception as exc:  # transformers failing in a way the probe does not catch
        return {"outcome": "unmeasured", "detail": f"{type(exc).__name__}: {str(exc)[:160]}"}
    figures = f"estimated {report.estimate.total_bytes:,}, measured {report.measured_bytes:,}"
    if spec.warnings:
        outcome = "warned, exact" if report.match else "warned"
        return {"outcome": outcome, "detail": ", ".join(fields), "measured": figures}
    return {"outcome": "exact" if report.match else "mismatch", "detail": figures}


def _portable(case: dict[str, Any]) -> dict[str, Any]:
    """The case with this checkout's path (in a traceback's module path) written as "."."""
    return {k: v.replace(str(ROOT), ".") if isinstance(v, str) else v for k, v in case.items()}


def sweep(only: set[str]) -> dict[str, dict[str, Any]]:
    """Every case's outcome, keyed "model_type" (its defaults) or "model_type <- file"."""
    folder = Path(tempfile.mkdtemp(prefix="kvcalc-sweep-"))
    types = registry()
    cases: dict[str, dict[str, Any]] = {}
    for model_type, role in types.items():
        if only and model_type not in only:
            continue
        config = default_config(model_type)
        if isinstance(config, str):
            cases[model_type] = {"role": role, "outcome": "unmeasured", "detail": config}
        else:
            cases[model_type] = {"role": role, **_portable(run_case(tiny(config, role), folder, model_type))}
        print(f"{cases[model_type]['outcome']:<11} {model_type}", file=sys.stderr, flush=True)
    for label, config in real_configs():
        model_type = config["model_type"]
        if only and model_type not in only:
            continue
        role = types.get(model_type, "remote code")
        key = f"{model_type} <- {label}"
        cases[key] = {"role": role, **_portable(run_case(tiny(config, role), folder, label))}
        print(f"{cases[key]['outcome']:<11} {key}", file=sys.stderr, flush=True)
    return cases


def summary(cases: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Model types (defaults only) by outcome."""
    counts: dict[str, int] = {}
    for key, case in cases.items():
        if " <- " not in key:
            counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    return dict(sorted(counts.items()))


def table(record: dict[str, Any]) -> str:
    counts = record["summary"]
    lines = [
        "# kvcalc against every transformers model type",
        "",
        f"Written by `scripts/transformers_sweep.py --write` with transformers {record['transformers']} "
        f"and torch {record['torch']}: the default config of each of the {sum(counts.values())} model types "
        "that transformers' registries run with a cache, and every real config in this repository, as "
        "a tiny random-weight model with a real prefill and decode (the script's docstring says how). "
        "The figure compared is kvcalc's `--engine transformers` estimate of the same config.",
        "",
        "Model types, by outcome: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + ".",
        "",
        "| case | role | outcome | detail |",
        "|---|---|---|---|",
    ]
    for key, case in record["cases"].items():
        detail = str(case.get("detail", "")).replace("|", "/")
        if case.get("measured"):
            detail += f" ({str(case['measured']).replace('|', '/')})"
        lines.append(f"| {key} | {case['role']} | {case['outcome']} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on a mismatch or any outcome unlike the record")
    parser.add_argument("--write", action="store_true", help="rewrite the record and its table")
    parser.add_argument("model_types", nargs="*", help="only these model types (no --write)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    cases = sweep(set(args.model_types))
    failures = [f"{k}: mismatch: {c['detail']}" for k, c in cases.items() if c["outcome"] == "mismatch"]
    if args.check:
        recorded = json.loads(RECORD.read_text())["cases"]
        for key, case in cases.items():
            old = recorded.get(key, {}).get("outcome")
            if old != case["outcome"] and case["outcome"] != "mismatch":
                failures.append(f"{key}: {case['outcome']} ({case['detail'][:120]}), recorded {old}")
        if not args.model_types:
            failures += [f"{key}: recorded, not swept" for key in recorded if key not in cases]
    if args.write and not args.model_types:
        record = {
            "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0],
            "summary": summary(cases),
            "cases": cases,
        }
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        TABLE.write_text(table(record))
    print(", ".join(f"{k} {n}" for k, n in summary(cases).items()))
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
