"""kvcalc: how much memory a transformer's KV cache takes, why, and whether it fits.

The public names below are imported on first use (PEP 562), so ``import kvcalc`` and the CLI's
start-up stay cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "estimate": "api",
    "load_model": "api",
    "model_from_geometry": "api",
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
    "StateCache": "spec",
}

__all__ = [
    "AttentionCache",
    "ConfigError",
    "DType",
    "Estimate",
    "GroupEstimate",
    "KvcalcError",
    "LatentCache",
    "LayerCache",
    "ModelSpec",
    "SharedCache",
    "SourceError",
    "StateCache",
    "UsageError",
    "Workload",
    "__version__",
    "estimate",
    "load_model",
    "model_from_geometry",
    "parse_dtype",
]

if TYPE_CHECKING:
    from .api import estimate as estimate
    from .api import load_model as load_model
    from .api import model_from_geometry as model_from_geometry
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
    from .spec import LatentCache as LatentCache
    from .spec import LayerCache as LayerCache
    from .spec import ModelSpec as ModelSpec
    from .spec import SharedCache as SharedCache
    from .spec import StateCache as StateCache


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
