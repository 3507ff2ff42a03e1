"""What calc needs from an engine, and nothing more: the contracts engines implement.

calc imports no engine: it asks ``StorageRules`` (an engine's storage rules, as the estimate, the
plan, fit, compare and the request mixes call them) and reads a ``CapacityPlan`` (an engine's own
answer to fit, which describes itself for the table and for JSON). ``engines.base.Engine``
implements the first; the engines with capacity arithmetic of their own (vLLM's block plan, SGLang's
pools) the second. ``Arrangement`` is the pool layout an engine may hand back; ``cdiv`` / ``pad``
(the integer arithmetic both sides share) live in ``calc/pages.py``, re-exported here. The protocols
name calc's own types (``Workload``, ``Estimate``, ``Fit``), so they live in calc, below every
engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

# The arithmetic both sides share at run time lives in pages.py: calc and engines.base import these
# protocols for type checking only (a Protocol costs about 1 ms to define, which every command's
# start-up would pay); an engine that builds an Arrangement (vLLM) loads this module.
from kvcalc.calc.pages import cdiv, pad

__all__ = ["Arrangement", "CapacityPlan", "StorageRules", "cdiv", "pad"]

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate, Workload
    from kvcalc.calc.fit import Fit
    from kvcalc.dtypes import DType
    from kvcalc.spec import LayerCache, ModelSpec


@dataclass(frozen=True)
class Arrangement:
    """How an engine lays the layers' pages out in its pool, beyond each layer's own rows (vLLM's
    layer groups): the rules each layer kind is held by (larger blocks), the bytes a state takes
    (a page padded to the pool's page), and empty layer slots, each costing as one layer of the
    kind it pads. ``StorageRules.arrange`` gives it; estimate, compare, fit and speed all see it."""

    engines: Mapping[LayerCache, StorageRules] = field(default_factory=dict)
    state_bytes: Mapping[LayerCache, int] = field(default_factory=dict)
    padding: Mapping[LayerCache, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


class StorageRules(Protocol):
    """An engine's storage rules as calc asks them (``engines.base.Engine`` documents each hook and
    gives its default): checks that refuse what the engine cannot hold, the formats it picks, and
    the token slots a layer holds for a length, a batch and a shared prefix."""

    @property
    def name(self) -> str: ...

    # Refusals: each raises a UsageError naming what the engine cannot hold.
    def check_model_type(self, model_type: str) -> None: ...
    def check_dtype(self, dtype: DType) -> None: ...
    def check_layer(self, cache: LayerCache) -> None: ...
    def check_state(self, cache: LayerCache) -> None: ...
    def check_shared_prefix(self, prefix: int) -> None: ...

    # Formats and the model as the engine builds it.
    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]: ...
    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]: ...
    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]: ...
    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType: ...

    # Slots and rows.
    def rows(self, cache: LayerCache, tp: int) -> tuple[int, int, int | None]: ...
    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int: ...
    def tokens_held(self, cache: LayerCache, tokens: int) -> int: ...
    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int: ...
    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]: ...
    def full_precision_slots(self, kept: int, tokens: int, residual: int) -> int: ...
    def full_precision_drops(self, residual: int) -> tuple[int, ...]: ...

    @property
    def base_slot_rules(self) -> bool:
        """Whether ``layer_tokens``, ``tokens_held`` and ``batch_slots`` are the base rules (a
        sequence holds min(tokens, the layer's bound) slots), so a plan need not ask per length."""
        ...

    def arrange(self, layers: Sequence[tuple[LayerCache, int, int]]) -> Arrangement | None: ...

    # Fit.
    def capacity(self, spec: ModelSpec, workload: Workload, budget: int, context_limit: int | None) -> Fit | None: ...
    def max_tokens(self, probe: Estimate, budget: int) -> int: ...


class CapacityPlan(Protocol):
    """An engine's own capacity arithmetic for one budget (vLLM's blocks, SGLang's pools), as
    ``Fit.plan`` carries it: the views ask it to describe itself and name no engine."""

    @property
    def held_by(self) -> StorageRules | None:
        """The rules the pool's groups follow where they differ from the engine asked (vLLM's
        layer groups configure the engine again); None: the engine asked."""
        ...

    @property
    def refused_because(self) -> str | None:
        """One line saying why the engine refuses this budget or model (naming the engine), or None."""
        ...

    def table_lines(self) -> list[str]:
        """The plan's lines in ``kvcalc fit``'s table (each fits 80 columns with its label)."""
        ...

    def json_fields(self) -> dict[str, Any]:
        """The plan's entry in fit's JSON, ``{key: {...}}``, its key one of ``engines.PLAN_JSON_KEYS``
        (fit's JSON gives the others as null)."""
        ...
