"""The engine command-line reader and writer (kvcalc.engines.commandline), on a toy program whose
table is declared here: the reading rules argparse and the engines' own parsers follow."""

from __future__ import annotations

import pytest

from kvcalc.engines.commandline import (
    Arg,
    CommandLine,
    Reading,
    ReadText,
    YamlConfig,
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


# --- The reading rules a program declares (parser, config, hooks, environment) ---------------------

ARGPARSE_TOY = CommandLine(
    engine="toy",
    programs=(("toy", "run"),),
    args=(
        Arg(("--max-tokens",), "max_tokens", parse=plain_int),
        Arg(("--max-batch",), "batch", parse=plain_int),
        Arg(("--prompt",), "prompt"),
        Arg(("--eager",), "enforce_eager", takes="flag", negatable=True),
        Arg(("--model",), "model"),
        Arg(("--model-type",), "model_type", exact=True),
        quiet("--stop", nargs="+"),
        Arg(("--adapters",), "adapters", nargs="*"),
        unmodelled("--offload-gb", why="weights moved to the CPU", default=("0", "0.0")),
        Arg(("--config",), "config"),
    ),
    source="toy 1.0 args.py",
    positional="model",
    parser="argparse",
    underscores=True,
    positional_wins=True,
    config=YamlConfig(
        many="{program}: two configs",
        missing="{program}: no config file",
        extension="{program}: {extension} is no YAML",
        not_yaml="{program}: {path} is no YAML: {error}",
        no_mapping="{program}: {path} holds no mapping",
        no_model="{program}: no model",
        first=False,
        note=True,
    ),
)


def parse(*words: str, files: dict[str, str] | None = None) -> dict[str, object]:
    return dict(ARGPARSE_TOY.read(list(words), {}, (files or {}).__getitem__).settings)


def test_argparse_reads_a_unique_prefix_as_its_flag_and_refuses_an_ambiguous_one() -> None:
    assert parse("m", "--max-t", "5", "--prom=hi")["max_tokens"] == 5
    # Python's argparse: "ambiguous option: --max could match --max-batch, --max-tokens".
    with pytest.raises(
        UsageError, match="toy run: error: ambiguous option: --max could match --max-batch, --max-tokens"
    ):
        parse("m", "--max", "5")
    # A negation is a spelling too: --no-e is --no-eager.
    assert parse("m", "--eager", "--no-e")["enforce_eager"] is False
    # An exact flag (a word the program takes out before argparse) is no prefix's.
    assert parse("m", "--model-type", "llm")["model_type"] == "llm"
    with pytest.raises(UsageError, match="unrecognized arguments: --model-t"):
        parse("m", "--model-t", "llm")


def test_argparse_nargs_flags_take_the_words_up_to_the_next_flag() -> None:
    # "-" and a negative number are words, not flags; "*" takes none, "+" at least one.
    assert parse("m", "--adapters", "a", "-", "-1", "--max-tokens", "3") == {
        "model": "m", "adapters": "a - -1", "max_tokens": 3, "engine": "toy"}  # fmt: skip
    assert parse("m", "--adapters")["adapters"] == ""
    with pytest.raises(UsageError, match="argument --stop: expected at least one argument"):
        parse("m", "--stop", "--eager")
    # A plain flag's value may be "-" (stdin), as argparse reads it.
    assert parse("m", "--prompt", "-")["prompt"] == "-"


def test_underscores_in_a_flag_name_are_dashes_and_the_positional_model_wins() -> None:
    assert parse("--model", "a", "b", "--max_tokens=7") == {"model": "b", "max_tokens": 7, "engine": "toy"}


def test_a_memory_flag_given_its_default_value_is_quiet() -> None:
    assert ARGPARSE_TOY.read(["m", "--offload-gb", "0"], {}, nothing).warnings == ()
    warned = ARGPARSE_TOY.read(["m", "--offload-gb", "4"], {}, nothing).warnings
    assert warned == ("toy run --offload-gb 4: weights moved to the CPU; kvcalc does not model it",)


def test_a_yaml_config_is_spliced_after_the_model_and_the_line_wins() -> None:
    files = {"c.yaml": "model: x\nmax_tokens: 9\neager: false\nstop: [a, b]\n"}
    command = ARGPARSE_TOY.read(["m", "--config", "c.yaml", "--max-tokens", "5"], {}, files.__getitem__)
    assert command.settings == {"model": "m", "max_tokens": 5, "enforce_eager": False, "engine": "toy"}
    assert command.notes == ("read c.yaml (--config) as: --model x --max_tokens 9 --no-eager --stop a b",)
    refused = [
        (["m", "--config", "c.yaml", "--config", "c.yaml"], "", "two configs"),
        (["m", "--config"], "", "no config file"),
        (["m", "--config", "c.json"], "", "json is no"),
        (["m", "--config", "c.yaml"], "[", "c.yaml is no YAML: "),
        (["m", "--config", "c.yaml"], "- a", "holds no mapping"),
        (["--config", "c.yaml"], "max-tokens: 1", "no model"),
    ]
    for words, text, error in refused:
        with pytest.raises(UsageError, match=error):
            ARGPARSE_TOY.read(words, {}, {"c.yaml": text}.__getitem__)


def test_a_yaml_config_first_with_booleans_as_text_and_negatables_refused() -> None:
    config = YamlConfig(many="", missing="", extension="", not_yaml="", no_mapping="", bool_text=True,
                        negatable="{key} is a BooleanOptionalAction", empty_is_mapping=True)  # fmt: skip
    toy = CommandLine(engine="toy", programs=(("toy",),), args=ARGPARSE_TOY.args, source="toy", config=config,
                      parser="argparse")  # fmt: skip
    files = {"c.yaml": "prompt: true\nmax-tokens: 3\n", "n.yaml": "eager: true\n", "e.yaml": ""}
    got = toy.read(["--max-tokens", "4", "--config", "c.yaml"], {}, files.__getitem__).settings
    assert got == {"prompt": "true", "max_tokens": 4, "engine": "toy"}
    with pytest.raises(UsageError, match="eager is a BooleanOptionalAction"):
        toy.read(["--config", "n.yaml"], {}, files.__getitem__)
    assert toy.read(["--config", "e.yaml"], {}, files.__getitem__).settings == {"engine": "toy"}


class _FileToy(CommandLine):
    """A program that reads a file its -f names, or ./Spec by default, once its words are read."""

    def rewrite(self, words: list[str]) -> list[str]:
        return ["-f" if w == "--spec" else w for w in words]

    def after_words(self, reading: Reading, read_text: ReadText) -> None:
        path = str(reading.values.pop("file", "Spec"))
        reading.values["tokens"] = int(read_text(path))


FILE_TOY = _FileToy(
    engine="toy", programs=(("toy", "make"),), args=(Arg(("-f", "--file"), "file"), quiet("--verbose", takes="flag")),
    source="toy", flag_value=lambda spelling, text: {"true": True, "false": False}[text],
    env_elsewhere=("toy serve", frozenset({"TOY_SLOTS"})),
)  # fmt: skip


def test_after_words_reads_the_file_the_words_name_or_the_default_one() -> None:
    files = {"Spec": "4096", "other": "512"}
    assert FILE_TOY.read([], {}, files.__getitem__).settings == {"tokens": 4096, "engine": "toy"}
    assert FILE_TOY.read(["--spec", "other"], {}, files.__getitem__).settings["tokens"] == 512


def test_a_switch_with_a_value_and_another_programs_variables() -> None:
    # flag_value: Go's pflag reads --verbose=false; env_elsewhere: a client given the server's
    # variable reads none of its environment and says so.
    command = FILE_TOY.read(["--verbose=false"], {"TOY_SLOTS": "4", "HOME": "/"}, {"Spec": "1"}.__getitem__)
    assert command.settings == {"tokens": 1, "engine": "toy"}
    assert command.warnings == ("TOY_SLOTS: toy make passes it to no server (toy serve reads it when it starts); "
                                "not read",)  # fmt: skip


def test_env_text_cleans_each_value_and_an_empty_one_is_unset() -> None:
    toy = CommandLine(engine="toy", programs=(("toy",),), args=(), source="toy", env=TOY.env, env_prefix="TOY_",
                      env_text=lambda text: text.strip().strip("'"))  # fmt: skip
    assert toy.read([], {"TOY_SLOTS": " '3' "}, nothing).settings["batch"] == 3
    assert "batch" not in toy.read([], {"TOY_SLOTS": "''"}, nothing).settings


def test_a_soft_setting_the_reader_marks_is_said_on_the_command() -> None:
    class Soft(CommandLine):
        def interpret(self, reading: Reading) -> dict[str, object]:  # type: ignore[override]
            reading.soft.add("batch")
            return {"batch": 2, "engine": self.engine}

    command = Soft(engine="toy", programs=(("toy",),), args=(), source="toy").read([], {}, nothing)
    assert command.soft == frozenset({"batch"})
