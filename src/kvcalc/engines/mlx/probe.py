"""``kvcalc probe --engine mlx``: run mlx_probe.py with the Python of an MLX environment and set every
layer's real cache bytes beside ``estimate --engine mlx`` of the same (shrunk) config.

mlx-lm runs on Apple silicon, and on Linux with ``mlx[cpu]``; it lives in an environment of its own
(README, "Macs and MLX"), found from ``--engine-python``, ``KVCALC_MLX_PYTHON``, or this Python when
it can import mlx_lm. The run is bounded (``timeout``) and its process group is killed when it
overruns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.child import engine_python, run_child, show

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate
    from kvcalc.engines.probing import Item

ENV_PYTHON = "KVCALC_MLX_PYTHON"
INSTALL_HINT = (
    "mlx-lm in its own environment: python3 -m venv .venv-mlx && .venv-mlx/bin/pip install 'mlx[cpu]==0.32.4' "
    f"mlx-lm==0.32.2 (on a Mac: mlx-lm==0.32.2), then --engine-python .venv-mlx/bin/python or {ENV_PYTHON}"
)
PROBE_FILE = Path(__file__).with_name("mlx_probe.py")
# Request fields that are not mlx-lm knobs (the view names the others).
_NOT_KNOBS = ("config", "tokens", "decode", "batch", "shrink", "seed")


def mlx_python(explicit: str | None = None) -> str:
    """The Python that runs mlx-lm: ``explicit``, then $KVCALC_MLX_PYTHON, then this one if it can
    import mlx_lm; else a one-line UsageError with the set-up."""
    return engine_python(explicit, ENV_PYTHON, "mlx_lm", "mlx-lm", INSTALL_HINT)


def run_probe(python: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run mlx_probe.py with ``python`` on ``request``; its JSON result."""
    return run_child(python, PROBE_FILE, request, timeout, engine="mlx-lm", doing="run its generate loop", env={})


@dataclass(frozen=True)
class LayerCheck:
    """One layer's cache: mlx-lm's class and bytes beside kvcalc's."""

    layer: int
    mlx_class: str
    measured: int
    estimated: int

    @property
    def match(self) -> bool:
        return self.measured == self.estimated


def layer_bytes(est: Estimate) -> list[int]:
    """Bytes of each model layer under the estimate (entries of one layer summed; a layer that
    caches nothing: 0)."""
    spec = est.model
    per_entry = {}
    for g in est.groups:
        per_entry[g.cache] = g.bytes // g.layers if g.layers else 0
    owners = spec.entry_layers or tuple(range(len(spec.caches)))
    totals = [0] * spec.layers
    for entry, layer in zip(spec.caches, owners, strict=True):
        totals[layer] += per_entry.get(entry, 0)
    return totals


def compare(result: dict[str, Any], est: Estimate) -> tuple[tuple[LayerCheck, ...], list[str]]:
    """mlx-lm's caches beside kvcalc's layers, in order. mlx-lm makes no cache for a layer that
    has none of its own (gemma3n's KV-shared layers, Nemotron-H's MLP blocks): where the counts
    differ, the layers that cache something are set side by side."""
    measured = [(str(layer["class"]), int(layer["nbytes"])) for layer in result["layers"]]
    ours = layer_bytes(est)
    notes = []
    indices = list(range(len(ours)))
    if len(measured) != len(ours):
        indices = [i for i, b in enumerate(ours) if b]
        notes.append(f"mlx-lm made {len(measured)} caches for {len(ours)} layers: the layers that cache something "
                     "are compared in order")  # fmt: skip
    checks = []
    for position, (cls, nbytes) in enumerate(measured):
        layer = indices[position] if position < len(indices) else -1
        checks.append(LayerCheck(layer, cls, nbytes, ours[layer] if layer >= 0 else 0))
    for layer in indices[len(measured) :]:
        checks.append(LayerCheck(layer, "none", 0, ours[layer]))
    return tuple(checks), notes


@dataclass(frozen=True)
class MLXProbe:
    """mlx-lm's real cache for a shrunk model beside ``estimate --engine mlx`` of that config."""

    model: str
    estimate: Estimate
    request: dict[str, Any]
    result: dict[str, Any]
    checks: tuple[LayerCheck, ...]
    notes: tuple[str, ...] = ()

    @property
    def measured_bytes(self) -> int:
        return sum(c.measured for c in self.checks)

    @property
    def match(self) -> bool:
        return all(c.match for c in self.checks) and self.measured_bytes == self.estimate.total_bytes

    def as_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "model": self.model,
            "engine": self.estimate.engine,
            "mlx_lm": r.get("mlx_lm_version"),
            "mlx": r.get("mlx_version"),
            "device": r.get("device"),
            "module": r.get("module"),
            "files": r.get("files"),
            "request": {k: v for k, v in self.request.items() if k != "config"},
            "config": r.get("config"),
            "layers": [
                {
                    "layer": c.layer,
                    "class": c.mlx_class,
                    "measured": c.measured,
                    "estimated": c.estimated,
                    "match": c.match,
                }
                for c in self.checks
            ],
            "measured_bytes": self.measured_bytes,
            "estimated_bytes": self.estimate.total_bytes,
            "match": self.match,
            "notes": list(self.notes),
        }

    def describe(self) -> list[Item]:
        from kvcalc.engines.child import check_rows

        r = self.result
        req = self.request
        shown = [(k, v) for k, v in req.items() if k not in _NOT_KNOBS and v is not None]
        knobs = ", ".join(f"{k} {v:,}" for k, v in shown)
        rows = [
            f"mlx-lm {r.get('mlx_lm_version')} (mlx {r.get('mlx_version')}, {r.get('device')}) vs kvcalc estimate "
            f"--engine {self.estimate.engine}: {self.model}",
            f"  {r.get('module')}, {r.get('dtype')}, prompt {req['tokens']:,} + {req['decode']:,} generated"
            f"{f', {knobs}' if knobs else ''}",
        ]
        rows += check_rows("mlx-lm", [(what, measured, estimated, measured == estimated)
                                      for what, measured, estimated in _grouped(self.checks)], width=14)  # fmt: skip
        rows[-1:-1] = [f"  {'total':<{_label_width(self.checks)}}  {show(self.measured_bytes):>14}  "
                       f"{show(self.estimate.total_bytes):>14}"]  # fmt: skip
        rows += [f"note: {note}" for note in self.notes]
        return list(rows)


def _grouped(checks: tuple[LayerCheck, ...]) -> list[tuple[str, int, int]]:
    """Runs of consecutive layers with the same class and figures as one row each."""
    rows: list[tuple[str, int, int]] = []
    start = 0
    for i in range(1, len(checks) + 1):
        first = checks[start]
        if i < len(checks) and (checks[i].mlx_class, checks[i].measured, checks[i].estimated) == (
                first.mlx_class, first.measured, first.estimated):  # fmt: skip
            continue
        span = f"layer {first.layer}" if i - start == 1 else f"layers {first.layer}-{checks[i - 1].layer}"
        rows.append((f"{span} {first.mlx_class}", first.measured, first.estimated))
        start = i
    return rows


def _label_width(checks: tuple[LayerCheck, ...]) -> int:
    return max(len(what) for what, *_ in _grouped(checks))


def version_note(result: dict[str, Any]) -> str | None:
    """One line when the mlx-lm the probe ran is not the release these rules were read from."""
    from kvcalc.engines.base import version_warning
    from kvcalc.engines.mlx.releases import RULES_VERSION

    return version_warning("mlx-lm", result.get("mlx_lm_version"), RULES_VERSION)
