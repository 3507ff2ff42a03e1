"""vLLM's KV cache groups (vllm/v1/core/kv_cache_utils.py @ 001cabc1): the KVCacheSpec kinds a
worker's layers form, their unified pages and block sizes, the block-table groups and the empty
layer slots padding them. Fit's block plan (capacity.py) and the estimate (``VLLM.arrange``) both
read it, so a workload's bytes are one answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc.calc.contracts import Arrangement
from kvcalc.engines.base import Engine, cdiv
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

if TYPE_CHECKING:
    from kvcalc.engines.vllm.rules import VLLM


@dataclass(frozen=True)
class VllmGroup:
    """Layers of one vLLM KVCacheSpec: a representative layer, how many there are, in how many
    block-table groups, and the group's block size in tokens."""

    cache: LayerCache
    kind: str
    layers: int
    groups: int
    block_size: int


@dataclass(frozen=True)
class Grouping:
    """vLLM's KV cache groups for one worker's layers (kv_cache_utils.py @ 001cabc1): the page every
    block index takes in each of ``group_size`` layer slots, the kinds with their block sizes and
    block-table groups, the empty slots per kind and the state page."""

    page_bytes: int
    group_size: int
    kinds: tuple[VllmGroup, ...]
    padding: dict[str, int]
    notes: tuple[str, ...]


def group_layers(engine: VLLM, layers: Sequence[tuple[LayerCache, int, int]]) -> Grouping:
    """Group ``layers`` ((cache, bytes of one token slot, state bytes) per layer of a worker) as
    vLLM's get_kv_cache_groups does: one KVCacheSpec per kind, pages unified, block-table groups of
    ``group_size`` layers (the last padded with empty slots)."""
    # Page bytes per layer (one block of block_size tokens, or one state), per vLLM spec.
    pages: dict[str, list[int]] = {}
    first: dict[str, LayerCache] = {}
    for cache, row, state in layers:
        if not cache.caches_tokens and not cache.is_state:
            continue  # KV-sharing layers allocate no cache of their own
        label = engine.spec_label(cache)
        pages.setdefault(label, []).append(state if cache.is_state else engine.block_size * row)
        first.setdefault(label, cache)
    if not pages:
        raise UsageError("the model has no KV cache for vLLM to size")
    counts = {kind: len(p) for kind, p in pages.items()}
    block = dict.fromkeys(pages, engine.block_size)
    notes: list[str] = []

    if len(pages) == 1:
        ((kind, layer_pages),) = pages.items()
        single = (VllmGroup(first[kind], kind, counts[kind], 1, engine.block_size),)
        if len(set(layer_pages)) == 1:  # one group of every layer, one page size
            return Grouping(layer_pages[0], len(layer_pages), single, {}, ())
        # UniformTypeKVCacheSpecs: layers of different sizes, one block spans them all
        notes.append("vLLM sizes one block across layers of different sizes (UniformTypeKVCacheSpecs)")
        return Grouping(sum(layer_pages), 1, single, {}, tuple(notes))

    for kind, layer_pages in pages.items():
        if len(set(layer_pages)) > 1:
            raise UsageError(f"vLLM cannot group {kind} layers of different sizes with other layer kinds")
    page_of = {kind: p[0] for kind, p in pages.items()}
    states = [k for k in page_of if first[k].is_state]
    if states:
        # Platform._align_hybrid_block_size (vllm/platforms/interface.py, 0.32): attention blocks
        # grow, in steps of max(kernel block, block_size) tokens, until an attention page holds a
        # mamba state, and never shrink below block_size; the mamba page is padded to the attention
        # page. Steps of 16 on CUDA's default 16-token blocks; 128 on the CPU build's.
        attention = [k for k in page_of if k not in states]
        per_token = max(page_of[k] // engine.block_size for k in attention)
        step = max(16, engine.block_size)
        size = max(engine.block_size, step * cdiv(max(page_of[k] for k in states), step * per_token))
        for k in attention:
            block[k] = size
            page_of[k] = page_of[k] // engine.block_size * size
        state_bytes = max(page_of[k] for k in states)
        for k in states:
            page_of[k] = max(page_of[a] for a in attention)
        page = max(page_of[a] for a in attention)
        grown = f"attention blocks grow to {size} tokens and " if size > engine.block_size else ""
        notes.append(
            f"vLLM's hybrid layout: {grown}each mamba state ({state_bytes:,} B) takes a whole page of {page:,} B "
            "(_align_hybrid_block_size; followed approximately)"
        )
    largest = max(page_of.values())
    for kind, page in page_of.items():
        if largest % page:
            raise UsageError(f"vLLM cannot unify page sizes {largest:,} and {page:,} bytes (NotImplementedError)")
        block[kind] *= largest // page  # unify_kv_cache_spec_page_size: smaller pages take more tokens
    smallest, most = min(counts.values()), max(counts.values())
    group_size = most if most < smallest * 1.5 else smallest
    kinds = tuple(VllmGroup(first[k], k, counts[k], cdiv(counts[k], group_size), block[k]) for k in pages)
    padding = {k.kind: k.groups * group_size - k.layers for k in kinds if k.groups * group_size > k.layers}
    if padding:
        notes.append(f"vLLM pads its layer groups with {sum(padding.values())} empty layer slot(s)")
    return Grouping(largest, group_size, kinds, padding, tuple(notes))


def arrange(engine: VLLM, layers: Sequence[tuple[LayerCache, int, int]]) -> Arrangement | None:
    """The estimate's view of vLLM's grouping (``Engine.arrange``): each kind held with its own
    block size, states padded to the page, empty layer slots costing as a layer of their kind."""
    grouped = group_layers(engine, layers)
    engines: dict[LayerCache, Engine] = {}
    state_bytes: dict[LayerCache, int] = {}
    for cache, _, _ in layers:
        kind = next((k for k in grouped.kinds if k.kind == engine.spec_label(cache)), None)
        if kind is None:
            continue
        if cache.is_state:
            if len(grouped.kinds) > 1:
                state_bytes[cache] = grouped.page_bytes
        elif kind.block_size != engine.block_size:
            engines[cache] = replace(engine, block_size=kind.block_size)
    padding = {k.cache: grouped.padding[k.kind] for k in grouped.kinds if k.kind in grouped.padding}
    if not (engines or state_bytes or padding or grouped.notes):
        return None
    return Arrangement(engines, state_bytes, padding, grouped.notes)
