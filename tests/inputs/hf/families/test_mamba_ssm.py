"""mamba_ssm's own checkpoint format (kvcalc.inputs.hf.families.mamba_ssm): each figure derived by
hand beside it from state-spaces/mamba @ e9594ce, whose modules allocate per sequence
(``allocate_inference_cache``):
- modules/mamba_simple.py (Mamba1), lines 255-266: conv_state (batch, d_model x expand, d_conv),
  ssm_state (batch, d_model x expand, d_state);
- modules/mamba2.py (Mamba2), lines 345-355: conv_state (batch, conv1d channels, d_conv), the
  channels d_ssm + 2 x ngroups x d_state (line 104; d_ssm = d_inner when not given, line 81), and
  ssm_state (batch, nheads, headdim, d_state) with nheads = d_ssm // headdim (line 85);
- modules/mha.py (MHA), lines 110-122: with d_conv > 0 a conv_state (batch, qkv_dim, d_conv), qkv_dim
  = head_dim x (num_heads + 2 x num_heads_kv) (line 90), beside kv_cache (batch, max_seqlen, 2,
  num_heads_kv, head_dim).
Every conv state keeps the whole kernel, d_conv columns."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.engines import ENGINE_NAMES, make_engine
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import AttentionCache, StateCache
from tests.helpers.theoretical import estimate

# state-spaces/mamba-2.8b's config.json (d_model 2560, n_layer 64, ssm_cfg {}).
MAMBA_SSM: dict[str, Any] = {
    "d_model": 2560, "n_layer": 64, "vocab_size": 50277, "ssm_cfg": {}, "rms_norm": True,
    "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 8,
}  # fmt: skip

# A small Mamba2 hybrid: d_model 256, 4 layers, MHA at layer 2 with a qkv conv.
SMALL: dict[str, Any] = {
    "d_model": 256, "n_layer": 4, "vocab_size": 100,
    "ssm_cfg": {"layer": "Mamba2", "d_state": 16, "headdim": 32, "d_ssm": 384},
    "attn_layer_idx": [2], "attn_cfg": {"num_heads": 4, "num_heads_kv": 2, "head_dim": 64, "d_conv": 4},
}  # fmt: skip


def test_mamba1_conv_state_keeps_d_conv_columns() -> None:
    spec = read_config(MAMBA_SSM, name="mamba-2.8b")
    assert spec.model_type == "mamba_ssm" and spec.warnings == ()
    # Mamba1 defaults: d_inner = 2 x 2560 = 5120; conv 5120 x 4 = 20,480 + state 5120 x 16 = 81,920:
    # 102,400 elements x 2 B (fp16: no dtype named) = 204,800 B per layer; x 64 = 13,107,200 B.
    # (kernel - 1 columns, as before: 97,280 x 2 x 64 = 12,451,840, short by 5120 x 2 x 64.)
    est = estimate(spec, Workload(tokens=1000))
    assert est.total_bytes == 64 * 102_400 * 2 == 13_107_200


def test_mamba2_hybrid_without_attention_conv() -> None:
    hybrid = {**MAMBA_SSM, "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [9, 18], "attn_cfg": {"num_heads": 20}}
    spec = read_config(hybrid, name="m2")
    # 62 Mamba2 layers: conv over 5120 + 2 x 1 x 128 = 5376 channels x 4 = 21,504, state 5120 x 128 =
    # 655,360: 676,864 elements x 2 B. 2 MHA layers of 20 heads of 2560 / 20 = 128, all KV:
    # 2 x 20 x 128 x 2 B = 10,240 B per token each; no attn_cfg.d_conv, so no conv (MHA's default 0).
    assert len(spec.caches) == 64
    assert any("'attn_cfg.d_conv' not in config" in n for n in spec.notes)
    assert any("'ssm_cfg.d_ssm' not in config" in n for n in spec.notes)
    est = estimate(spec, Workload(tokens=100))
    assert est.total_bytes == 62 * 676_864 * 2 + 2 * 100 * 10_240 == 85_979_136


def test_d_ssm_sizes_the_mamba2_conv_and_state() -> None:
    spec = read_config({**SMALL, "attn_layer_idx": []}, name="small")
    # d_inner = 2 x 256 = 512, d_ssm 384: conv over 384 + 2 x 1 x 16 = 416 channels x 4 = 1,664;
    # state 384 / 32 = 12 heads x 32 x 16 = 6,144 (not 512 x 16 = 8,192 as d_inner would give).
    state = spec.caches[0]
    assert isinstance(state, StateCache)
    assert (state.conv_elements, state.recurrent_elements) == (1_664, 6_144)
    # 4 layers x 7,808 elements x 2 B = 62,464 B per sequence.
    assert estimate(spec, Workload(tokens=7)).total_bytes == 4 * 7_808 * 2 == 62_464


def test_attention_conv_state_is_counted() -> None:
    spec = read_config(SMALL, name="small")
    # Layers 0, 1, 3: Mamba2 as above, 7,808 elements each. Layer 2: K/V of 2 heads x 64 = 256
    # elements per token, and a conv over 64 x (4 + 2 x 2) = 512 channels x 4 = 2,048 elements.
    assert spec.layers == 4 and spec.entry_layers == (0, 1, 2, 3, 2)
    conv = spec.caches[4]
    assert isinstance(spec.caches[2], AttentionCache) and isinstance(conv, StateCache)
    assert (conv.conv_elements, conv.recurrent_elements) == (2_048, 0)
    # 10 tokens, fp16: 3 x 7,808 x 2 = 46,848 + 10 x 256 x 2 = 5,120 + 2,048 x 2 = 4,096 = 56,064 B
    # a sequence; x 3 sequences = 168,192 B.
    assert estimate(spec, Workload(tokens=10)).total_bytes == 46_848 + 5_120 + 4_096 == 56_064
    assert estimate(spec, Workload(tokens=10, batch=3)).total_bytes == 3 * 56_064 == 168_192
    # attn_cfg.d_conv 0 (MHA's own default, said outright): no conv entry, no note.
    plain = read_config({**SMALL, "attn_cfg": {**SMALL["attn_cfg"], "d_conv": 0}}, name="plain")
    assert len(plain.caches) == 4 and not any("attn_cfg.d_conv" in n for n in plain.notes)
    assert estimate(plain, Workload(tokens=10)).total_bytes == 46_848 + 5_120


@pytest.mark.parametrize(
    ("ssm_cfg", "attn_cfg", "field"),
    [
        # Each object has its own arguments: MHA takes no expand, the mixers no num_heads.
        ({"layer": "Mamba2"}, {"num_heads": 4, "expand": 2}, r"'attn_cfg\.expand'"),
        ({"layer": "Mamba2", "num_heads": 4}, {"num_heads": 4}, r"'ssm_cfg\.num_heads'"),
        # Mamba1 (mamba_simple.py Mamba.__init__) takes no d_ssm, headdim or ngroups.
        ({"d_ssm": 256}, {"num_heads": 4}, r"'ssm_cfg\.d_ssm'"),
        ({"headdim": 32}, {"num_heads": 4}, r"'ssm_cfg\.headdim'"),
        # d_ssm past d_inner (2 x 256 = 512) leaves the gated MLP a negative width; headdim must divide d_ssm.
        ({"layer": "Mamba2", "d_ssm": 1024}, {"num_heads": 4}, r"'ssm_cfg\.d_ssm' \(1024\)"),
        ({"layer": "Mamba2", "d_ssm": 96}, {"num_heads": 4}, r"'ssm_cfg\.headdim' \(64\) must divide ssm_cfg\.d_ssm"),
        ({"layer": "Mamba2"}, {"num_heads": 4, "d_conv": -1}, r"'attn_cfg\.d_conv'"),
        ({"layer": "Mamba2"}, {"num_heads": 4, "d_conv": "4"}, r"'attn_cfg\.d_conv'"),
        ({"layer": "Mamba2"}, {"num_heads": 4, "d_conv": True}, r"'attn_cfg\.d_conv'"),
    ],
)
def test_fields_mamba_ssm_would_not_take_are_config_errors(
    ssm_cfg: dict[str, Any], attn_cfg: dict[str, Any], field: str
) -> None:
    config = {**SMALL, "ssm_cfg": ssm_cfg, "attn_cfg": attn_cfg}
    with pytest.raises(ConfigError, match=field):
        read_config(config, name="bad")


def test_mamba3_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"ssm_cfg\.layer"):
        read_config({**MAMBA_SSM, "ssm_cfg": {"layer": "Mamba3"}}, name="bad")


@pytest.mark.parametrize("engine_name", [name for name in ENGINE_NAMES if name != "theoretical"])
def test_only_the_theoretical_engine_sizes_the_format(engine_name: str) -> None:
    spec = read_config(SMALL, name="small")
    with pytest.raises(UsageError, match="own checkpoint format"):
        estimate(spec, Workload(tokens=10), engine=make_engine(engine_name)[0])
