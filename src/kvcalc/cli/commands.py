"""Import every command module once, so each registers itself on the app."""

from .compare import compare
from .estimate import estimate
from .fit import fit
from .presets import presets, presets_show
from .probe import probe
from .speed import speed

__all__ = ["compare", "estimate", "fit", "presets", "presets_show", "probe", "speed"]
