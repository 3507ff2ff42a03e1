"""The CLI must start fast: the common paths never import torch, transformers or huggingface_hub,
and a command imports no other command's modules (benchmarks/startup.py times the result).

Each case runs ``kvcalc.cli.main`` in a fresh interpreter (modules imported by other tests would
otherwise hide a stray import) and reports which heavy modules were imported -- or even
attempted, so a guarded ``try: import torch`` is caught where torch is not installed too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("torch", "transformers", "huggingface_hub")

# Runs in the child. argv comes in as JSON on the command line; one JSON line comes out.
_CHILD = textwrap.dedent(
    """
    import contextlib, io, json, sys

    HEAVY = {heavy!r}
    attempted = []

    class Recorder:
        # Records attempts to import a heavy module, then lets the normal finders run.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                attempted.append(name)
            return None

    sys.meta_path.insert(0, Recorder())

    from kvcalc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(json.loads(sys.argv[1]))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    print(json.dumps({{"code": code, "stdout": out.getvalue(), "loaded": loaded,
                      "attempted": sorted(set(attempted))}}))
    """
).format(heavy=HEAVY)


def _run_child(argv: list[str], cwd: Path) -> dict[str, Any]:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama-3.1-8b", "--tokens", "2048", "--json"],
        ["estimate", "llama-3.1-8b", "--tokens", "32k"],
        ["presets"],
        ["presets", "--json"],
        ["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"],
    ],
    ids=["estimate-json", "estimate-table", "presets", "presets-json", "speed-json"],
)
def test_common_paths_import_no_heavy_modules(argv: list[str], tmp_path: Path) -> None:
    report = _run_child(argv, tmp_path)
    assert report["code"] == 0, report["stdout"]
    assert report["loaded"] == [], f"kvcalc {' '.join(argv)} imported {', '.join(report['loaded'])}"
    assert report["attempted"] == [], f"kvcalc {' '.join(argv)} tried to import {', '.join(report['attempted'])}"


def test_estimate_json_is_the_seed_worked_example(tmp_path: Path) -> None:
    report = _run_child(["estimate", "llama-3.1-8b", "--tokens", "2048", "--json"], tmp_path)
    data = json.loads(report["stdout"])
    # 2 (K and V) x 32 layers x 2048 tokens x 8 KV heads x 128 head dim x 2 bytes (bf16)
    assert data["total_bytes"] == 2 * 32 * 2048 * 8 * 128 * 2 == 268435456


def test_presets_json_lists_every_bundled_preset(tmp_path: Path) -> None:
    report = _run_child(["presets", "--json"], tmp_path)
    names = {row["name"] for row in json.loads(report["stdout"])}
    repo_presets = Path(__file__).resolve().parents[1] / "model_presets"
    assert names == {p.stem for p in repo_presets.glob("*.yaml")}


# Every engine's rules and what only they load (each engine package's options.py is light).
_RULES = ("kvcalc.engines.transformers.rules", "kvcalc.engines.vllm.rules", "kvcalc.engines.vllm.capacity",
          "kvcalc.engines.sglang.rules", "kvcalc.engines.mlx.rules", "kvcalc.engines.llamacpp.rules",
          "kvcalc.engines.llamacpp.architectures")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        # The theoretical engine on a preset: no other engine's rules (the CLI reads every engine's
        # knobs from its light options module alone), no GGUF reader, and no fractions (only fit's
        # shares use it; it costs ~2 ms of start-up).
        (["estimate", "llama-3.1-8b", "--json"],
         ("fractions", *_RULES, "kvcalc.inputs.gguf")),
        (["estimate", "llama-3.1-8b", "--engine", "vllm", "--json"],
         ("fractions", *(m for m in _RULES if ".vllm." not in m), "kvcalc.inputs.gguf")),
    ],
    ids=["theoretical", "vllm"],
)  # fmt: skip
def test_an_estimate_imports_only_its_own_engine(argv: list[str], absent: tuple[str, ...], tmp_path: Path) -> None:
    assert _imported(argv, absent, tmp_path) == []


# Each command's own modules: the CLI module, its calc and its view (kvcalc.cli.commands imports a
# command's module only when it runs).
_COMMAND_MODULES = {
    "compare": ("kvcalc.cli.compare", "kvcalc.calc.compare", "kvcalc.views.compare", "kvcalc.charts"),
    "engines": ("kvcalc.cli.engines", "kvcalc.api._engines", "kvcalc.views.engines"),
    "fit": ("kvcalc.cli.fit", "kvcalc.api._fit", "kvcalc.api._offload", "kvcalc.calc.fit", "kvcalc.calc.offload",
            "kvcalc.views.fit", "kvcalc.gpus"),
    "presets": ("kvcalc.cli.presets", "kvcalc.api._presets", "kvcalc.views.presets"),
    "gpus": ("kvcalc.cli.gpus", "kvcalc.api._gpus", "kvcalc.views.gpus"),
    "probe": ("kvcalc.cli.probe", "kvcalc.api._probe", "kvcalc.views.probe"),
    "speed": ("kvcalc.cli.speed", "kvcalc.api._speed", "kvcalc.calc.speed", "kvcalc.views.speed", "kvcalc.gpus"),
}  # fmt: skip
_NOT_ESTIMATE = tuple(dict.fromkeys(m for modules in _COMMAND_MODULES.values() for m in modules))
_EVERY_COMMAND = ("kvcalc.cli.estimate", "kvcalc.cli.options", "kvcalc.api", "kvcalc.engines", *_NOT_ESTIMATE)


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        # --json draws nothing: no rich, and not the table views either.
        (["estimate", "llama-3.1-8b", "--tokens", "32k", "--json"],
         (*_NOT_ESTIMATE, "rich", "kvcalc.views.console", "kvcalc.views.table", "kvcalc.views.estimate")),
        (["estimate", "llama-3.1-8b", "--tokens", "32k"], _NOT_ESTIMATE),
        (["--help"], _EVERY_COMMAND),
        (["--version"], _EVERY_COMMAND),
    ],
    ids=["estimate-json", "estimate-table", "help", "version"],
)  # fmt: skip
def test_a_command_imports_no_other_commands_modules(argv: list[str], absent: tuple[str, ...], tmp_path: Path) -> None:
    loaded = _imported(argv, absent, tmp_path)
    assert loaded == [], f"kvcalc {' '.join(argv)} imported {', '.join(loaded)}"


def _imported(argv: list[str], prefixes: tuple[str, ...], cwd: Path) -> list[str]:
    """The modules named by ``prefixes`` (a module and its submodules) that ``kvcalc ARGV`` imports,
    run in a fresh interpreter."""
    code = (
        "import contextlib, io, json, sys\n"
        "from kvcalc.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit as exc:\n        assert not exc.code, exc.code\n"
        f"ours = [m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {prefixes!r})]\n"
        "print(json.dumps(sorted(ours)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded
