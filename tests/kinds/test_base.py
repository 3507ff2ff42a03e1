"""Layer kinds price their own attention for kvcalc speed: every kind either says what one of its
layers costs or refuses in one line, and kvcalc.calc.speed asks them instead of switching on the class."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

import kvcalc.calc.speed
from kvcalc import spec as spec_module
from kvcalc.calc.speed import AttentionShape, attention_flops
from kvcalc.errors import UsageError
from kvcalc.kinds.base import REQUIRED_HOOKS, Kind, LayerKind
from kvcalc.spec import (
    AttentionCache,
    CompressedCache,
    LatentCache,
    LayerCache,
    ModelSpec,
    NoCache,
    SharedCache,
    StateCache,
)

# ``LayerCache`` is the union of the kinds; their common base, which holds the defaults, is ``_Layer``.
BASE = spec_module._Layer


def _concrete_kinds() -> list[type]:
    found: list[type] = []
    todo = list(BASE.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not inspect.isabstract(cls) and not cls.__name__.startswith("_"):
            found.append(cls)
    return sorted(found, key=lambda c: c.__name__)


KINDS = _concrete_kinds()


def _sample(cls: type) -> Any:
    """One instance built from the dataclass's required fields alone (ints 64, the first literal), so
    a new kind is checked without anyone writing its sample."""
    hints = typing.get_type_hints(cls)
    args: dict[str, Any] = {}
    for name, param in inspect.signature(cls).parameters.items():
        if param.default is not inspect.Parameter.empty:
            continue
        hint = hints[name]
        if hint is int:
            args[name] = 64
        elif typing.get_origin(hint) is typing.Literal:
            args[name] = typing.get_args(hint)[0]
        else:
            raise AssertionError(f"{cls.__name__}.{name}: no sample value for {hint!r}")
    return cls(**args)


SAMPLES = [_sample(cls) for cls in KINDS] + [
    AttentionCache(8, 128, 128, window=16),
    AttentionCache(8, 128, 128, chunk=16),
    AttentionCache(8, 128, 128, tokens="encoder"),
    AttentionCache(8, 128, 128, tokens="image"),
    LatentCache(512, 64),  # no decompressed dims given
    StateCache("short_conv", 64, 3, 0),
]


def test_every_kind_is_in_the_union() -> None:
    assert KINDS and set(KINDS) == set(typing.get_args(LayerCache))


@pytest.mark.parametrize("cache", SAMPLES, ids=lambda c: f"{type(c).__name__}-{c.kind.value}")
@pytest.mark.parametrize(("context", "prefill", "topk"), [(100, 0, None), (0, 50, None), (100, 0, 16), (0, 50, 16)])
def test_kind_prices_or_refuses_in_one_line(cache: Any, context: int, prefill: int, topk: int | None) -> None:
    """Never an AttributeError or TypeError: an int, or the one-line refusal speed_refusal names."""
    refusal = cache.speed_refusal
    try:
        flops = cache.attention_flops(8, context=context, prefill=prefill, index_heads=4, index_topk=topk)
    except UsageError as e:
        message = str(e)
        assert refusal is not None and message == refusal
        assert message and "\n" not in message and cache.kind.value in message
        return
    assert refusal is None
    assert type(flops) is int and flops >= 0
    assert type(cache.reuses_kv) is bool and type(cache.is_kv_source) is bool
    assert not (cache.reuses_kv and cache.is_kv_source)


def test_refusals_keep_their_words() -> None:
    def refused(cache: LayerCache) -> str:
        spec = ModelSpec("m", (cache,), 1, 8, "test", None)
        with pytest.raises(UsageError) as info:
            attention_flops(spec, AttentionShape(8), context=10)
        return str(info.value)

    assert refused(CompressedCache(512, 4)) == "m: speed does not model the FLOPs of compressed_attention layers yet"
    assert refused(AttentionCache(8, 64, 64, tokens="encoder")) == (
        "m: speed models decoder-only attention; cross_attention is not modelled"
    )


# --- numbers worked out by hand ----------------------------------------------------------------------------
# The rule (AttentionCache.attention_flops): per query head, scores 2 x d_k and weighted values
# 2 x d_v FLOPs per attended token.


def test_gqa_decode_by_hand() -> None:
    # 32 query heads (8 KV heads, which do not enter the FLOPs), d_k = d_v = 128, 1,000 tokens cached:
    # per head, scores 2 x 128 x 1,000 = 256,000 and values 2 x 128 x 1,000 = 256,000: 512,000;
    # x 32 heads = 16,384,000.
    assert AttentionCache(8, 128, 128).attention_flops(32, context=1000) == 16_384_000


def test_sliding_window_prefill_by_hand() -> None:
    # A 4-token window, prefill of 6 tokens: positions 1..4 see 1 + 2 + 3 + 4 = 10 tokens, positions 5
    # and 6 see 4 each = 8, so 18 attended. 2 query heads, d_k = d_v = 128: 2 x 2 x (128 + 128) = 1,024
    # per attended token; x 18 = 18,432.
    assert AttentionCache(8, 128, 128, window=4).attention_flops(2, context=0, prefill=6) == 18_432


def test_mla_by_hand() -> None:
    mla = LatentCache(512, 64, 192, 128)  # latent 512, RoPE 64; decompressed d_k 192, d_v 128
    # Decode, absorbed: per head, scores over latent + RoPE 2 x (512 + 64) = 1,152 and values over the
    # latent 2 x 512 = 1,024: 2,176 per token; x 1,000 tokens = 2,176,000; x 16 heads = 34,816,000.
    assert mla.attention_flops(16, context=1000) == 34_816_000
    # Sparse (index_topk 256): 256 of the 1,000 tokens: 16 x 2,176 x 256 = 34,816 x 256 = 8,912,896.
    assert mla.attention_flops(16, context=1000, index_topk=256) == 8_912_896
    # Prefill of 10, decompressed: 2 x (192 + 128) = 640 per head per token; causal 1 + ... + 10 = 55
    # tokens: 640 x 55 = 35,200; x 16 heads = 563,200.
    assert mla.attention_flops(16, context=0, prefill=10) == 563_200


def test_state_by_hand() -> None:
    # Mamba, 10 conv channels, kernel 4 (3 past inputs kept: 30 conv elements), 100 recurrent
    # elements: 4 x 100 + 2 x 30 = 460 per token; a prefill of 7 tokens: 3,220.
    assert StateCache("mamba", 10, 4, 100).attention_flops(0, context=0, prefill=7) == 3_220


def test_shared_layer_costs_the_cheapest_attention_by_hand() -> None:
    caches = (AttentionCache(8, 128, 128), AttentionCache(8, 128, 128, window=4), SharedCache(), NoCache())
    spec = ModelSpec("m", caches, 4, 2, "test", None)
    # 2 query heads, decode after 100 tokens, 2 x 2 x (128 + 128) = 1,024 per attended token:
    # full 1,024 x 100 = 102,400; sliding 1,024 x 4 = 4,096; shared as the cheapest (the sliding
    # layer) 4,096; no-cache 0. Sum: 102,400 + 4,096 + 4,096 = 110,592.
    assert attention_flops(spec, AttentionShape(2), context=100) == 110_592


def test_roofline_does_not_switch_on_kinds() -> None:
    kinds = {cls.__name__ for cls in KINDS} | {BASE.__name__, "LayerCache"}
    tree = ast.parse(Path(kvcalc.calc.speed.__file__).read_text())
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            named += [n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name) and n.id in kinds]
    assert named == []


# The layer-kind interface (kvcalc.kinds.base.LayerKind): which hooks a kind must answer, and that
# every other one says it is optional and what its default does.


def test_a_layer_kind_names_its_required_hooks() -> None:
    # kind and explain are required: a kind lacking one is refused when it is defined.
    with pytest.raises(TypeError, match="explain"):

        class Half(LayerKind):
            @property
            def kind(self) -> Kind:
                return Kind.FULL

    assert LayerKind.kind.fget.__isabstractmethod__ and LayerKind.explain.__isabstractmethod__  # type: ignore[attr-defined]


def test_every_optional_layer_hook_says_so_and_names_its_default() -> None:
    hooks = {
        n for n in vars(LayerKind) if not n.startswith("_") and n not in ("tokens", "token_bound", *REQUIRED_HOOKS)
    }
    silent = [n for n in sorted(hooks) if "Optional: default" not in (inspect.getdoc(getattr(LayerKind, n)) or "")]
    assert silent == []
