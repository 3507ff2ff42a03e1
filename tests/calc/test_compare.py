"""kvcalc compare: attention variants, models, dtypes and context lengths side by side.

Every number is derived by hand in the comment next to it (M = 2 x L x B x T x H_kv x d_h x s).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from kvcalc import api, load_model, model_from_geometry
from kvcalc.calc.compare import attention_variants, candidate_for
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP8, FP16, FP32
from kvcalc.errors import UsageError
from tests.conftest import FIXTURES
from tests.helpers.theoretical import compare, estimate

# Llama 3.1 8B at 2,048 tokens, bf16: 32 layers x 2,048 tokens x 128 dims x 2 (K, V) x 2 bytes
# = 33,554,432 bytes per KV head.
PER_KV_HEAD = 2 * 32 * 2048 * 128 * 2


def test_seed_ratios_gqa_is_a_quarter_of_mha_and_mqa_a_32nd(run_cli) -> None:
    # Seed §6: 32 -> 8 KV heads is 1/4 of MHA; MQA (1 head) is 1/32 at 32 query heads.
    data = run_cli("compare", "llama-3.1-8b", "-t", "2048", "--json").json()
    rows = {r["label"]: r for r in data["rows"]}
    assert list(rows) == ["MHA", "GQA-8", "MQA"]
    assert rows["MHA"]["total_bytes"] == 32 * PER_KV_HEAD == 1_073_741_824
    assert rows["GQA-8"]["total_bytes"] == 8 * PER_KV_HEAD == 268_435_456  # the seed's 256 MiB
    assert rows["MQA"]["total_bytes"] == PER_KV_HEAD == 33_554_432
    assert (rows["GQA-8"]["ratio"], rows["MQA"]["ratio"]) == (0.25, 1 / 32)
    assert rows["GQA-8"]["ratio_exact"] == "1/4"
    assert rows["GQA-8"]["own"] and not rows["MHA"]["own"]
    assert data["baseline"] == "MHA"


def test_writing_32_where_8_is_meant_overstates_4x(run_cli) -> None:
    # Seed question 2: with GQA-8 as the baseline, the MHA row reads 4x.
    data = run_cli("compare", "llama-3.1-8b", "--baseline", "8", "--json").json()
    rows = {r["label"]: r for r in data["rows"]}
    assert rows["MHA"]["ratio"] == 4.0
    table = run_cli("compare", "llama-3.1-8b", "--baseline", "GQA-8").stdout
    assert "│ MHA     │" in table and " 4x │" in table
    assert "quality" in table and "memory only" in table  # the one-line caveat under the table


def test_extra_kv_heads_list_and_elements_per_token() -> None:
    spec = model_from_geometry(layers=32, heads=32, kv_heads=32, head_dim=128)
    candidates, _ = attention_variants(spec, kv_heads=[32, 8, 4, 1], mark_own=False)
    # Elements per token per layer = H_kv x (128 + 128).
    assert [(c.label, c.elements_per_token) for c in candidates] == [
        ("MHA", 8192), ("GQA-8", 2048), ("GQA-4", 1024), ("MQA", 256)
    ]  # fmt: skip
    assert not any(c.own for c in candidates)


def test_mla_row_matches_deepseek_v3_published_figure(run_cli) -> None:
    # DeepSeek-V3 (ISCA 2025, Table 1): 61 layers x (512 + 64) x 2 bytes = 70,272 B/token in BF16.
    data = run_cli("compare", "deepseek-v3", "-t", "1", "--kv-dtype", "bf16", "--json").json()
    mla = next(r for r in data["rows"] if r["label"] == "MLA")
    assert (mla["per_token_bytes"], mla["total_bytes"], mla["latent_dim"], mla["own"]) == (
        70_272,
        70_272,
        576,
        True,
    )
    # Its MHA equivalent decompresses to 128 heads x (K 192 + V 128) per layer:
    # 61 x 128 x 320 x 2 = 4,997,120 B/token, so MLA is 70,272 / 4,997,120 = 0.01406 of it.
    mha = next(r for r in data["rows"] if r["label"] == "MHA")
    assert mha["per_token_bytes"] == 4_997_120
    assert mla["ratio"] == pytest.approx(70_272 / 4_997_120)


def test_mla_variant_by_hand(run_cli) -> None:
    # 61 layers, latent 512 + rope 64, bf16: again 70,272 B/token, whatever the head count.
    args = ["compare", "--layers", "61", "--heads", "128", "--head-dim", "128", "--latent-dim", "512",
            "--rope-dim", "64", "--kv-dtype", "bf16", "-t", "1", "--json"]  # fmt: skip
    rows = {r["label"]: r for r in run_cli(*args).json()["rows"]}
    assert rows["MLA"]["total_bytes"] == 70_272
    assert rows["MHA"]["total_bytes"] == 2 * 61 * 128 * 128 * 2  # 3,997,696


def test_dtype_list_multiplies_rows_and_ratios_use_the_first_dtype() -> None:
    spec = load_model("llama-3.1-8b")
    candidates, notes = attention_variants(spec)
    comp = compare(candidates, mode="variants", tokens=[2048], dtypes=[FP16, FP8], notes=notes)
    assert len(comp.rows) == 3 * 2
    by = {(r.candidate.label, r.kv_dtype.name): r for r in comp.rows}
    assert by[("GQA-8", "fp16")].total_bytes == 268_435_456
    assert by[("GQA-8", "fp8")].total_bytes == 134_217_728  # 1 byte per element
    assert by[("MHA", "fp8")].ratio == Fraction(1, 2)  # against MHA at fp16, the first dtype
    assert by[("MQA", "fp8")].ratio == Fraction(1, 64)


def test_model_sweep_sliding_window_stops_growing(run_cli) -> None:
    # mistral-7b-v0.1 slides at W = 4,096 on all 32 layers: 2 x 32 x 4096 x 8 x 128 x 2 =
    # 536,870,912 bytes at 4k, 32k and 128k. Llama 3.1 8B grows: 131,072 B/token x T.
    data = run_cli("compare", "llama-3.1-8b", "mistral-7b-v0.1", "-t", "4k,32k,128k", "--json").json()
    totals = {(r["label"], r["tokens"]): r["total_bytes"] for r in data["rows"]}
    for t in (4096, 32_768, 131_072):
        assert totals[("mistral-7b-v0.1", t)] == 536_870_912
        assert totals[("llama-3.1-8b", t)] == 131_072 * t
    # Sorted by total (at the longest length): Mistral first; ratios to the first model given.
    assert [r["label"] for r in data["rows"]][:3] == ["mistral-7b-v0.1"] * 3
    last = next(r for r in data["rows"] if r["label"] == "mistral-7b-v0.1" and r["tokens"] == 131_072)
    assert last["ratio"] == 1 / 32  # 4,096 / 131,072
    assert data["baseline"] == "llama-3.1-8b"


def test_models_from_presets_and_files_mix(run_cli) -> None:
    # Falcon-7B MQA: 2 x 32 x 1 x 64 x 2 = 8,192 B/token; Llama-2-7B MHA: 524,288 B/token.
    path = str(FIXTURES / "falcon-7b-instruct.json")
    data = run_cli("compare", "llama-2-7b", path, "-t", "1000", "--kv-dtype", "fp16", "--json").json()
    rows = {r["label"]: r for r in data["rows"]}
    assert rows[path]["total_bytes"] == 8_192 * 1000
    assert rows["llama-2-7b"]["total_bytes"] == 524_288 * 1000
    assert rows[path]["ratio"] == 1 / 64


def test_json_contract(run_cli) -> None:
    data = run_cli("compare", "qwen3-8b", "-t", "1k,2k", "-b", "3", "--kv-dtype", "bf16,fp8", "--json").json()
    assert set(data) >= {"rows", "baseline", "tokens", "kv_dtypes", "batch", "notes"}
    assert data["tokens"] == [1024, 2048] and data["kv_dtypes"] == ["bf16", "fp8"]
    for row in data["rows"]:
        assert {
            "label",
            "kv_heads",
            "latent_dim",
            "kv_dtype",
            "tokens",
            "batch",
            "total_bytes",
            "ratio",
        } <= set(row)
        assert isinstance(row["total_bytes"], int) and row["batch"] == 3
    # Qwen3-8B GQA-8 bf16 at 1k x 3: 2 x 36 x 8 x 128 x 2 = 147,456 B/token x 1024 x 3.
    own = next(r for r in data["rows"] if r["own"] and r["kv_dtype"] == "bf16" and r["tokens"] == 1024)
    assert own["total_bytes"] == 147_456 * 1024 * 3


def test_chart_bars(run_cli) -> None:
    out = run_cli("compare", "llama-3.1-8b", "-t", "2k,4k", "--chart").stdout
    # MHA at 4k is the largest: a full 40-cell bar; GQA-8 at 2k is 1/8 of it: 5 cells.
    assert "█" * 40 + " 2 GiB / 2.15 GB" in out
    assert "T=2,048  " + "█" * 5 + " 256 MiB" in out


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml")])
def test_plot_file(run_cli, tmp_path: Path, suffix: str, magic: bytes) -> None:
    target = tmp_path / f"sweep{suffix}"
    result = run_cli("compare", "llama-3.1-8b", "mistral-7b-v0.1", "-t", "4k,32k,128k", "--plot", str(target))
    assert result.exit_code == 0, result.stderr
    data = target.read_bytes()
    assert data.startswith(magic) and len(data) > 5_000
    assert f"plot saved to {target}" in result.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("llama-3.1-8b", "--kv-heads", "5"), "--kv-heads 5 does not divide the 32 query heads"),
        (("llama-3.1-8b", "--kv-heads", "64"), "--kv-heads 64 does not divide"),
        (("llama-3.1-8b", "--baseline", "GQA-3"), "--baseline 'GQA-3' is not in the table"),
        (("llama-3.1-8b", "mistral-7b-v0.1", "--baseline", "gpt2"), "is not in the table"),
        (("llama-3.1-8b", "-t", "4k,"), "an empty item"),
        (("llama-3.1-8b", "--kv-dtype", ""), "an empty item"),
        (("llama-3.1-8b", "--kv-heads", ",8"), "an empty item"),
        (("llama-3.1-8b", "--kv-dtype", "fp16,int3"), "unknown KV dtype 'int3'"),
        (("llama-3.1-8b", "mistral-7b-v0.1", "--kv-heads", "8"), "give one model"),
        (("llama-3.1-8b", "--plot", "chart.jpg"), ".png or .svg"),
        (("--layers", "32", "--heads", "32"), "--head-dim"),
        ((), "give one MODEL"),
        (("nosuch-model",), "unknown preset"),
        (("llama-3.1-8b", "-t", "0"), "--tokens must be positive"),
    ],
)
def test_errors_are_one_line(run_cli, args: tuple[str, ...], needle: str) -> None:
    result = run_cli("compare", *args)
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), result.stderr
    assert needle in lines[0]


def test_models_mode_candidates_keep_their_own_dtype() -> None:
    # No --kv-dtype: each model at its own dtype (Gemma 2's file says float32, 4 bytes).
    gemma = candidate_for(load_model("gemma-2-9b"))
    llama = candidate_for(load_model("llama-3.1-8b"))
    comp = compare([llama, gemma], mode="models", tokens=[1], dtypes=[None])
    assert {r.candidate.label: r.kv_dtype for r in comp.rows} == {"llama-3.1-8b": BF16, "gemma-2-9b": FP32}
    with pytest.raises(UsageError, match="nothing to compare"):
        compare([], mode="models", tokens=[1], dtypes=[None])


def test_a_sweep_row_gives_its_whole_estimate_on_demand() -> None:
    # Rows carry totals; each row's estimate, asked for, is the estimate at its own length.
    comp = api.compare(["llama-3.1-8b"], tokens=[1000, 4097], kv_dtypes=["bf16", "fp8"])
    spec = api.open_model("llama-3.1-8b").spec
    for row in comp.rows:
        fresh = estimate(row.candidate.spec, Workload(tokens=row.tokens, kv_dtype=row.kv_dtype))
        assert row.estimate == fresh
        assert row.total_bytes == fresh.total_bytes
        assert row.per_token_bytes == fresh.per_token_bytes
    # MHA (32 KV heads) is 4x the own GQA-8 at every length and format; fp8 halves bf16.
    by = {(r.candidate.label, r.kv_dtype.name, r.tokens): r for r in comp.rows}
    assert by[("GQA-8", "bf16", 1000)].ratio == Fraction(1, 4)
    assert by[("GQA-8", "fp8", 4097)].ratio == Fraction(1, 8)
    assert spec.query_heads == 32


def test_the_first_length_given_twice_is_named() -> None:
    # The first length (in the order given) that appears again, as before sweeps were counted at once.
    with pytest.raises(UsageError, match="tokens lists 5 more than once"):
        api.compare(["llama-3.1-8b"], tokens=[5, 3, 3, 5])
