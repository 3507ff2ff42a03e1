"""Every figure kvcalc prints, as one JSON file, to compare two revisions.

Runs ``estimate``, ``fit`` and ``speed --json`` for every bundled preset under every engine
and a few workloads, in-process, and writes {command line: [exit code, stdout JSON or the error
line]}. A refactor that moves code must leave this file unchanged:

    python scripts/output_snapshot.py /tmp/before.json      # on the old revision
    python scripts/output_snapshot.py /tmp/after.json       # on the new one
    python scripts/output_snapshot.py --diff /tmp/before.json /tmp/after.json

``--diff`` prints each command whose result differs and exits 1 if any does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ENGINES = ("theoretical", "transformers", "vllm", "vllm-cpu", "vllm@0.11", "sglang", "llama.cpp",
           "llama-server", "mlx", "ollama", "lmstudio", "lmstudio-mlx")  # fmt: skip
SWEEP = sorted(
    {1, 2, 1000, 10**6}
    | {
        base + d
        for base in (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 32768, 131072, 262144, 1048576)
        for d in (-1, 0, 1)
    }
)
# The request mix of the ("estimate", "--lengths", "LENGTHS") workload: repeated, odd and
# boundary lengths.
LENGTHS_CSV = "prompt,output\n" + "".join(
    f"{p},{o}\n" for p, o in ((1, 0), (4095, 1), (4096, 0), (100, 28), (100, 28), (32767, 1), (7, 3))
)
WORKLOADS = (
    ("estimate", "--tokens", "1000"),
    ("estimate", "--tokens", "32k", "--batch", "4", "--kv-dtype", "fp8"),
    ("fit", "--gpu", "h100-sxm", "--tokens", "8k", "--batch", "2"),
    ("fit", "--kv-budget", "20GiB", "--tokens", "128k", "--batch", "3"),
    ("speed", "--gpu", "h100-sxm", "--prompt", "2k", "--output", "256"),
    ("compare", "--tokens", "1k,100k"),
    # Lengths on both sides of every window, chunk, page, block and cell padding the engines use.
    ("compare", "--tokens", ",".join(str(t) for t in SWEEP)),
    ("estimate", "--tokens", "4097", "--batch", "5", "--shared-prefix", "1000", "--pp", "2", "--dp", "2"),
    ("fit", "--kv-budget", "7GiB", "--tokens", "4097", "--batch", "5", "--dp", "5"),
    ("estimate", "--tokens", "8193", "--batch", "3", "--tp", "2"),
    ("estimate", "--lengths", "LENGTHS"),
)
# llama.cpp stores no fp8: its engines also run the quantized workload in its own q8_0.
LLAMACPP_WORKLOADS = (("estimate", "--tokens", "32k", "--batch", "4", "--kv-dtype", "q8_0"),)
# Every engine knob, on the engines that have it (and one refused where it changes nothing), so a
# change to how knobs are declared, parsed or validated shows here.
KNOB_WORKLOADS = {
    "vllm": (
        ("estimate", "--tokens", "5000", "--batch", "3", "--block-size", "32", "--max-batched-tokens", "2048"),
        ("fit", "--gpu", "h100-sxm", "--tokens", "8k", "--max-num-seqs", "64", "--enforce-eager"),
    ),
    "sglang": (("estimate", "--tokens", "5000", "--batch", "3", "--block-size", "16"),),
    "llama.cpp": (
        ("estimate", "--tokens", "5000", "--batch", "3", "--ubatch", "64", "--n-batch", "128", "--swa-full"),
        ("estimate", "--tokens", "5000", "--batch", "3", "--kv-unified", "--k-dtype", "q8_0", "--v-dtype", "q4_0"),
    ),
    "mlx": (
        ("estimate", "--tokens", "5000", "--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "0",
         "--prefill-step-size", "512", "--max-tokens", "100"),
        ("estimate", "--tokens", "5000", "--max-kv-size", "1024"),
    ),
    "theoretical": (("estimate", "--tokens", "1000", "--block-size", "32"),),
}  # fmt: skip
# Human output (tables and --explain) for a few presets, kept as text: views must not change either.
TEXT_PRESETS = ("llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "qwen3-next-80b-a3b", "jamba-v0.1", "whisper-large-v3")
TEXT_WORKLOADS = (
    ("estimate", "--tokens", "32k", "--batch", "2", "--explain"),
    ("fit", "--gpu", "h100-sxm", "--tokens", "8k"),
    ("speed", "--gpu", "h100-sxm", "--prompt", "2k", "--output", "256"),
    ("compare", "--tokens", "1k,100k"),
)


def _run(argv: list[str], text: bool = False) -> list[Any]:
    from kvcalc.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code == 0:
        return [code, out.getvalue() if text else json.loads(out.getvalue())]
    return [code, err.getvalue().strip()]


def snapshot(lengths: Path) -> dict[str, list[Any]]:
    from kvcalc.api import list_presets

    results: dict[str, list[Any]] = {}
    for preset in (p.preset.name for p in list_presets()):
        for engine in ENGINES:
            extra = LLAMACPP_WORKLOADS if engine.startswith("llama") else ()
            for command, *rest in (*WORKLOADS, *extra):
                argv = [command, preset, "--engine", engine, *rest, "--json"]
                # The key names the request mix, not the temporary file holding it.
                real = [str(lengths) if a == "LENGTHS" else a for a in argv]
                results[" ".join(argv)] = _run(real)
            for name, extra_knobs in KNOB_WORKLOADS.items():
                if engine.partition("@")[0] == name:
                    for command, *rest in extra_knobs:
                        argv = [command, preset, "--engine", engine, *rest, "--json"]
                        results[" ".join(argv)] = _run(argv)
    for preset in TEXT_PRESETS:
        for engine in ENGINES:
            for command, *rest in TEXT_WORKLOADS:
                argv = [command, preset, "--engine", engine, *rest]
                results["text: " + " ".join(argv)] = _run(argv, text=True)
    return results


def diff(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    changed = [key for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]
    for key in changed:
        print(f"differs: {key}\n  before: {json.dumps(old.get(key))[:300]}\n  after:  {json.dumps(new.get(key))[:300]}")
    print(f"{len(changed)} of {len(old.keys() | new.keys())} commands differ")
    return 1 if changed else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--diff"] and len(argv) == 3:
        return diff(Path(argv[1]), Path(argv[2]))
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["COLUMNS"] = "200"
    with tempfile.TemporaryDirectory() as scratch:
        lengths = Path(scratch) / "lengths.csv"
        lengths.write_text(LENGTHS_CSV)
        results = snapshot(lengths)
    Path(argv[0]).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    failed = sum(1 for code, _ in results.values() if code != 0)
    print(f"{len(results)} commands, {failed} refused or failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
