"""Property tests: mutated real configs fail only with a KvcalcError, and valid configs obey the
laws of the cache formula (linear in batch, linear in tokens below every window, bytes per
element, GQA grouping)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.api import model_from_geometry
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.dtypes import BF16, FP8, FP16, FP32, DType
from kvcalc.errors import KvcalcError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import ModelSpec, StateCache
from kvcalc.views.json import estimate_json
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))

# Keys configs.py reads: injecting them (with garbage) reaches branches the fixtures do not.
KNOWN_KEYS = (
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_attention_heads", "n_head",
    "num_heads", "n_heads", "hidden_size", "n_embd", "d_model", "dim", "num_key_value_heads",
    "num_kv_heads", "n_kv_heads", "n_head_kv", "head_dim", "d_kv", "kv_channels",
    "attention_head_size", "v_head_dim", "sliding_window", "sliding_window_size",
    "attention_window_size", "sliding_window_pattern", "use_sliding_window", "max_window_layers",
    "layer_types", "full_attention_interval", "attention_chunk_size", "no_rope_layers",
    "no_rope_layer_interval", "attn_layer_period", "attn_layer_offset", "kv_lora_rank",
    "qk_rope_head_dim", "num_kv_shared_layers", "multi_query", "multi_query_attention",
    "multi_query_group_num", "new_decoder_architecture", "is_encoder_decoder", "decoder_layers",
    "num_decoder_layers", "decoder_attention_heads", "decoder_key_value_heads",
    "max_source_positions", "model_type", "text_config", "llm_config", "language_config",
    "text_model_config", "thinker_config", "torch_dtype", "dtype", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "mamba_expand", "mamba_d_state", "mamba_d_conv", "expand",
    "state_size", "conv_kernel", "intermediate_size",
)  # fmt: skip
MEANINGFUL_STRINGS = (
    "llama", "mistral", "gemma2", "gemma3", "gemma3_text", "cohere2", "qwen3_next", "mamba",
    "falcon_mamba", "jamba", "t5", "whisper", "llama4_text", "falcon", "gpt_bigcode", "gpt_oss",
    "deepseek_v3", "clip_vision_model", "full_attention", "sliding_attention", "chunked_attention",
    "linear_attention", "attention", "local_attention", "bfloat16", "float8_e4m3fn", "torch.float32",
)  # fmt: skip

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 1, 2, 3, 7, 4096, 2**16, 2**16 + 1, 2**24, 2**24 + 1, 2**31, 2**63, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(MEANINGFUL_STRINGS)
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)

Path_ = tuple[Any, ...]


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value inside dicts and lists (dict keys and list indices)."""
    found: list[Path_] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


def _container(root: Any, path: Path_) -> Any:
    node = root
    for key in path[:-1]:
        node = node[key]
    return node


def _get(root: Any, path: Path_) -> Any:
    return _container(root, path)[path[-1]]


