"""The CLI end to end, in-process through the console-script entry point."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import FIXTURES, run_subprocess


def test_estimate_json_contract(run_cli) -> None:
    # llama-3.1-8b, 32k tokens, batch 8, bf16: 131,072 B/token x 32,768 x 8 = 32 GiB exactly.
    result = run_cli("estimate", "llama-3.1-8b", "--tokens", "32k", "--batch", "8", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["total_bytes"] == 34_359_738_368 == 32 * 2**30
    assert data["per_token_bytes"] == 131_072
    assert data["per_sequence_bytes"] == 4 * 2**30
    workload = (data["batch"], data["tokens"], data["kv_dtype"], data["bytes_per_element"])
    assert workload == (8, 32_768, "bf16", 2)
    assert data["groups"] == [
        {
            "kind": "full_attention", "layers": 32, "kv_heads": 8, "k_head_dim": 128, "v_head_dim": 128,
            "window": None, "chunk": None, "tokens_kept": 32_768, "slots": 8 * 32_768, "kv_heads_per_gpu": 8,
            "metadata_bytes": 0, "elements_per_token": 2048,
            "bytes_per_token": 4096, "state_bytes": 0, "dtype": "bf16", "bytes": 34_359_738_368,
        }
    ]  # fmt: skip
    assert data["notes"] == []
    assert result.stderr == ""


def test_estimate_table_and_explain(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "-t", "2048", "--explain")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    # The seed's worked example, substituted term by term.
    assert "2 x 32 x 1 x 2,048 x 8 x 128 x 2 = 268,435,456 bytes" in out
    assert "total          268,435,456 bytes = 256 MiB = 268.44 MB" in out
    assert "per token      131,072 bytes = 128 KiB = 131.07 kB" in out
    assert "full_attention" in out and "│     32 │" in out


def test_explain_sliding_window_shows_the_min(run_cli) -> None:
    result = run_cli("estimate", "mistral-7b-v0.1", "-t", "32k", "--explain", "--units", "binary")
    assert result.exit_code == 0, result.stderr
    assert "T = min(32,768, W 4,096) = 4,096" in result.stdout
    assert "2 x 32 x 1 x 4,096 x 8 x 128 x 2 = 536,870,912 bytes" in result.stdout
    assert "= 512 MiB" in result.stdout and " MB" not in result.stdout
    assert "sliding_attention layers keep at most 4,096 of the 32,768 tokens" in result.stdout


def test_explain_mla_and_state(run_cli) -> None:
    mla = run_cli("estimate", "deepseek-v3", "-t", "1000", "--explain")
    assert "61 x 1 x 1,000 x (512 + 64) x 2 = 70,272,000 bytes" in mla.stdout
    hybrid = run_cli("estimate", "qwen3-next-80b-a3b", "-t", "1k", "--explain")
    assert "36 x 1 x (24,576 + 524,288) x 2 = 39,518,208 bytes" in hybrid.stdout


def test_prompt_plus_output(run_cli) -> None:
    # T = P + O = 1000 + 1048 = 2048 -> the seed example again.
    result = run_cli("estimate", "llama-3.1-8b", "--prompt", "1000", "--output", "1048", "--json")
    assert result.json()["total_bytes"] == 268_435_456


def test_encoder_decoder_prompt_feeds_the_encoder(run_cli) -> None:
    # t5-small: prompt 512 -> cross-attention 2 x 6 x 512 x 8 x 64 x 2 = 6,291,456;
    # output 100 -> self-attention 2 x 6 x 100 x 8 x 64 x 2 = 1,228,800.
    result = run_cli("estimate", "t5-small", "--prompt", "512", "--output", "100", "--json")
    data = result.json()
    assert data["tokens"] == 100 and data["encoder_tokens"] == 512
    assert data["total_bytes"] == 7_520_256


def test_by_hand_geometry(run_cli) -> None:
    result = run_cli("estimate", "--layers", "32", "--heads", "32", "--kv-heads", "8", "--head-dim", "128",
                     "-t", "2048", "--json")  # fmt: skip
    data = result.json()
    assert data["total_bytes"] == 268_435_456
    assert data["kv_dtype"] == "fp16"
    assert any("fp16" in n for n in data["notes"])


def test_config_file_and_folder(run_cli, tmp_path: Path) -> None:
    path = FIXTURES / "Llama-3.1-8B.json"
    assert run_cli("estimate", str(path), "-t", "2048", "--json").json()["total_bytes"] == 268_435_456
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(path.read_text())
    assert run_cli("estimate", str(folder), "-t", "2048", "--json").json()["total_bytes"] == 268_435_456


def test_kv_dtype_flag(run_cli) -> None:
    data = run_cli("estimate", "llama-3.1-8b", "-t", "2048", "--kv-dtype", "fp8", "--json").json()
    assert (data["total_bytes"], data["kv_dtype"], data["bytes_per_element"]) == (134_217_728, "fp8", 1)


def test_presets_list_and_show(run_cli) -> None:
    rows = run_cli("presets", "--json").json()
    by_name = {r["name"]: r for r in rows}
    assert len(rows) >= 25
    # 2 x 32 x 8 x 128 x 2 = 131,072 B/token at bf16.
    assert by_name["llama-3.1-8b"]["bytes_per_token_bf16"] == 131_072
    assert by_name["deepseek-v3"]["attention"] == "MLA"
    assert by_name["falcon-7b"]["attention"] == "MQA"
    table = run_cli("presets")
    assert table.exit_code == 0 and "llama-3.1-8b" in table.stdout
    shown = run_cli("presets", "show", "Llama-3.1-8B")
    assert "meta-llama/Llama-3.1-8B" in shown.stdout and "num_key_value_heads: 8" in shown.stdout
    assert run_cli("presets", "show", "gpt-oss-20b", "--json").json()["hf_repo"] == "openai/gpt-oss-20b"


def test_version_and_help(run_cli) -> None:
    from kvcalc import __version__

    assert run_cli("--version").stdout.strip() == f"kvcalc {__version__}"
    helptext = run_cli("estimate", "-h").stdout
    for flag in ("--tokens", "--batch", "--prompt", "--output", "--encoder-tokens", "--kv-dtype",
                 "--units", "--explain", "--json", "--revision", "--layers", "--heads", "--kv-heads",
                 "--head-dim"):  # fmt: skip
        assert flag in helptext
    assert "32k (k = 1024)" in " ".join(helptext.split())  # what 32k means
    assert helptext.index("Examples:") < helptext.index("Model and workload:")  # examples first


def test_python_dash_m(tmp_path: Path) -> None:
    result = run_subprocess("estimate", "llama-3.1-8b", "-t", "2048", "--json", cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["total_bytes"] == 268_435_456


def test_shell_completion_offers_preset_names(tmp_path: Path) -> None:
    env = {"_KVCALC_COMPLETE": "complete_bash", "COMP_WORDS": "kvcalc estimate deepseek-v", "COMP_CWORD": "2"}
    result = run_subprocess(env=env, cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == [
        "deepseek-v2-lite",
        "deepseek-v2-lite-chat",
        "deepseek-v3",
        "deepseek-v3-base",
        "deepseek-v3.2",
        "deepseek-v3.2-exp",
        "deepseek-v4",
        "deepseek-v4-flash",
    ]


def test_presets_show_usage_names_its_argument_as_its_help_does(run_cli) -> None:
    """typer writes a required argument {NAME} in the usage line; the help's own word is NAME."""
    result = run_cli("presets", "show", "--help")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "Usage: kvcalc presets show [OPTIONS] NAME"
    assert "{" not in result.stdout and "  NAME  Preset name or alias" in result.stdout
    missing = run_cli("presets", "show")
    assert missing.exit_code == 2 and "Missing argument 'NAME'" in missing.stderr
