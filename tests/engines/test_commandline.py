"""The engine command-line reader and writer (kvcalc.engines.commandline), on a toy program whose
table is declared here: the reading rules argparse and the engines' own parsers follow."""

from __future__ import annotations

import pytest

from kvcalc.engines.commandline import (
    Arg,
    CommandLine,
    plain_float,
    plain_int,
    quiet,
    read_command,
    split_environment,
    unmodelled,
)
from kvcalc.errors import UsageError

TOY = CommandLine(
    engine="toy",
    programs=(("toy", "serve"), ("python", "-m", "toy.server")),
    args=(
        Arg(("-c", "--ctx-size"), "tokens", parse=plain_int),
        Arg(("--util",), "utilization", parse=plain_float),
        Arg(("--eager",), "enforce_eager", takes="flag", negatable=True),
        Arg(("--config",), "config"),
        unmodelled("--cpu-offload-gb", why="weights moved to the CPU"),
        quiet("--port"),
    ),
    env=(Arg(("TOY_SLOTS",), "batch", parse=plain_int),),
    env_prefix="TOY_",
    source="toy 1.0 args.py",
    positional="model",
)


def nothing(path: str) -> str:
    raise AssertionError(f"no file should be read, asked {path}")


def read(*words: str, env: dict[str, str] | None = None) -> dict[str, object]:
    return dict(TOY.read(list(words), env or {}, nothing).settings)


def test_values_spaced_or_after_an_equals_sign() -> None:
    assert read("m", "-c", "4096", "--util=0.9") == {"model": "m", "tokens": 4096, "utilization": 0.9, "engine": "toy"}


def test_a_negatable_flag_and_its_no_form() -> None:
    assert read("--eager")["enforce_eager"] is True
    assert read("--eager", "--no-eager")["enforce_eager"] is False  # the last one wins, as in argparse


def test_an_unknown_flag_is_the_engines_own_error_naming_the_source() -> None:
    with pytest.raises(UsageError, match=r"toy serve: error: unrecognized arguments: --bogus .*toy 1.0 args.py"):
        read("--bogus", "1")


def test_a_missing_value_and_a_bad_value_are_errors() -> None:
    with pytest.raises(UsageError, match="argument -c: expected one argument"):
        read("-c")
    with pytest.raises(UsageError, match="argument --ctx-size: invalid value 'lots'"):
        read("--ctx-size", "lots")


def test_a_second_positional_is_refused() -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: extra"):
        read("m", "extra")


def test_memory_flags_kvcalc_does_not_model_are_named_and_quiet_ones_are_not() -> None:
    command = TOY.read(["m", "--cpu-offload-gb", "4", "--port", "8000"], {}, nothing)
    assert command.warnings == ("toy serve --cpu-offload-gb 4: weights moved to the CPU; kvcalc does not model it",)


def test_environment_variables_the_engine_reads_and_unknown_ones_of_its_prefix() -> None:
    command = TOY.read(["m"], {"TOY_SLOTS": "4", "TOY_COLOUR": "red", "HOME": "/root"}, nothing)
    assert command.settings["batch"] == 4
    assert command.warnings == ("TOY_COLOUR is no toy serve variable kvcalc knows (toy 1.0 args.py): not read",)


def test_environment_prefix_words_are_split_off() -> None:
    assert split_environment(["A=1", "env_B=x", "toy", "serve", "X=2"]) == ({"A": "1", "env_B": "x"},
                                                                              ["toy", "serve", "X=2"])  # fmt: skip
    assert split_environment(["env", "A=1", "toy"]) == ({"A": "1"}, ["toy"])


def test_programs_match_through_paths_and_python_versions() -> None:
    assert TOY.matches(["/opt/bin/toy", "serve", "m"]) == 2
    assert TOY.matches(["python3.12", "-m", "toy.server"]) == 3
    assert TOY.matches(["pythonista", "-m", "toy.server"]) == 0
    assert TOY.matches(["toy", "run"]) == 0


def test_a_written_line_reads_back_to_the_same_settings() -> None:
    written = TOY.write({"model": "m", "tokens": 8192, "utilization": 0.95, "batch": 3, "enforce_eager": True})
    assert written.argv == ("TOY_SLOTS=3", "toy", "serve", "m", "--ctx-size", "8192", "--util", "0.95", "--eager")
    env, words = split_environment(list(written.argv))
    settings = TOY.read(words[2:], env, nothing).settings
    assert settings == {"model": "m", "tokens": 8192, "utilization": 0.95, "batch": 3, "enforce_eager": True,
                        "engine": "toy"}  # fmt: skip


def test_an_unknown_program_names_the_ones_kvcalc_reads() -> None:
    with pytest.raises(UsageError, match=r"kvcalc reads no 'nginx' command line; it reads vllm serve"):
        read_command(["nginx", "-g", "daemon off;"], nothing)
    with pytest.raises(UsageError, match="names no program"):
        read_command(["A=1"], nothing)


def test_one_string_is_split_as_a_shell_would() -> None:
    command = read_command(["vllm serve 'Qwen/Qwen3-8B' --max-model-len 4096"], nothing)
    assert command.settings["model"] == "Qwen/Qwen3-8B"
    assert command.settings["tokens"] == 4096
