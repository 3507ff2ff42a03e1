"""Contract test: every bundled preset validates, reads, and agrees with a real config where one exists."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.errors import PresetError, SourceError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import Preset, get_preset, load_presets, parse_preset
from tests.conftest import fixture_config
from tests.helpers.theoretical import estimate

PRESETS = load_presets()

REQUIRED = [
    "llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b-v0.1",
    "mixtral-8x7b", "qwen2.5-7b", "qwen3-8b", "qwen3-32b", "qwen3-next-80b-a3b",
    "deepseek-v2-lite", "deepseek-v3", "gemma-2-9b", "gemma-3-27b", "gpt-oss-20b",
    "gpt-oss-120b", "phi-3-mini", "falcon-7b", "llama-4-scout", "jamba-v0.1",
]  # fmt: skip

# preset -> the real config.json it was copied from (tests/fixtures/SOURCES.md).
FIXTURE_OF = {
    "llama-2-7b": "Llama-2-7b-hf.json",
    "llama-3.1-8b": "Llama-3.1-8B.json",
    "mistral-7b-v0.1": "Mistral-7B-Instruct-v0.1.json",
    "mistral-nemo-12b": "Mistral-Nemo-Instruct-2407.json",
    "mixtral-8x7b": "Mixtral-8x7B-v0.1.json",
    "qwen2.5-7b": "Qwen2.5-7B.json",
    "qwen3-8b": "Qwen3-8B.json",
    "qwen3-next-80b-a3b": "Qwen3-Next-80B-A3B.json",
    "deepseek-v2-lite": "DeepSeek-V2-Lite.json",
    "gemma-2-9b": "gemma-2-9b.json",
    "gpt-oss-20b": "gpt-oss-20b.json",
    "falcon-7b": "falcon-7b-instruct.json",
    "llama-4-scout": "Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json",
    "gpt2": "gpt2.json",
    "t5-small": "t5-small.json",
    "glm-4.5-air": "GLM-4.5-Air.json",
    "hunyuan-a13b": "Hunyuan-A13B-Instruct.json",
    "minimax-m1-80k": "MiniMax-M1-80k.json",
    "falcon-mamba-7b": "falcon-mamba-7b.json",
    "recurrentgemma-2b": "recurrentgemma-2b.json",
}


def test_required_presets_and_count() -> None:
    assert set(REQUIRED) <= set(PRESETS)
    assert len(PRESETS) >= 25


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_reads_and_estimates(name: str) -> None:
    preset = PRESETS[name]
    assert "/" in preset.hf_repo and preset.source
    spec = read_config(preset.config, name=name)
    est = estimate(spec, Workload(tokens=4096))
    assert est.total_bytes > 0
    assert isinstance(est.total_bytes, int)
    # A preset is found by its name and every alias, in any case.
    for label in (name, name.upper(), *preset.aliases):
        assert get_preset(label) == preset


@pytest.mark.parametrize(("name", "fixture"), sorted(FIXTURE_OF.items()))
def test_preset_agrees_with_real_config(name: str, fixture: str) -> None:
    from_preset = read_config(PRESETS[name].config, name=name)
    from_file = read_config(fixture_config(fixture), name=name)
    assert from_preset.caches == from_file.caches
    assert from_preset.layers == from_file.layers
    assert from_preset.query_heads == from_file.query_heads
    if name in DTYPE_ADDED:  # the file names no dtype; the preset's comes from its source
        assert from_file.dtype is None and from_preset.dtype is not None
    else:
        assert from_preset.dtype == from_file.dtype


# Presets whose config file names no dtype and whose source documents the one added.
DTYPE_ADDED = {"minimax-m1-80k"}


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(SourceError, match=r"did you mean llama-3\.1-8b"):
        get_preset("llama-3.1-8")


@pytest.mark.parametrize("typo", ["llama-3.1-8", "qwen3-32", "gpt-oss", "deepseek-v3x"])
def test_suggestions_name_each_preset_once(typo: str) -> None:
    """A preset whose name and aliases are all close is named once, by its own name (llama-3.1-8b
    has the alias llama3.1-8b; qwen3-32b qwen-3-32b; gpt-oss-20b gptoss-20b; deepseek-v3
    deepseekv3): the suggestions are three different presets."""
    with pytest.raises(SourceError) as raised:
        get_preset(typo)
    names = str(raised.value).split("did you mean ", 1)[1].rstrip("?").split(", ")
    assert len(names) == 3 and len({get_preset(n).name for n in names}) == 3, names
    assert all(get_preset(n).name == n for n in names), names


def _valid() -> dict[str, Any]:
    return {
        "name": "toy",
        "family": "llama",
        "hf_repo": "org/toy",
        "source": "hand-written",
        "config": {"model_type": "llama"},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Toy"}, "lower-case"),
        ({"hf_repo": "no-slash"}, "org/name"),
        ({"config": {"layers": 2}}, "model_type"),
        (
            {"weights": {"bytes": -1, "parameters": 1, "format": "bf16", "source": "x"}},
            "weights.bytes must be positive",
        ),
        ({"weights": {"bytes": 2, "parameters": "7B", "format": "bf16", "source": "x"}}, "'weights.parameters' must"),
        ({"weights": {"bytes": 2, "parameters": 1, "format": "bf16"}}, "missing field 'weights.source'"),
        ({"weights": {"bytes": 2, "parameters": 1, "format": "bf16", "source": "x", "size": 3}}, "weights.size"),
        ({"weights": {"bytes": 2, "parameters": 1, "format": "bf16", "source": "x", "unloaded_bytes": 2}}, "unloaded"),
        ({"colour": "red"}, "unknown field"),
        ({"aliases": ["Bad Alias"]}, "aliases"),
    ],
)
def test_schema_rejects(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PresetError, match=message):
        parse_preset(_valid() | change, filename="toy.yaml")


def test_schema_requires_fields() -> None:
    data = _valid()
    del data["hf_repo"]
    with pytest.raises(PresetError, match="missing field 'hf_repo'"):
        parse_preset(data, filename="toy.yaml")
    assert parse_preset(_valid(), filename="toy.yaml").name == "toy"


# A Hub repo id as it is cited in a source: org/name, e.g. meta-llama/Llama-2-7b-hf.
_HUB_REPO_RE = re.compile(r"(?<![\w./-])[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
# A path of the machine a preset was written on: /work/..., /home/..., /tmp/..., ~/..., C:\...
_MACHINE_PATH_RE = re.compile(r"(?<![\w.%-])(?:/(?:work|home|tmp|Users|root|mnt|nfs|var|opt|data)\b|~|[A-Za-z]:\\)")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_source_cites_a_hub_repo_and_no_machine_path(name: str) -> None:
    """`kvcalc presets show` prints the source: it must point at public files, not at a laptop."""
    source = PRESETS[name].source
    assert _HUB_REPO_RE.search(source), f"{name}: source names no org/name Hub repo: {source!r}"
    assert PRESETS[name].hf_repo in source, f"{name}: source does not name hf_repo {PRESETS[name].hf_repo}"
    assert not _MACHINE_PATH_RE.search(source), f"{name}: source cites a machine path: {source!r}"


@pytest.mark.parametrize(
    "source",
    [
        "config.json of org/model (/work/shared/hf-configs/model.json)",
        "config.json of org/model (copy in /home/me/model.json)",
        "config.json of org/model (~/configs/model.json)",
        "config.json of org/model (/tmp/model.json)",
    ],
)
def test_machine_path_check_catches_paths(source: str) -> None:
    assert _MACHINE_PATH_RE.search(source)


# --- weights ------------------------------------------------------------------------------------

PLAIN_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


# Presets whose checkpoint size no source gives; fit asks for --weights. recurrentgemma-2b: its only
# config copy names no dtype, and no index or file size of the gated repo was found.
def test_every_preset_has_its_weights() -> None:
    """fit works offline for every preset: each carries its checkpoint's bytes with a source."""
    missing = [p.name for p in load_presets().values() if p.weights is None]
    assert not missing, f"presets without weights: {missing}"
    assert all(p.weights is not None and p.weights.source.strip() for p in load_presets().values())


