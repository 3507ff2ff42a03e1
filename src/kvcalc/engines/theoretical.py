"""The theoretical engine: what attention must keep, with no engine's allocation on top."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Engine


@dataclass(frozen=True)
class Theoretical(Engine):
    """Every token of a full layer, W of a sliding window of W, at most one chunk of a chunked
    layer, one latent per token for MLA, a fixed state for linear attention and Mamba."""

    name: str = "theoretical"


THEORETICAL = Theoretical()
