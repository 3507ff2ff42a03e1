"""The compute widths of a config (kvcalc.inputs.hf.dims.read_dims): an encoder-decoder's are its
decoder's, read by the names the cache reader takes them by (families/encoder_decoder.py)."""

from __future__ import annotations

from kvcalc.inputs.hf.dims import read_dims
from kvcalc.inputs.presets import get_preset


def test_an_encoder_decoder_gives_its_decoder_widths() -> None:
    # A BART-style config whose sides differ: the decoder's 3 layers, 8 heads (d_model 512 / 8 = 64
    # per head), 2 KV heads and 1,024-wide MLP, not the encoder's 6, 16 and 2,048.
    dims = read_dims({
        "model_type": "bart", "d_model": 512, "vocab_size": 1000, "num_hidden_layers": 6,
        "encoder_layers": 6, "decoder_layers": 3, "encoder_attention_heads": 16, "decoder_attention_heads": 8,
        "decoder_key_value_heads": 2, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 1024,
    })  # fmt: skip
    assert dims is not None
    got = (dims.hidden, dims.layers, dims.heads, dims.kv_heads, dims.head_dim, dims.intermediate)
    assert got == (512, 3, 8, 2, 64, 1024)


def test_bart_and_whisper_presets_give_heads() -> None:
    # bart-large: 12 decoder layers, 16 decoder heads of 1,024 / 16 = 64; whisper-large-v3: 32 and
    # 20 of 1,280 / 20 = 64 (their presets' configs). Before, no head count was read from either.
    bart = read_dims(get_preset("bart-large").config)
    whisper = read_dims(get_preset("whisper-large-v3").config)
    assert bart is not None and whisper is not None
    assert (bart.layers, bart.heads, bart.kv_heads, bart.head_dim) == (12, 16, 16, 64)
    assert (whisper.layers, whisper.heads, whisper.kv_heads, whisper.head_dim) == (32, 20, 20, 64)


def test_t5_head_dim_is_d_kv() -> None:
    # T5-11B's shape: d_model 1,024, 128 heads of d_kv 128 (heads x d_kv = 16,384, not d_model).
    dims = read_dims({"model_type": "t5", "d_model": 1024, "d_kv": 128, "num_heads": 128, "num_layers": 24,
                      "d_ff": 65536, "vocab_size": 32128})  # fmt: skip
    assert dims is not None
    assert (dims.heads, dims.head_dim, dims.intermediate) == (128, 128, 65536)
