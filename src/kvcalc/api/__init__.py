"""The public Python API, and the only thing the CLI calls.

Open a model once (``open_model``: a preset, a config.json, a Hub repo id or URL, or a geometry
given by hand) and ask about it: ``estimate``, ``estimate_requests`` (a request mix),
``compare``, ``fit`` and ``probe``. Every parameter takes plain Python values (ints for counts
and bytes, names or ``DType`` for formats); errors are ``KvcalcError`` subclasses whose
messages speak of these parameters.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Each public name and its service module, imported on first use (PEP 562): `kvcalc estimate`
# loads the estimate service alone, not fit's, probe's, speed's and offload's as well.
_EXPORTS = {
    "CapacityReport": "_simulate",
    "Load": "_simulate",
    "SimulationReport": "_simulate",
    "Slo": "_simulate",
    "StepTimes": "_simulate",
    "find_capacity": "_simulate",
    "meets": "_simulate",
    "parse_slo": "_simulate",
    "simulate": "_simulate",
    "CheckReport": "_check",
    "check": "_check",
    "observe": "_check",
    "watch": "_check",
    "compare": "_estimate",
    "estimate": "_estimate",
    "Capacity": "_fit",
    "list_engines": "_engines",
    "show_engine": "_engines",
    "read_engine_command": "_engines",
    "engine_command_lines": "_engines",
    "idle_knobs": "_engines",
    "write_engine_command": "_engines",
    "FitReport": "_fit",
    "cdiv_int": "_fit",
    "fit": "_fit",
    "Model": "_models",
    "load_model": "_models",
    "model_from_geometry": "_models",
    "model_from_source": "_models",
    "open_model": "_models",
    "OffloadReport": "_offload",
    "fit_offload": "_offload",
    "list_gpus": "_gpus",
    "show_gpu": "_gpus",
    "PresetSummary": "_presets",
    "list_presets": "_presets",
    "show_preset": "_presets",
    "ProbeReport": "_probe",
    "probe": "_probe",
    "probe_llamacpp": "_probe",
    "probe_request": "_probe",
    "probe_vllm": "_probe",
    "probe_sglang": "_probe",
    "probe_mlx": "_probe",
    "Sequences": "_sequences",
    "estimate_requests": "_requests",
    "read_requests": "_requests",
    "read_trace": "_requests",
    "KnobValue": "_serving",
    "Layout": "_serving",
    "Served": "_serving",
    "Serving": "_serving",
    "is_theoretical": "_serving",
    "resolve_serving": "_serving",
    "COMPUTE_DTYPES": "_speed",
    "Compute": "_speed",
    "DEFAULT_SWEEP": "_speed",
    "SpeedReport": "_speed",
    "speed": "_speed",
}

__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_SWEEP",
    "Capacity",
    "CapacityReport",
    "CheckReport",
    "Compute",
    "FitReport",
    "KnobValue",
    "Layout",
    "Load",
    "Model",
    "OffloadReport",
    "PresetSummary",
    "ProbeReport",
    "Sequences",
    "Served",
    "Serving",
    "SimulationReport",
    "Slo",
    "SpeedReport",
    "StepTimes",
    "cdiv_int",
    "check",
    "compare",
    "engine_command_lines",
    "estimate",
    "estimate_requests",
    "find_capacity",
    "fit",
    "fit_offload",
    "idle_knobs",
    "is_theoretical",
    "list_engines",
    "list_gpus",
    "list_presets",
    "load_model",
    "meets",
    "model_from_geometry",
    "model_from_source",
    "observe",
    "open_model",
    "parse_slo",
    "probe",
    "probe_llamacpp",
    "probe_mlx",
    "probe_request",
    "probe_sglang",
    "probe_vllm",
    "read_engine_command",
    "read_requests",
    "read_trace",
    "resolve_serving",
    "show_engine",
    "show_gpu",
    "show_preset",
    "simulate",
    "speed",
    "watch",
    "write_engine_command",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc.api' has no attribute {name!r}")
    value = getattr(import_module(f"kvcalc.api.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from kvcalc.api._check import CheckReport, check, observe, watch
    from kvcalc.api._engines import (
        engine_command_lines,
        idle_knobs,
        list_engines,
        read_engine_command,
        show_engine,
        write_engine_command,
    )
    from kvcalc.api._estimate import compare, estimate
    from kvcalc.api._fit import Capacity, FitReport, cdiv_int, fit
    from kvcalc.api._gpus import list_gpus, show_gpu
    from kvcalc.api._models import Model, load_model, model_from_geometry, model_from_source, open_model
    from kvcalc.api._offload import OffloadReport, fit_offload
    from kvcalc.api._presets import PresetSummary, list_presets, show_preset
    from kvcalc.api._probe import (
        ProbeReport,
        probe,
        probe_llamacpp,
        probe_mlx,
        probe_request,
        probe_sglang,
        probe_vllm,
    )
    from kvcalc.api._requests import estimate_requests, read_requests, read_trace
    from kvcalc.api._sequences import Sequences
    from kvcalc.api._serving import KnobValue, Layout, Served, Serving, is_theoretical, resolve_serving
    from kvcalc.api._simulate import (
        CapacityReport,
        Load,
        SimulationReport,
        Slo,
        StepTimes,
        find_capacity,
        meets,
        parse_slo,
        simulate,
    )
    from kvcalc.api._speed import COMPUTE_DTYPES, DEFAULT_SWEEP, Compute, SpeedReport, speed
