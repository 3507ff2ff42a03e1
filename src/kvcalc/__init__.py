"""kvcalc: how much memory a transformer's KV cache takes, why, and whether it fits.

The public names below are imported on first use (PEP 562), so ``import kvcalc`` and the CLI's
start-up stay cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Model": "api",
    "open_model": "api",
    "estimate": "api",
    "estimate_requests": "api",
    "read_requests": "api",
    "compare": "api",
    "fit": "api",
    "fit_offload": "api",
    "speed": "api",
    "SpeedReport": "api",
    "probe": "api",
    "probe_request": "api",
    "list_presets": "api",
    "show_preset": "api",
    "FitReport": "api",
    "ProbeReport": "api",
    "load_model": "api",
    "model_from_geometry": "api",
    "Serving": "api",
    "Layout": "api",
    "Sequences": "api",
    "Capacity": "api",
    "Compute": "api",
    "Request": "calc.requests",
    "RequestSummary": "calc.requests",
    "Comparison": "calc.compare",
    "Kind": "spec",
    "DType": "dtypes",
    "parse_dtype": "dtypes",
    "ConfigError": "errors",
    "DependencyError": "errors",
    "KvcalcError": "errors",
    "SourceError": "errors",
    "UsageError": "errors",
    "Estimate": "calc.estimate",
    "GroupEstimate": "calc.estimate",
    "Workload": "calc.estimate",
    "AttentionCache": "spec",
    "LatentCache": "spec",
    "LayerCache": "spec",
    "ModelSpec": "spec",
    "SharedCache": "spec",
    "NoCache": "spec",
    "StateCache": "spec",
}

__all__ = [
    "AttentionCache",
    "Capacity",
    "Comparison",
    "Compute",
    "ConfigError",
    "DType",
    "DependencyError",
    "Estimate",
    "FitReport",
    "GroupEstimate",
    "Kind",
    "KvcalcError",
    "LatentCache",
    "LayerCache",
    "Layout",
    "Model",
    "ModelSpec",
    "NoCache",
    "ProbeReport",
    "Request",
    "RequestSummary",
    "Sequences",
    "Serving",
    "SharedCache",
    "SourceError",
    "SpeedReport",
    "StateCache",
    "UsageError",
    "Workload",
    "__version__",
    "compare",
    "estimate",
    "estimate_requests",
    "fit",
    "fit_offload",
    "list_presets",
    "load_model",
    "model_from_geometry",
    "open_model",
    "parse_dtype",
    "probe",
    "probe_request",
    "read_requests",
    "show_preset",
    "speed",
]

if TYPE_CHECKING:
    from kvcalc.api import Capacity as Capacity
    from kvcalc.api import Compute as Compute
    from kvcalc.api import FitReport as FitReport
    from kvcalc.api import Layout as Layout
    from kvcalc.api import Model as Model
    from kvcalc.api import ProbeReport as ProbeReport
    from kvcalc.api import Sequences as Sequences
    from kvcalc.api import Serving as Serving
    from kvcalc.api import SpeedReport as SpeedReport
    from kvcalc.api import compare as compare
    from kvcalc.api import estimate as estimate
    from kvcalc.api import estimate_requests as estimate_requests
    from kvcalc.api import fit as fit
    from kvcalc.api import fit_offload as fit_offload
    from kvcalc.api import list_presets as list_presets
    from kvcalc.api import load_model as load_model
    from kvcalc.api import model_from_geometry as model_from_geometry
    from kvcalc.api import open_model as open_model
    from kvcalc.api import probe as probe
    from kvcalc.api import probe_request as probe_request
    from kvcalc.api import read_requests as read_requests
    from kvcalc.api import show_preset as show_preset
    from kvcalc.api import speed as speed
    from kvcalc.calc.compare import Comparison as Comparison
    from kvcalc.calc.estimate import Estimate as Estimate
    from kvcalc.calc.estimate import GroupEstimate as GroupEstimate
    from kvcalc.calc.estimate import Workload as Workload
    from kvcalc.calc.requests import Request as Request
    from kvcalc.calc.requests import RequestSummary as RequestSummary
    from kvcalc.dtypes import DType as DType
    from kvcalc.dtypes import parse_dtype as parse_dtype
    from kvcalc.errors import ConfigError as ConfigError
    from kvcalc.errors import KvcalcError as KvcalcError
    from kvcalc.errors import SourceError as SourceError
    from kvcalc.errors import UsageError as UsageError
    from kvcalc.spec import AttentionCache as AttentionCache
    from kvcalc.spec import Kind as Kind
    from kvcalc.spec import LatentCache as LatentCache
    from kvcalc.spec import LayerCache as LayerCache
    from kvcalc.spec import ModelSpec as ModelSpec
    from kvcalc.spec import NoCache as NoCache
    from kvcalc.spec import SharedCache as SharedCache
    from kvcalc.spec import StateCache as StateCache


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's own names and the public API, which loads lazily (so ``dir(kvcalc)`` and
    tab completion show it before first use)."""
    return sorted(set(globals()) | set(__all__))