# Weighted: replacing the whole document is rare, so most examples reach the field checks.
MUTATIONS = ("drop",) * 4 + ("replace",) * 4 + ("negate",) * 2 + ("nest",) * 2 + ("inject",) * 4 + ("root",)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` after one to four random mutations."""
    config: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(MUTATIONS))
        if op == "root" or not isinstance(config, dict | list):
            config = draw(json_values)  # now and then the whole document is garbage
            continue
        paths = _paths(config)
        # Favour shallow paths: the fields kvcalc reads live at depth one or two.
        shallow = [p for p in paths if len(p) <= 2] or paths
        if op == "inject" or not paths:
            dicts = [(), *(p for p in paths if isinstance(_get(config, p), dict))]
            target = draw(st.sampled_from(dicts))
            holder = config if target == () else _get(config, target)
            if isinstance(holder, dict):
                holder[draw(st.sampled_from(KNOWN_KEYS))] = draw(json_values)
            continue
        path = draw(st.sampled_from(shallow if draw(st.booleans()) else paths))
        holder, key = _container(config, path), path[-1]
        if op == "drop":
            del holder[key]
        elif op == "replace":
            holder[key] = draw(json_values)
        elif op == "negate":
            numbers = [p for p in paths if type(_get(config, p)) in (int, float)]
            if numbers:
                target = draw(st.sampled_from(numbers))
                _container(config, target)[target[-1]] = -_get(config, target)
        else:  # nest the value, or garbage, one level down
            inner = draw(st.sampled_from([holder[key], draw(json_values)]))
            holder[key] = draw(st.sampled_from([[inner], {"value": inner}, {"a": {"b": [inner]}}]))
    return config


dtypes = st.sampled_from([None, FP8, FP16, BF16, FP32])


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_config_estimates_or_raises_kvcalc_error(name: str, data: st.DataObject) -> None:
    config = data.draw(mutated(fixture_config(name)), label="config")
    tokens = data.draw(st.integers(min_value=1, max_value=2**20), label="tokens")
    batch = data.draw(st.integers(min_value=1, max_value=256), label="batch")
    kv_dtype = data.draw(dtypes, label="kv_dtype")
    encoder_tokens = data.draw(st.none() | st.integers(min_value=1, max_value=8192), label="encoder")
    try:
        spec = read_config(config, name="x")
        result = estimate(spec, Workload(tokens=tokens, batch=batch, kv_dtype=kv_dtype, encoder_tokens=encoder_tokens))
    except KvcalcError:
        return
    assert isinstance(result, Estimate)
    total = result.total_bytes
    assert isinstance(total, int)
    assert not isinstance(total, bool)
    assert total >= 0
    assert all(g.bytes >= 0 for g in result.groups)
    json.dumps(estimate_json(result))  # what --json prints can always be printed


def test_every_fixture_reads_unmutated() -> None:
    assert FIXTURE_NAMES
    for name in FIXTURE_NAMES:
        read_config(fixture_config(name), name=name)


# --- laws on valid configs ---------------------------------------------------------------------

SPECS = {name: read_config(fixture_config(name), name=name) for name in FIXTURE_NAMES}


def total(spec: ModelSpec, tokens: int, batch: int = 1, dtype: DType | None = None, enc: int | None = None) -> int:
    return estimate(spec, Workload(tokens=tokens, batch=batch, kv_dtype=dtype, encoder_tokens=enc)).total_bytes


def smallest_bound(spec: ModelSpec) -> int:
    bounds = [c.token_bound for c in spec.caches if c.token_bound is not None]
    return min([*bounds, 2**20])


def has_state(spec: ModelSpec) -> bool:
    return any(isinstance(c, StateCache) or c.is_state for c in spec.caches)


def compresses(spec: ModelSpec) -> bool:
    """DeepSeek-V4's compressed attention keeps the tokens of an unfinished window until it closes,
    then one entry for them all: its cache steps down at every window boundary (the probe measures
    that too, tests/inputs/hf/families/test_deepseek_v4.py), so the laws of growth below do not hold for it."""
    return any(c.compress_ratio > 1 for c in spec.caches)


GROWING = [n for n in FIXTURE_NAMES if not compresses(SPECS[n])]


def test_compressed_attention_steps_down_when_a_window_closes() -> None:
    # DeepSeek-V4-Flash, theoretical, bf16: the 4th token closes the first CSA window. Its 21 CSA
    # layers then drop 3 pending tokens of 5,120 B each (projection and gate, 2 x 512 elements x 2 B
    # each, plus the indexer's two of 2 x 128 x 2 B) for one entry of 512 x 2 + 128 x 2 = 1,280 B:
    # 21 x (15,360 - 1,280) = 295,680 B less, while every layer's window gains a row
    # (43 x 512 x 2 = 44,032) and each HCA layer a pending token (20 x 2 x 512 x 2 = 40,960).
    spec = SPECS["DeepSeek-V4-Flash.json"]
    assert compresses(spec) and "DeepSeek-V4-Flash.json" not in GROWING
    assert total(spec, 3, 1) - total(spec, 4, 1) == 295_680 - 44_032 - 40_960 == 210_688


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@settings(max_examples=15, deadline=None)
@given(
    tokens=st.integers(min_value=1, max_value=2**20),
    batch=st.integers(min_value=1, max_value=64),
    factor=st.integers(min_value=2, max_value=16),
    dtype=dtypes,
)
def test_total_is_linear_in_batch(name: str, tokens: int, batch: int, factor: int, dtype: DType | None) -> None:
    spec = SPECS[name]
    assert total(spec, tokens, batch * factor, dtype) == factor * total(spec, tokens, batch, dtype)


@pytest.mark.parametrize("name", GROWING)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), batch=st.integers(min_value=1, max_value=8))
def test_total_is_linear_in_tokens_below_every_window(name: str, data: st.DataObject, batch: int) -> None:
    spec = SPECS[name]
    bound = smallest_bound(spec)
    tokens = data.draw(st.integers(min_value=1, max_value=bound), label="tokens")
    # Encoder tokens fixed: cross-attention then adds a constant, like recurrent state.
    enc = 512 if spec.is_encoder_decoder else None
    one = total(spec, 1, batch, enc=enc)
    if bound >= 2:
        slope = total(spec, 2, batch, enc=enc) - one
        assert total(spec, tokens, batch, enc=enc) == one + (tokens - 1) * slope
    if not has_state(spec) and spec.encoder_tokens is None:
        # Nothing fixed per sequence: strictly proportional (cross-attention follows the tokens).
        assert total(spec, tokens, batch) == tokens * total(spec, 1, batch)
    if not has_state(spec) and not spec.is_encoder_decoder:
        per_token = estimate(spec, Workload(tokens=1)).per_token_bytes
        assert total(spec, tokens, batch) == batch * tokens * per_token


@pytest.mark.parametrize("name", GROWING)
@settings(max_examples=10, deadline=None)
@given(tokens=st.integers(min_value=1, max_value=2**20), batch=st.integers(min_value=1, max_value=64))
def test_total_never_shrinks_with_more_tokens(name: str, tokens: int, batch: int) -> None:
    spec = SPECS[name]
    assert total(spec, tokens + 1, batch) >= total(spec, tokens, batch)


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if not has_state(SPECS[n])])
@settings(max_examples=10, deadline=None)
@given(tokens=st.integers(min_value=1, max_value=2**20), batch=st.integers(min_value=1, max_value=64))
def test_bytes_per_element_scale_the_total(name: str, tokens: int, batch: int) -> None:
    spec = SPECS[name]
    fp16 = total(spec, tokens, batch, FP16)
    assert 2 * total(spec, tokens, batch, FP8) == fp16
    assert total(spec, tokens, batch, BF16) == fp16
    assert total(spec, tokens, batch, FP32) == 2 * fp16


def test_the_state_model_is_excluded_from_the_dtype_law() -> None:
    # Qwen3-Next keeps Gated-DeltaNet state whose dtype does not follow --kv-dtype.
    assert has_state(SPECS["Qwen3-Next-80B-A3B.json"])


@st.composite
def geometries(draw: st.DrawFn) -> tuple[int, int, int, int]:
    heads = draw(st.integers(min_value=1, max_value=128))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    layers = draw(st.integers(min_value=1, max_value=160))
    head_dim = draw(st.integers(min_value=1, max_value=512))
    return layers, heads, kv_heads, head_dim


@settings(max_examples=150, deadline=None)
@given(
    geometry=geometries(),
    tokens=st.integers(min_value=1, max_value=2**20),
    batch=st.integers(min_value=1, max_value=256),
    dtype=st.sampled_from([FP8, FP16, BF16, FP32]),
)
def test_gqa_total_is_mha_total_scaled_by_kv_heads(
    geometry: tuple[int, int, int, int], tokens: int, batch: int, dtype: DType
) -> None:
    layers, heads, kv_heads, head_dim = geometry
    gqa = model_from_geometry(layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    mha = model_from_geometry(layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim)
    gqa_total = total(gqa, tokens, batch, dtype)
    assert gqa_total * heads == total(mha, tokens, batch, dtype) * kv_heads
    # The seed formula, M = 2 x L x B x T x H_kv x d_h x s.
    assert gqa_total == 2 * layers * batch * tokens * kv_heads * head_dim * dtype.bytes_per_element
