"""The theoretical engine: what attention must keep, with no engine's allocation on top."""

from __future__ import annotations

from kvcalc.engines.base import ALL_STATE_FAMILIES, Engine
from kvcalc.engines.knobs import EnginePlugin


# Engine's own dataclass methods serve it (its name is Engine's default): no @dataclass of its own,
# which would generate them again at every start-up (~2 ms on Python 3.11).
class Theoretical(Engine):
    """Every token of a full layer, W of a sliding window of W, at most one chunk of a chunked
    layer, one latent per token for MLA, a fixed state for linear attention and Mamba; for
    DeepSeek-V4 one K = V row per window token, one entry (and indexer key) per ``ratio`` tokens,
    the T mod ratio tokens not yet pooled (in the KV format) and CSA's overlap state (a state, in
    the run dtype)."""

    @property
    def state_families(self) -> frozenset[str]:
        return ALL_STATE_FAMILIES

    def check_model_type(self, model_type: str) -> None:
        """Any format: the theoretical figure needs no engine to load it."""


THEORETICAL = Theoretical()

# The default engine: the figure every other engine is set beside.
PLUGIN = EnginePlugin(
    name="theoretical",
    summary="what attention must keep (the default)",
    rules="kvcalc.engines.theoretical:Theoretical",
)
