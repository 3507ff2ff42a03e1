"""Every kind of bad input ends in exactly one ``kvcalc: error:`` line on stderr that names the
problem, a non-zero exit, nothing on stdout, and no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, assert_one_line_error, run_subprocess

LLAMA_BY_HAND = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 32,
    "hidden_size": 4096,
}


def write_config(tmp_path: Path, config: Any, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


# --- MODEL that cannot be read --------------------------------------------------------------


def test_missing_path(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("estimate", "./nope/config.json")
    assert_one_line_error(result, "no such file", "./nope/config.json")


def test_missing_path_outside_cwd(run_cli, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope" / "config.json")
    assert_one_line_error(run_cli("estimate", missing), "no such file", missing)


def test_unreadable_file(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_BY_HAND), encoding="utf-8")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user (root) that can read a mode-000 file")
        assert_one_line_error(run_cli("estimate", str(path)), "cannot read", str(path))
    finally:
        path.chmod(0o644)


def test_read_failure_is_one_line_even_as_root(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same path as a mode-000 file, forced: reading raises PermissionError."""
    path = Path(write_config(tmp_path, LLAMA_BY_HAND))
    real_read_bytes = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    assert_one_line_error(run_cli("estimate", str(path)), "cannot read", "Permission denied")


def test_malformed_json(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ', encoding="utf-8")
    assert_one_line_error(run_cli("estimate", str(path)), "not valid JSON", "line 1")


@pytest.mark.parametrize(("value", "kind"), [([1, 2, 3], "list"), (42, "int"), ("llama", "str"), (None, "NoneType")])
def test_json_that_is_not_an_object(run_cli, tmp_path: Path, value: Any, kind: str) -> None:
    result = run_cli("estimate", write_config(tmp_path, value))
    assert_one_line_error(result, "must be a JSON object", kind)


def test_binary_file(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'\x00\x01\x02{"model_type": "llama"}\x00')
    assert_one_line_error(run_cli("estimate", str(path)), "binary file")


def test_non_utf8_file(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes('{"model_type": "llama", "name": "café"}'.encode("latin-1"))
    assert_one_line_error(run_cli("estimate", str(path)), "not UTF-8")


def test_directory_without_config(run_cli, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    assert_one_line_error(run_cli("estimate", str(folder)), "has no config.json", str(folder))


def test_deeply_nested_json(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert_one_line_error(run_cli("estimate", str(path)), "nested too deeply")


def test_json_with_an_integer_too_long_to_parse(run_cli, tmp_path: Path) -> None:
    """json.loads raises a plain ValueError (not a JSONDecodeError) for an integer literal over
    Python's 4,300-digit limit; it once escaped as a traceback."""
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ' + "1" * 5000 + "}", encoding="utf-8")
    assert_one_line_error(run_cli("estimate", str(path)), str(path))


def test_unknown_preset_suggests_near_miss(run_cli) -> None:
    line = assert_one_line_error(run_cli("estimate", "llama-3.1-8"), "unknown preset", "'llama-3.1-8'")
    assert "did you mean" in line
    assert "llama-3.1-8b" in line


def test_unknown_preset_far_from_everything(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "zzzzzzzz"), "unknown preset", "kvcalc presets")


def test_unknown_preset_show(run_cli) -> None:
    assert_one_line_error(run_cli("presets", "show", "llama-3.1-8"), "unknown preset", "llama-3.1-8b")


# --- flags ------------------------------------------------------------------------------------


def test_unknown_kv_dtype(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--kv-dtype", "int3")
    assert_one_line_error(result, "KV dtype", "'int3'", "fp16")


def test_empty_kv_dtype(run_cli) -> None:
    """An empty --kv-dtype (say from an unset shell variable) is refused, not silently read as
    "the model's own dtype" (it once was: ``if kv_dtype`` treated "" like no flag)."""
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--kv-dtype", ""), "KV dtype")


@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
@pytest.mark.parametrize("value", ["0", "-5", "abc", "", "1.5", "0k"])
def test_bad_counts(run_cli, flag: str, value: str) -> None:
    result = run_cli("estimate", "llama-3.1-8b", flag, value)
    assert_one_line_error(result, flag, repr(value))


@pytest.mark.parametrize(
    "args",
    [
        ("--prompt", "0", "--output", "8"),
        ("--prompt", "8", "--output", "-1"),
        ("--encoder-tokens", "0", "--output", "8"),
    ],
)
def test_bad_other_counts(run_cli, args: tuple[str, ...]) -> None:
    flag = next(a for a, v in zip(args[::2], args[1::2], strict=True) if v != "8")
    assert_one_line_error(run_cli("estimate", "t5-small", *args), flag)


@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
@pytest.mark.parametrize("value", ["1,00", "1__0", "10_00"])
def test_misplaced_thousands_separators(run_cli, flag: str, value: str) -> None:
    """1,00 was read as 100 and 1__0 as 10: a separator stands between groups of three digits."""
    result = run_cli("estimate", "llama-3.1-8b", flag, value)
    assert result.exit_code == 2
    assert_one_line_error(result, flag, "thousands separators", repr(value))


@pytest.mark.parametrize(
    ("args", "flag", "message"),
    [
        (("--gpu-memory", "80"), "--gpu-memory", "has no unit, so it would be 80 bytes"),  # was 80 bytes
        (("--kv-budget", "1.5B"), "--kv-budget", "whole number of bytes"),  # was 1 byte
        (("--gpu", "h100", "--weights", "16"), "--weights", "has no unit"),
        (("--gpu", "h100", "--overhead", "2"), "--overhead", "has no unit"),
        (("--kv-budget", "16,00GB"), "--kv-budget", "thousands separators"),
    ],
)
def test_bad_sizes(run_cli, args: tuple[str, ...], flag: str, message: str) -> None:
    result = run_cli("fit", "llama-3.1-8b", *args)
    assert result.exit_code == 2
    assert_one_line_error(result, flag, message)


@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
def test_count_with_too_many_digits(run_cli, flag: str) -> None:
    """A count of more than 4,300 digits once raised Python's int-conversion ValueError."""
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", flag, "9" * 5000), flag)


@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
@pytest.mark.parametrize("as_json", [False, True])
def test_absurdly_large_count(run_cli, flag: str, as_json: bool) -> None:
    """A 400-digit count was once accepted, and turning the byte total into a float (units.py
    ``_scaled``, render.py ``total_gib``) raised OverflowError."""
    args = ["estimate", "llama-3.1-8b", flag, "7" * 400, *(["--json"] if as_json else [])]
    assert_one_line_error(run_cli(*args), flag)


@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
@pytest.mark.parametrize("value", ["1125899906842625", "1099511627777k", "99999999999999999999"])
def test_count_just_past_the_limit(run_cli, flag: str, value: str) -> None:
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", flag, value), flag, "implausibly large")


@pytest.mark.parametrize("as_json", [False, True])
def test_largest_accepted_workload_on_the_largest_accepted_model_prints(run_cli, tmp_path: Path, as_json: bool) -> None:
    """Layers at their cap (2**16), heads and head dim at theirs (2**24), T = B = 2**50: still a
    result, no float overflow."""
    side = 2**24
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2**16,
        "num_attention_heads": side,
        "num_key_value_heads": side,
        "head_dim": side,
        "torch_dtype": "float32",
    }
    path = write_config(tmp_path, config)
    most = str(2**50)
    args = ["estimate", path, "--tokens", most, "--batch", most]
    result = run_cli(*args, *(["--json"] if as_json else ["--explain"]))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    expected = 2 * 2**16 * 2**50 * 2**50 * side * side * 4
    if as_json:
        assert result.json()["total_bytes"] == expected
    else:
        assert f"{expected:,}" in result.stdout


def test_bad_units(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--units", "metric"), "--units", "metric")


def test_tokens_with_prompt(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--tokens", "8", "--prompt", "8")
    assert_one_line_error(result, "--tokens", "--prompt")


def test_encoder_decoder_without_output(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "t5-small", "--prompt", "8"), "--output")


def test_unknown_option(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--tokenz", "8"), "--tokenz")


# --- describing a model by hand ------------------------------------------------------------------


def test_layers_zero(run_cli) -> None:
    result = run_cli("estimate", "--layers", "0", "--kv-heads", "8", "--head-dim", "64")
    assert_one_line_error(result, "layers", "0")


def test_layers_zero_alone(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "--layers", "0"), "--layers", "range")


def test_kv_heads_negative(run_cli) -> None:
    result = run_cli("estimate", "--kv-heads", "-1", "--layers", "2", "--head-dim", "64")
    assert_one_line_error(result, "--kv-heads", "-1")


def test_head_dim_zero(run_cli) -> None:
    result = run_cli("estimate", "--kv-heads", "8", "--layers", "2", "--head-dim", "0")
    assert_one_line_error(result, "--head-dim", "0")


def test_layers_not_a_number(run_cli) -> None:
    result = run_cli("estimate", "--layers", "abc", "--kv-heads", "8", "--head-dim", "64")
    assert_one_line_error(result, "--layers")


def test_by_hand_kv_heads_do_not_divide_heads(run_cli) -> None:
    result = run_cli("estimate", "--heads", "32", "--kv-heads", "5", "--layers", "2", "--head-dim", "64")
    assert_one_line_error(result, "KV heads (5)", "32")


def test_by_hand_more_kv_heads_than_heads(run_cli) -> None:
    result = run_cli("estimate", "--heads", "8", "--kv-heads", "16", "--layers", "2", "--head-dim", "64")
    assert_one_line_error(result, "KV heads (16)", "8")


def test_model_and_by_hand_together(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--layers", "2", "--head-dim", "64")
    assert_one_line_error(result, "not both")


# --- configs with absurd fields -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("num_hidden_layers", 0, "must be positive"),
        ("num_hidden_layers", -3, "must be positive"),
        ("num_attention_heads", -4, "must be positive"),
        ("num_attention_heads", 0, "must be positive"),
        ("hidden_size", 0, "must be positive"),
        ("num_hidden_layers", "32", "must be an integer"),
        ("num_hidden_layers", True, "must be an integer"),
        ("num_attention_heads", 32.0, "must be an integer"),
        ("num_attention_heads", [32], "must be an integer"),
        ("num_hidden_layers", 2**40, "implausibly large"),
        ("num_hidden_layers", 2**16 + 1, "implausibly large"),  # layers are capped lower than dims
    ],
)
def test_bad_config_field(run_cli, tmp_path: Path, field: str, value: Any, needle: str) -> None:
    path = write_config(tmp_path, {**LLAMA_BY_HAND, field: value})
    assert_one_line_error(run_cli("estimate", path), f"'{field}'", needle)


def test_negative_field_in_text_config(run_cli, tmp_path: Path) -> None:
    config = {"model_type": "llava", "text_config": {"model_type": "llama", "num_attention_heads": -4}}
    path = write_config(tmp_path, config)
    assert_one_line_error(run_cli("estimate", path), "'text_config.num_attention_heads'", "-4")


def test_config_kv_heads_do_not_divide_heads(run_cli, tmp_path: Path) -> None:
    path = write_config(tmp_path, {**LLAMA_BY_HAND, "num_key_value_heads": 5})
    assert_one_line_error(run_cli("estimate", path), "'num_key_value_heads'", "(5)", "32")


def test_hidden_size_not_divisible_by_heads(run_cli, tmp_path: Path) -> None:
    path = write_config(tmp_path, {**LLAMA_BY_HAND, "hidden_size": 4000, "num_attention_heads": 48})
    assert_one_line_error(run_cli("estimate", path), "'hidden_size'", "not divisible")


def test_model_type_without_attention_geometry(run_cli, tmp_path: Path) -> None:
    path = write_config(tmp_path, {"model_type": "clip_vision_model", "hidden_size": 768})
    assert_one_line_error(run_cli("estimate", path), "clip_vision_model", "'num_hidden_layers'")


def test_model_type_with_layers_but_no_heads(run_cli, tmp_path: Path) -> None:
    config = {"model_type": "clip_vision_model", "hidden_size": 768, "num_hidden_layers": 12}
    path = write_config(tmp_path, config)
    assert_one_line_error(run_cli("estimate", path), "no attention geometry", "clip_vision_model")


def test_config_without_model_type(run_cli, tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA_BY_HAND.items() if k != "model_type"}
    assert_one_line_error(run_cli("estimate", write_config(tmp_path, config)), "'model_type'")


def test_text_config_not_an_object(run_cli, tmp_path: Path) -> None:
    path = write_config(tmp_path, {"model_type": "llava", "text_config": [1, 2]})
    assert_one_line_error(run_cli("estimate", path), "'text_config'", "must be an object")


@pytest.mark.parametrize(
    ("layer_types", "needle"),
    [
        (["full_attention"] * 3, "lists 3 layers but the model has 2"),
        (["full_attention"] * 5, "lists 5 layers but the model has 2"),
        ([], "lists 0 layers"),
        ("full_attention", "must be a list of strings"),
        (["full_attention", 7], "must be a list of strings"),
        (["full_attention", "banana_attention"], "unknown layer type 'banana_attention'"),
    ],
)
def test_bad_layer_types(run_cli, tmp_path: Path, layer_types: Any, needle: str) -> None:
    path = write_config(tmp_path, {**LLAMA_BY_HAND, "layer_types": layer_types})
    assert_one_line_error(run_cli("estimate", path), "'layer_types'", needle)


def test_sliding_layers_without_window(run_cli, tmp_path: Path) -> None:
    config = {**LLAMA_BY_HAND, "layer_types": ["sliding_attention", "full_attention"]}
    path = write_config(tmp_path, config)
    assert_one_line_error(run_cli("estimate", path), "'sliding_window'", "missing")


def test_real_fixture_with_broken_field(run_cli, tmp_path: Path) -> None:
    config = json.loads((FIXTURES / "Qwen3-Next-80B-A3B.json").read_text())
    config["linear_num_value_heads"] = 0
    path = write_config(tmp_path, config)
    assert_one_line_error(run_cli("estimate", path), "'linear_num_value_heads'", "must be positive")


# --- a drawing flag with --json: refused alike by every command ---------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["estimate", "llama-3.1-8b", "--explain"], "--explain writes the derivation as text"),
        (["compare", "llama-3.1-8b", "--chart"], "--chart draws text bars"),
        (["compare", "llama-3.1-8b", "--plot", "PLOT"], "--plot saves a picture"),
        (["compare", "llama-3.1-8b", "--chart", "--plot", "PLOT"], "--chart draws text bars, --plot saves a picture"),
        (["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--plot", "PLOT"], "--plot saves a picture"),
        (["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--explain"], "--explain writes the derivation as text"),
    ],
    ids=["estimate-explain", "compare-chart", "compare-plot", "compare-chart-plot", "speed-plot", "speed-explain"],
)
def test_a_drawing_flag_with_json_is_refused_the_same_way(run_cli, tmp_path: Path, argv: list[str], says: str) -> None:
    plot = tmp_path / "plot.png"
    argv = [str(plot) if a == "PLOT" else a for a in argv]
    result = run_cli(*argv, "--json")
    assert result.exit_code == 2
    line = assert_one_line_error(result)
    assert line == f"kvcalc: error: {says}; --json gives the numbers: choose one"
    assert not plot.exists()  # refused before anything is drawn


# --- the console entry point itself ----------------------------------------------------------------


def test_console_entry_prints_no_traceback_for_a_bad_config(tmp_path: Path) -> None:
    path = write_config(tmp_path, {**LLAMA_BY_HAND, "num_hidden_layers": 0})
    result = run_subprocess("estimate", path)
    assert_one_line_error(result, "'num_hidden_layers'", "must be positive")
    assert result.exit_code == 1


def test_console_entry_prints_no_traceback_for_a_bad_flag() -> None:
    result = run_subprocess("estimate", "llama-3.1-8b", "--tokens", "abc")
    assert_one_line_error(result, "--tokens", "'abc'")
    assert result.exit_code == 2


# --- flags that make no sense for this model, engine or GPU (issue 36) ------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # deepseek-v3 has 61 layers: 1,000 stages would hold none
        (["speed", "deepseek-v3", "--gpu", "h100-sxm", "--pp", "1000"], ["--pp 1000", "61 layers"]),
        # only SGLang and vLLM run attention data-parallel within a TP group
        (["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--dp-attention", "2"], ["--dp-attention 2"]),
        (
            ["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--dp-attention", "2", "--engine", "llama.cpp"],
            ["--dp-attention 2", "llama.cpp"],
        ),
        (
            ["speed", "llama-3.1-8b", "--gpu", "m4-max-64gb", "--tp", "2", "--dp-attention", "2", "--engine", "mlx"],
            ["--dp-attention 2", "mlx"],
        ),
        (
            ["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--dp-attention", "2", "--engine", "llama.cpp"],
            ["--dp-attention 2", "llama.cpp"],
        ),
        (["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--dp-attention", "2"], ["--dp-attention 2"]),
        # RotatingKVCache keeps 4 tokens always (mlx-lm 0.32.2)
        (["estimate", "llama-3.1-8b", "--engine", "mlx", "--max-kv-size", "1"], ["--max-kv-size 1", "give 5"]),
        (["estimate", "llama-3.1-8b", "--engine", "mlx", "--max-kv-size", "4"], ["--max-kv-size 4", "give 5"]),
        # vLLM 0.32's CUDA attention backends take blocks in multiples of 16
        (["estimate", "llama-3.1-8b", "--engine", "vllm", "--block-size", "7"], ["--block-size", "multiples of 16"]),
        (["fit", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100-sxm", "--block-size", "8"], ["--block-size"]),
        # an engine that does not run on that kind of GPU
        (["fit", "llama-3.1-8b", "--gpu", "m4-max-64gb", "--engine", "vllm"], ["--gpu m4-max-64gb", "Metal"]),
        (["speed", "llama-3.1-8b", "--gpu", "m4-max-64gb", "--engine", "vllm"], ["--gpu m4-max-64gb", "Metal"]),
        (["fit", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "mlx"], ["--gpu mi300x", "Apple silicon"]),
        (["speed", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "mlx"], ["--gpu mi300x", "Apple silicon"]),
        # llama.cpp (and mlx-lm) store a shared prefix once per sequence all the same
        (
            ["estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--batch", "2", "--shared-prefix", "100"],
            ["--shared-prefix changes nothing"],
        ),
        (
            ["estimate", "llama-3.1-8b", "--engine", "mlx", "--batch", "2", "--shared-prefix", "100"],
            ["--shared-prefix changes nothing"],
        ),
    ],
)
def test_flags_that_change_nothing_or_cannot_run(run_cli, args: list[str], needles: list[str]) -> None:
    result = run_cli(*args)
    assert_one_line_error(result, *needles)
    assert result.exit_code == 2


def test_lengths_with_shared_prefix_under_llama_cpp(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n100,10\n200,20\n", encoding="utf-8")
    args = ("estimate", "llama-3.1-8b", "--lengths", str(path), "--engine", "llama.cpp", "--shared-prefix", "50")
    result = run_cli(*args)
    # A request mix takes no shared prefix under any engine: refused before the engine is asked.
    assert_one_line_error(result, "--shared-prefix is not modelled for a request mix")
    assert result.exit_code == 2


def test_a_sweep_listing_a_batch_twice_is_refused_as_compare_refuses_a_length_twice(run_cli) -> None:
    result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--sweep", "4,1,4")
    assert_one_line_error(result, "--sweep lists 4 more than once")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("engine", "flag"),
    [("vllm", ("--max-batched-tokens", "512")), ("llama.cpp", ("--ubatch", "64")), ("llama.cpp", ("--swa-full",))],
)
def test_a_batch_knob_on_a_model_with_no_window_changes_nothing_in_estimate(run_cli, engine, flag) -> None:
    # They size only sliding, chunked or compressed layers (vLLM's in-flight reservation, llama.cpp's
    # SWA cells); Llama 3.1 has none. Gemma 2's sliding layers take them.
    result = run_cli("estimate", "llama-3.1-8b", "--engine", engine, *flag)
    assert_one_line_error(result, f"{flag[0]} changes nothing in llama-3.1-8b's cache under {engine}")
    assert result.exit_code == 2
    assert run_cli("estimate", "gemma-2-9b", "--engine", engine, *flag).exit_code == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", ""], "MODEL is empty"),
        (["estimate", "llama-3.1-8b", "--revision", "main"], "--revision applies to Hub repos"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--utilization", "nan"], "--utilization"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--utilization", "inf"], "--utilization"),
        (["probe", "llama-3.1-8b", "--tokens", "20", "--device", "tpu"], "--device must be auto, cpu or cuda"),
        (["estimate", "llama-3.1-8b", "--lengths", "/"], "--lengths"),
    ],
)
def test_more_adversarial_inputs(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "llama-3.1-8b", "--kv-dtype", "int4", "--quant-group", "1" + "0" * 26],
         "--quant-group is implausibly large"),
        (["estimate", "llama-3.1-8b", "--engine", "vllm", "--block-size", "1" + "0" * 26],
         "--block-size is implausibly large"),
        (["estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--ubatch", "1" + "0" * 26], "--ubatch is implausibly"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--weights", "0"], "--weights must be a positive size"),
        (["speed", "llama-3.1-8b", "--gpu", "h100", "--prompt", "9", "--output", "2", "--weights", "0"],
         "--weights must be a positive size"),
        (["probe", "llama-3.1-8b", "--engine", "llama.cpp", "--timeout", "nan"], "--timeout must be a finite number"),
        (["probe", "llama-3.1-8b", "--engine", "llama.cpp", "--timeout", "inf"], "--timeout must be a finite number"),
        (["probe", "llama-3.1-8b", "--timeout", "60"], "--timeout applies to the real engines' probes"),
        (["estimate", "llama-3.1-8b", "--engine", "vllm@"], "names no release after '@'"),
        (["estimate", "llama-3.1-8b", "--tokens", "1e26"], "--tokens is implausibly large"),
        (["estimate", "llama-3.1-8b", "--tokens", "9" * 5000], "--tokens is implausibly large"),
    ],
)  # fmt: skip
def test_nonsense_is_refused_in_one_line(run_cli, argv: list[str], message: str) -> None:
    result = run_cli(*argv)
    assert result.exit_code == 2
    assert_one_line_error(result, message)
