"""NAS ``block_configs`` (kvcalc.inputs.hf.families.nemotron_nas, Llama-3.3-Nemotron-Super-49B): blocks
that cache nothing or a linear attention, each number derived by hand next to it.

Sources: the docstring of tests/helpers/nemotron_families.py (shared with the module's sibling)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import AttentionCache, Kind
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.nemotron_families import SUPER_49B, _count
from tests.helpers.theoretical import estimate


def test_nemotron_super_49b_by_hand() -> None:
    # 80 blocks: 31 with attention.no_op (nothing cached), 49 with n_heads_in_group 8:
    # 64 / 8 = 8 KV heads x head_dim 8192 / 64 = 128.
    # Per token: 49 x 2 x 8 x 128 x 2 B (bf16) = 200,704 B; nothing fixed per sequence.
    spec = read_config(fixture_config(SUPER_49B), name="super-49b")
    assert spec.layers == 80 and len(spec.caches) == 80
    assert _count([c.kind for c in spec.caches]) == {"full_attention": 49, "no_cache": 31}
    assert spec.caches[6].kind is Kind.NONE and spec.caches[7].kind is Kind.NONE  # blocks 6, 7: no_op
    attention = spec.caches[0]
    assert isinstance(attention, AttentionCache)
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (8, 128, 128)
    est = estimate(spec, Workload(tokens=131_072))
    assert est.per_token_bytes == 200_704
    assert est.fixed_bytes_per_sequence == 0
    assert est.total_bytes == 131_072 * 200_704 == 26_306_674_688
    assert spec.warnings == () and spec.notes == ()


def _toy_nas(*attentions: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_type": "nemotron-nas", "torch_dtype": "bfloat16", "hidden_size": 1024, "num_attention_heads": 16,
        "num_key_value_heads": None, "num_hidden_layers": len(attentions),
        "block_configs": [{"attention": a, "ffn": {"ffn_mult": 2.0, "replace_with_linear": True}} for a in attentions],
    }  # fmt: skip


def test_nas_heads_per_block_and_linear_attention() -> None:
    # 16 heads of 64: n_heads_in_group 2 -> 8 KV heads, 16 -> 1; replace_with_linear caches nothing.
    spec = read_config(
        _toy_nas({"n_heads_in_group": 2}, {"n_heads_in_group": 16}, {"replace_with_linear": True}, {"no_op": True}),
        name="toy",
    )
    heads = [c.kv_heads if isinstance(c, AttentionCache) else None for c in spec.caches]
    assert heads == [8, 1, None, None]
    assert [c.kind for c in spec.caches] == [Kind.FULL, Kind.FULL, Kind.NONE, Kind.NONE]
    # (8 + 1) x 2 x 64 x 2 B = 2,304 B per token.
    assert estimate(spec, Workload(tokens=10)).per_token_bytes == 2_304
    assert any("replace_with_linear" not in n and "linear layer" in n for n in spec.notes)
    assert spec.warnings == ()  # the ffn sub-block (replace_with_linear there too) sizes only the MLP


def test_nas_fields_kvcalc_does_not_model_are_named() -> None:
    spec = read_config(_toy_nas({"n_heads_in_group": 2, "window_length": 4096}, {"no_op": True}), name="toy")
    assert [w.split("'")[1] for w in spec.warnings] == ["block_configs[0].attention.window_length"]


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        ({"n_heads_in_group": None}, r"'block_configs\[0\].attention.n_heads_in_group' must be a positive integer"),
        ({"n_heads_in_group": 3}, r"'block_configs\[0\].attention.n_heads_in_group' \(3\) must divide the 16"),
        ({"no_op": "yes"}, r"'block_configs\[0\].attention.no_op' must be true or false"),
    ],
)
def test_nas_errors_name_the_field(attention: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config(_toy_nas(attention), name="toy")


def test_nas_block_count_must_match() -> None:
    cfg = _toy_nas({"n_heads_in_group": 2})
    cfg["num_hidden_layers"] = 2
    with pytest.raises(ConfigError, match="'block_configs' lists 1 layers but the model has 2"):
        read_config(cfg, name="toy")
    del cfg["block_configs"]
    with pytest.raises(ConfigError, match="'block_configs' is missing"):
        read_config(cfg, name="toy")


def test_probe_refuses_nas_which_transformers_does_not_implement(run_cli) -> None:
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / SUPER_49B), "--tokens", "300", "--device", "cpu")
    assert result.exit_code != 0
    assert "knows no model_type 'nemotron-nas'" in result.stderr
