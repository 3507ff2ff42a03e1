"""Llama 3.2 Vision (mllama): 32 self-attention layers per text token plus 8 cross-attention layers
over image tokens, a fixed count per image. Every number is derived by hand next to it.

Sources: transformers 5.24 models/mllama/configuration_mllama.py (MllamaTextConfig: 40 layers,
cross_attention_layers default [3, 8, ..., 38]; MllamaVisionConfig: image_size 448, patch_size 14,
max_num_tiles 4 by default) and modeling_mllama.py (MllamaTextCrossAttention caches K/V of the
projected vision states once, ``cache.update``; MllamaTextModel skips the cross-attention layers
when a prompt has no image; head_dim = hidden_size // num_attention_heads; _prepare_static_cache
sizes a cross layer as images x max_num_tiles x ((image_size // patch_size) ** 2 + 1)).
Engines: vLLM dropped mllama after 0.10.2 (PR #24907, vllm/model_executor/models/registry.py
_PREVIOUSLY_SUPPORTED_MODELS); SGLang (python/sglang/srt/models/mllama.py @ 013902a8, managers/
schedule_batch.py @ fd3907ee) puts the image tokens in its one token pool; llama.cpp
(src/llama-arch.cpp @ 3679b65d) has no mllama architecture. Real config: tests/fixtures (see
fixtures/SOURCES.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc import api
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

MLLAMA = "Llama-3.2-11B-Vision-Instruct.json"
CROSS = (3, 8, 13, 18, 23, 28, 33, 38)
# Per token, bf16, all 32 self-attention layers: 32 x 2 (K and V) x 8 KV heads x 128 x 2 B = 131,072.
PER_TOKEN = 131_072
# One image: max_num_tiles 4 x ((560 // 14)^2 + 1) = 4 x (1,600 + 1) = 6,404 tokens; in the 8 cross
# layers: 8 x 2 x 8 x 128 x 6,404 x 2 B = 32,768 x 6,404 = 209,846,272 bytes.
PER_IMAGE_TOKENS = 6_404
PER_IMAGE_BYTES = 209_846_272


def _spec() -> Any:
    return read_config(fixture_config(MLLAMA), name="mllama")


def fixture_path() -> str:
    return str(FIXTURES / MLLAMA)


def test_mllama_layout_by_hand() -> None:
    spec = _spec()
    assert spec.model_type == "mllama_text_model" and spec.dtype == BF16
    assert spec.layers == 40 and len(spec.caches) == 40 and spec.query_heads == 32
    assert tuple(i for i, c in enumerate(spec.caches) if c.kind is Kind.VISION) == CROSS
    assert sum(c.kind is Kind.FULL for c in spec.caches) == 32
    cross = spec.caches[3]
    # head_dim = hidden_size 4096 / 32 heads = 128, 8 KV heads, for both kinds of layer.
    assert cross == AttentionCache(8, 128, 128, tokens="image")
    assert spec.caches[0] == AttentionCache(8, 128, 128)
    assert not cross.grows_without_bound and spec.has_image_cross_attention and not spec.is_encoder_decoder
    assert spec.image_tokens == PER_IMAGE_TOKENS
    # Every field that could shape the cache is read (cross_attention_layers included).
    assert spec.warnings == ()


def test_text_only_prompt_caches_nothing_in_cross_layers() -> None:
    est = estimate(_spec(), Workload(tokens=4096))
    # 4,096 x 131,072 = 536,870,912: the 32 self-attention layers only (kvcalc used to count 40).
    assert est.total_bytes == 536_870_912
    assert est.per_token_bytes == PER_TOKEN and est.fixed_bytes_per_sequence == 0
    vision = next(g for g in est.groups if g.kind is Kind.VISION)
    assert (vision.layers, vision.tokens_kept, vision.bytes) == (8, 0, 0)
    assert any("text-only prompt caches nothing in the 8 image cross-attention layers" in n for n in est.notes)


def test_images_are_fixed_per_sequence() -> None:
    spec = _spec()
    one = estimate(spec, Workload(tokens=1000, images=1))
    # 1,000 x 131,072 = 131,072,000 + 209,846,272 = 340,918,272.
    assert one.total_bytes == 340_918_272
    assert one.fixed_bytes_per_sequence == PER_IMAGE_BYTES and one.per_token_bytes == PER_TOKEN
    # 3 images, batch 2: per sequence 1,000 x 131,072 + 3 x 209,846,272 = 131,072,000 + 629,538,816
    #   = 760,610,816; x 2 = 1,521,221,632.
    three = estimate(spec, Workload(tokens=1000, batch=2, images=3))
    assert three.fixed_bytes_per_sequence == 629_538_816
    assert three.total_bytes == 1_521_221_632
    vision = next(g for g in three.groups if g.kind is Kind.VISION)
    assert (vision.tokens_kept, vision.slots) == (3 * 6_404, 2 * 3 * 6_404)
    # Decoding more text adds nothing to the cross layers: 2,000 tokens add 1,000 x 131,072 x 2.
    longer = estimate(spec, Workload(tokens=2000, batch=2, images=3))
    assert longer.total_bytes - three.total_bytes == 262_144_000


def test_image_tokens_override_the_tiling() -> None:
    # One 560 x 560 tile instead of four: 1,601 tokens; 8 x 4,096 B x 1,601 = 52,461,568.
    est = api.estimate(fixture_path(), sequences=api.Sequences(tokens=1000, images=1, image_tokens=1601))
    assert est.fixed_bytes_per_sequence == 52_461_568
    assert est.total_bytes == 131_072_000 + 52_461_568


def test_vision_config_defaults_and_bare_text_config() -> None:
    raw = fixture_config(MLLAMA)
    del raw["vision_config"]
    # MllamaVisionConfig's defaults: 4 x ((448 // 14)^2 + 1) = 4 x 1,025 = 4,100 tokens per image.
    spec = read_config(raw, name="defaults")
    assert spec.image_tokens == 4_100
    assert any("MllamaVisionConfig's defaults" in n for n in spec.notes)
    # A bare text config (MllamaTextModel alone) says nothing about images: they need image_tokens.
    bare = read_config(fixture_config(MLLAMA)["text_config"], name="bare")
    assert bare.image_tokens is None and bare.has_image_cross_attention
    with pytest.raises(UsageError) as caught:
        api.estimate(bare, sequences=api.Sequences(tokens=10, images=1))
    assert caught.value.params == ("image_tokens",)
    # 10 x 131,072 + 8 x 4,096 x 100 = 1,310,720 + 3,276,800 = 4,587,520.
    assert api.estimate(bare, sequences=api.Sequences(tokens=10, images=1, image_tokens=100)).total_bytes == 4_587_520


def test_nested_text_config_without_model_type_is_mllama() -> None:
    raw = fixture_config(MLLAMA)
    del raw["text_config"]["model_type"]
    spec = read_config(raw, name="untyped")
    # MllamaConfig.sub_configs_defaults: the text config is a MllamaTextConfig, not a LlamaConfig.
    assert spec.model_type == "mllama_text_model" and spec.caches == _spec().caches


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"cross_attention_layers": [3, 40]}, "cross_attention_layers"),
        ({"cross_attention_layers": [3, 3]}, "cross_attention_layers"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"hidden_size": 4097}, "hidden_size"),
    ],
)
def test_bad_text_fields_name_the_field(edit: dict[str, Any], field: str) -> None:
    raw = fixture_config(MLLAMA)
    raw["text_config"].update(edit)
    with pytest.raises(ConfigError, match=rf"text_config\.{field}"):
        read_config(raw, name="bad")


@pytest.mark.parametrize("value", [[560, 560], 0, "560"])
def test_bad_image_size_names_the_field(value: Any) -> None:
    raw = fixture_config(MLLAMA)
    raw["vision_config"]["image_size"] = value
    with pytest.raises(ConfigError, match=r"vision_config\.image_size"):
        read_config(raw, name="bad")


def test_images_for_a_model_without_image_cross_attention_are_refused() -> None:
    for param, value in (("images", 1), ("image_tokens", 100)):
        with pytest.raises(UsageError) as caught:
            api.estimate("llama-3.1-8b", sequences=api.Sequences(tokens=10, **{param: value}))
        assert caught.value.params == (param,)
    with pytest.raises(UsageError) as caught:
        api.estimate(fixture_path(), sequences=api.Sequences(tokens=10, images=-1))
    assert caught.value.params == ("images",)


def test_engines() -> None:
    spec = _spec()
    work = Workload(tokens=1000, images=1)
    theory = estimate(spec, work)
    transformers = estimate(spec, work, engine=make_engine("transformers")[0])
    # DynamicCache: a DynamicLayer per layer, the cross layers filled once with the 6,404 image tokens.
    assert transformers.total_bytes == theory.total_bytes == 340_918_272
    sglang = estimate(spec, work, engine=make_engine("sglang")[0])
    # One token pool whose cells span all 40 layers: every layer holds 1,000 + 6,404 = 7,404 cells of
    # 2 x 8 x 128 x 2 B = 4,096 B: 7,404 x 40 x 4,096 = 7,404 x 163,840 = 1,213,071,360.
    assert sglang.total_bytes == 1_213_071_360
    assert sglang.per_token_bytes == 163_840 and sglang.fixed_bytes_per_sequence == 6_404 * 163_840
    text_only = estimate(spec, Workload(tokens=1000), engine=make_engine("sglang")[0])
    assert text_only.total_bytes == 1000 * 163_840
    assert any("one token pool across all layers" in n for n in sglang.notes)
    with pytest.raises(UsageError, match=r"vLLM no longer runs Llama 3.2 Vision .*0\.10\.2"):
        estimate(spec, Workload(tokens=1000), engine=make_engine("vllm")[0])
    with pytest.raises(UsageError, match=r"llama\.cpp has no Llama 3\.2 Vision"):
        estimate(spec, Workload(tokens=1000), engine=make_engine("llama.cpp")[0])


def test_fit_counts_images_per_request() -> None:
    # 10 GiB = 10,737,418,240 B. A request of 4,096 tokens and one image:
    #   4,096 x 131,072 + 209,846,272 = 536,870,912 + 209,846,272 = 746,717,184 B -> 14 requests (14.38).
    # Longest context with one image: (10,737,418,240 - 209,846,272) // 131,072 = 80,319 tokens.
    report = api.fit(
        fixture_path(), sequences=api.Sequences(tokens=4096, images=1), capacity=api.Capacity(kv_budget=10 * 2**30)
    )
    assert (report.result.max_concurrency, report.result.max_context) == (14, 80_319)


def test_cli_flags_and_json(run_cli) -> None:
    result = run_cli("estimate", fixture_path(), "-t", "1000", "--images", "2", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    # 131,072,000 + 2 x 209,846,272 = 550,764,544.
    assert data["total_bytes"] == 550_764_544
    assert (data["images"], data["image_tokens_per_image"]) == (2, 6_404)
    assert data["fixed_bytes_per_sequence"] == 2 * PER_IMAGE_BYTES
    kinds = {g["kind"]: g["tokens_kept"] for g in data["groups"]}
    assert kinds == {"full_attention": 1000, "vision_cross_attention": 12_808}
    zero = run_cli("estimate", fixture_path(), "-t", "1000", "--images", "0", "--json")
    assert zero.exit_code == 0 and zero.json()["total_bytes"] == 131_072_000
    refused = run_cli("estimate", "llama-3.1-8b", "--images", "1")
    assert refused.exit_code == 2 and "--images" in refused.stderr


def test_preset_agrees_with_real_config() -> None:
    preset = load_presets()["llama-3.2-11b-vision"]
    from_preset = read_config(copy.deepcopy(preset.config), name="llama-3.2-11b-vision")
    from_file = _spec()
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads, from_preset.dtype) == (40, 32, BF16)
    assert from_preset.image_tokens == from_file.image_tokens == PER_IMAGE_TOKENS
    assert from_preset.warnings == ()


def test_vision_tower_puts_tiles_x_patches_tokens_per_image() -> None:
    """The tiling rule against transformers' own vision tower: a tiny MllamaForConditionalGeneration
    fed 2 images of 4 tiles (28 x 28 pixels, patch 14) caches 2 x 4 x ((28 // 14)^2 + 1) = 40 tokens."""
    torch = pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    config: dict[str, Any] = {
        "model_type": "mllama",
        "image_token_index": 255,
        "text_config": {
            "model_type": "mllama_text_model", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "intermediate_size": 37, "vocab_size": 256, "cross_attention_layers": [1],
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        },
        "vision_config": {
            "model_type": "mllama_vision_model", "image_size": 28, "patch_size": 14, "max_num_tiles": 4,
            "hidden_size": 16, "attention_heads": 2, "num_hidden_layers": 2, "num_global_layers": 1,
            "intermediate_layers_indices": [0], "vision_output_dim": 32, "intermediate_size": 37,
        },
    }  # fmt: skip
    spec = read_config(config, name="tiny")
    assert spec.image_tokens == 20  # 4 x (2^2 + 1)
    built = transformers.MllamaConfig(**{k: v for k, v in config.items() if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.MllamaForConditionalGeneration(built).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.randint(3, 250, (1, 7)),
            pixel_values=torch.randn(1, 2, 4, 3, 28, 28),
            aspect_ratio_ids=torch.tensor([[1, 6]]),
            aspect_ratio_mask=torch.ones(1, 2, 4, dtype=torch.long),
            use_cache=True,
        )
    cache = out.past_key_values
    # Layer 0 self-attention: 7 text tokens; layer 1 cross-attention: 2 images x 20 = 40 tokens.
    assert [layer.keys.shape[2] for layer in cache.layers] == [7, 2 * spec.image_tokens]


def test_probe_text_only_matches_byte_for_byte(run_cli) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", fixture_path(), "--tokens", "64", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    # 64 x 131,072 = 8,388,608 in the 32 self-attention layers; the cross layers stay empty.
    assert data["match"] is True and data["measured_bytes"] == data["estimated_bytes"] == 8_388_608
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"full_attention": (32, 8_388_608), "vision_cross_attention": (8, 0)}


def test_probe_with_images_matches_byte_for_byte(run_cli) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", fixture_path(), "--tokens", "32", "--images", "1", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    # 32 x 131,072 = 4,194,304 + one image 209,846,272 = 214,040,576: the shrunk model's cross layer
    # holds K and V of [1, 8, 6,404, 128] bf16 after the image states are fed once.
    assert data["match"] is True and data["measured_bytes"] == data["estimated_bytes"] == 214_040_576
    cross = next(layer for layer in data["shrunk_layers"] if layer["kind"] == "cross_attention")
    assert [t["shape"] for t in cross["tensors"]] == [[1, 8, 6_404, 128]] * 2
