"""Encoder-decoder configs that name their counts per side, composite configs that nest the decoder,
looped layers, and the older spellings of heads and widths: each figure derived by hand beside it.

Sources (transformers 5.24): models/moonshine/configuration_moonshine.py (encoder_num_hidden_layers,
decoder_num_hidden_layers, decoder_num_attention_heads, decoder_num_key_value_heads; head_dim =
hidden_size // num_attention_heads in modeling_moonshine.py, padded only after the cache update);
models/prophetnet/configuration_prophetnet.py (num_encoder_layers, num_decoder_layers,
num_decoder_attention_heads); models/cohere_asr/configuration_cohere_asr.py (head_dim);
models/xglm/configuration_xglm.py (num_layers, attention_heads, d_model); models/xlm (emb_dim,
n_heads, and bos/eos/pad/unk/mask_index token ids)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind

# MoonshineConfig's defaults (UsefulSensors/moonshine-tiny geometry): hidden 288, 6 + 6 layers, 8 heads.
MOONSHINE: dict[str, Any] = {
    "model_type": "moonshine", "is_encoder_decoder": True, "hidden_size": 288,
    "encoder_num_hidden_layers": 6, "decoder_num_hidden_layers": 4, "encoder_num_attention_heads": 8,
    "decoder_num_attention_heads": 8, "encoder_num_key_value_heads": 8, "decoder_num_key_value_heads": 2,
    "pad_head_dim_to_multiple_of": 8, "max_position_embeddings": 512,
}  # fmt: skip


def test_moonshine_reads_the_decoder_side() -> None:
    spec = read_config(MOONSHINE, name="moonshine")
    # 4 decoder layers (not the encoder's 6), each with self- and cross-attention.
    assert spec.layers == 4
    assert [c.kind for c in spec.caches] == [Kind.FULL] * 4 + [Kind.CROSS] * 4
    # 2 KV heads x (288 / 8 = 36), unpadded: the padding to a multiple of 8 comes after the cache.
    assert {(c.kv_heads, c.k_head_dim) for c in spec.caches} == {(2, 36)}
    assert not spec.warnings


def test_prophetnet_and_explicit_head_dim() -> None:
    prophet = read_config(
        {"model_type": "prophetnet", "hidden_size": 1024, "num_encoder_layers": 12, "num_decoder_layers": 3,
         "num_encoder_attention_heads": 16, "num_decoder_attention_heads": 8, "add_cross_attention": True},
        name="prophetnet",
    )  # fmt: skip
    assert prophet.layers == 3 and {(c.kv_heads, c.k_head_dim) for c in prophet.caches} == {(8, 128)}
    assert not prophet.warnings
    asr = read_config(
        {"model_type": "cohere_asr", "is_encoder_decoder": True, "hidden_size": 1024, "num_hidden_layers": 8,
         "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 96},
        name="asr",
    )  # fmt: skip
    # head_dim given: 96, not 1024 / 8 = 128.
    assert {(c.kv_heads, c.k_head_dim) for c in asr.caches} == {(4, 96)}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "t5gemma", "encoder": {"model_type": "t5_gemma_module"},
          "decoder": {"model_type": "t5_gemma_module", "num_hidden_layers": 26}}, "decoder"),
        ({"model_type": "dia", "encoder_config": {}, "decoder_config": {"model_type": "dia_decoder"}},
         "decoder_config"),
        ({"model_type": "pi0", "vlm_config": {"model_type": "paligemma"}}, "vlm_config"),
    ],
)  # fmt: skip
def test_composite_configs_are_refused_naming_the_nested_decoder(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"config field '{field}' nests the model that caches"):
        read_config(config, name="composite")


def test_older_spellings_of_heads_and_width() -> None:
    xglm = read_config({"model_type": "xglm", "num_layers": 24, "attention_heads": 16, "d_model": 1024}, name="x")
    assert xglm.layers == 24 and {(c.kv_heads, c.k_head_dim) for c in xglm.caches} == {(16, 64)}
    xlm = read_config(
        {"model_type": "xlm", "n_layers": 12, "n_heads": 16, "emb_dim": 2048, "bos_index": 0, "eos_index": 1,
         "pad_index": 2, "unk_index": 3, "mask_index": 5},
        name="xlm",
    )  # fmt: skip
    # 2048 / 16 = 128; the *_index fields are token ids, so nothing is warned.
    assert {(c.kv_heads, c.k_head_dim) for c in xlm.caches} == {(16, 128)}
    assert not xlm.warnings


@pytest.mark.parametrize("field", ["n_recurrent_loops", "loop_num_passes"])
def test_looped_layers_are_refused_naming_the_loop_count(field: str) -> None:
    config = {"model_type": "dory", "num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512, field: 2}
    with pytest.raises(ConfigError, match=f"'{field}' \\(2\\) runs layers more than once"):
        read_config(config, name="looped")
    # One pass is an ordinary decoder.
    assert read_config({**config, field: 1}, name="once").layers == 4


def test_rwkv_is_refused_naming_its_state() -> None:
    with pytest.raises(ConfigError, match=r"RWKV's recurrent state .*'hidden_size'"):
        read_config({"model_type": "rwkv", "hidden_size": 768, "num_hidden_layers": 12}, name="rwkv")


def test_encoder_only_fields_are_silent_for_their_own_model_type_only() -> None:
    # LED's attention_window sizes LEDEncoderSelfAttention's local window; the decoder caches every
    # token (modeling_led.py): no warning for LED. transformers' BART code never reads the field, so
    # it is silent there too; on an encoder-decoder model type transformers does not ship, it is not
    # known to be encoder-only, so it is still named (by its name, said so).
    base = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "decoder_attention_heads": 16,
            "encoder_attention_heads": 16, "attention_window": 512}  # fmt: skip
    assert not read_config({"model_type": "led", **base}, name="led").warnings
    assert not read_config({"model_type": "bart", **base}, name="bart").warnings
    other = read_config({"model_type": "new_seq2seq", "is_encoder_decoder": True, **base}, name="new").warnings
    assert any("'attention_window'" in w and "judged by its name alone" in w for w in other)
