"""kvcalc: how much memory a transformer's KV cache takes, why, and whether it fits."""

from __future__ import annotations

from .api import estimate, load_model, model_from_geometry
from .dtypes import DType, parse_dtype
from .errors import ConfigError, KvcalcError, SourceError, UsageError
from .estimate import Estimate, GroupEstimate, Workload
from .spec import AttentionCache, LatentCache, LayerCache, ModelSpec, SharedCache, StateCache

__version__ = "0.1.0"

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
