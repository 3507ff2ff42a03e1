"""The public Python API, and the only thing the CLI calls.

Open a model once (``open_model``: a preset, a config.json, a Hub repo id or URL, or a geometry
given by hand) and ask about it: ``estimate``, ``estimate_requests`` (a request mix),
``compare``, ``fit`` and ``probe``. Every parameter takes plain Python values (ints for counts
and bytes, names or ``DType`` for formats); errors are ``KvcalcError`` subclasses whose
messages speak of these parameters.
"""

from __future__ import annotations

from kvcalc.api._estimate import compare, estimate
from kvcalc.api._fit import FitReport, cdiv_int, fit
from kvcalc.api._models import Model, load_model, model_from_geometry, model_from_source, open_model
from kvcalc.api._offload import OffloadReport, fit_offload
from kvcalc.api._presets import PresetSummary, list_presets, show_preset
from kvcalc.api._probe import ProbeReport, probe, probe_llamacpp, probe_request, probe_vllm
from kvcalc.api._requests import estimate_requests, read_requests
from kvcalc.api._serving import KnobValue, Layout, Served, Serving, is_theoretical, resolve_serving
from kvcalc.api._speed import COMPUTE_DTYPES, DEFAULT_SWEEP, SpeedReport, speed

__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_SWEEP",
    "FitReport",
    "KnobValue",
    "Layout",
    "Model",
    "OffloadReport",
    "PresetSummary",
    "ProbeReport",
    "Served",
    "Serving",
    "SpeedReport",
    "cdiv_int",
    "compare",
    "estimate",
    "estimate_requests",
    "fit",
    "fit_offload",
    "is_theoretical",
    "list_presets",
    "load_model",
    "model_from_geometry",
    "model_from_source",
    "open_model",
    "probe",
    "probe_llamacpp",
    "probe_request",
    "probe_vllm",
    "read_requests",
    "resolve_serving",
    "show_preset",
    "speed",
]