def test_recurrentgemma_parameters_by_hand() -> None:
    """recurrentgemma-2b's parameters from its config (transformers 5.24 modeling_recurrent_gemma.py:
    MLPs of intermediate_size // 2 with biases, o_proj with a bias, RG-LRU gates per head), tied
    embeddings counted once; float32 assumed (no torch_dtype in the config copy)."""
    embeddings = 256_000 * 2_560
    mlp = 2 * (2_560 * 7_680 + 7_680) + 7_680 * 2_560 + 2_560
    norms = 26 * 2 * 2_560 + 2_560
    attention = 2 * 2_560 * 2_560 + 2 * 2_560 * 256 + 2_560
    recurrent = 3 * (2_560 * 2_560 + 2_560) + 2_560 * 4 + 2_560 + 2_560 + 2 * (10 * 256 * 256 + 10 * 256)
    total = embeddings + 26 * mlp + norms + 8 * attention + 18 * recurrent
    w = get_preset("recurrentgemma-2b").weights
    assert w is not None and w.parameters == total == 2_682_862_080 and w.bytes == 4 * total


@pytest.mark.parametrize("preset", sorted(load_presets().values(), key=lambda p: p.name), ids=lambda p: p.name)
def test_plain_checkpoint_bytes_agree_with_parameters(preset: Preset) -> None:
    """A checkpoint stored in one plain dtype holds parameters x its size: all its bytes when the
    parameters count every tensor (an MTP module included), or what is loaded when the rest are
    buffers (rotary inv_freq, causal masks, a tied head stored twice)."""
    w = preset.weights
    if w is None or w.format not in PLAIN_BYTES:
        pytest.skip("quantized or mixed checkpoint: bytes come from its tensors' own dtypes")
    expected = w.parameters * PLAIN_BYTES[w.format]
    assert min(abs(w.bytes - expected), abs(w.loaded_bytes - expected)) <= expected // 10_000


@pytest.mark.parametrize(
    ("name", "total_size"),
    [
        # model.safetensors.index.json metadata.total_size as published with each checkpoint (each
        # preset's weights.source says where it is quoted).
        ("llama-3.1-8b", 16_060_522_496),
        ("qwen3-8b", 16_381_470_720),
        ("qwen3-32b", 65_524_246_528),
        ("gpt-oss-20b", 13_761_264_768),
        ("jamba-v0.1", 103_140_646_656),
        ("llama-3.1-70b", 141_107_412_992),
    ],
)
def test_published_index_sizes(name: str, total_size: int) -> None:
    w = get_preset(name).weights
    assert w is not None and w.bytes == total_size


def test_quantized_checkpoints_are_sized_from_their_dtypes() -> None:
    # DeepSeek-V3's FP8 checkpoint: about one byte per parameter (fp8 weights, fp32 block scales, bf16
    # embeddings and norms), not two; gpt-oss's MXFP4 experts about half a byte.
    v3 = get_preset("deepseek-v3").weights
    assert v3 is not None and v3.parameters < v3.bytes < 1.01 * v3.parameters
    oss = get_preset("gpt-oss-120b").weights
    assert oss is not None and oss.bytes < 0.6 * oss.parameters
