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
    "Request": "workloads",
    "RequestSummary": "workloads",
    "Comparison": "comparison",
    "Kind": "spec",
    "DType": "dtypes",
    "parse_dtype": "dtypes",
    "ConfigError": "errors",
    "KvcalcError": "errors",
    "SourceError": "errors",
    "UsageError": "errors",
    "Estimate": "estimator",
    "GroupEstimate": "estimator",
    "Workload": "estimator",
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
    "Comparison",
    "ConfigError",
    "DType",
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
    from .api import FitReport as FitReport
    from .api import Layout as Layout
    from .api import Model as Model
    from .api import ProbeReport as ProbeReport
    from .api import Serving as Serving
    from .api import SpeedReport as SpeedReport
    from .api import compare as compare
    from .api import estimate as estimate
    from .api import estimate_requests as estimate_requests
    from .api import fit as fit
    from .api import fit_offload as fit_offload
    from .api import list_presets as list_presets
    from .api import load_model as load_model
    from .api import model_from_geometry as model_from_geometry
    from .api import open_model as open_model
    from .api import probe as probe
    from .api import probe_request as probe_request
    from .api import read_requests as read_requests
    from .api import show_preset as show_preset
    from .api import speed as speed
    from .comparison import Comparison as Comparison
    from .dtypes import DType as DType
    from .dtypes import parse_dtype as parse_dtype
    from .errors import ConfigError as ConfigError
    from .errors import KvcalcError as KvcalcError
    from .errors import SourceError as SourceError
    from .errors import UsageError as UsageError
    from .estimator import Estimate as Estimate
    from .estimator import GroupEstimate as GroupEstimate
    from .estimator import Workload as Workload
    from .spec import AttentionCache as AttentionCache
    from .spec import Kind as Kind
    from .spec import LatentCache as LatentCache
    from .spec import LayerCache as LayerCache
    from .spec import ModelSpec as ModelSpec
    from .spec import NoCache as NoCache
    from .spec import SharedCache as SharedCache
    from .spec import StateCache as StateCache
    from .workloads import Request as Request
    from .workloads import RequestSummary as RequestSummary


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
