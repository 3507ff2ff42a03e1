"""An engine's own command line, both ways: read (``vllm serve MODEL -tp 2 ...`` -> the settings
kvcalc's flags stand for) and written (fit's answer -> the line that runs it).

Each engine package with a command line has a ``commandline`` module whose ``READERS`` tuple holds
one ``CommandLine`` per program it answers to (``vllm serve``, ``llama-server``); a reader's flag
table is declared once, with the engine's source it was read from, and its knobs' flags come from
the engine's ``EngineOptions`` (each ``Knob.engine_flag``), so the flags kvcalc accepts and the
ones it reads are one declaration. Every flag of the engine is in the table: one that sets what
kvcalc models gives a setting, one that changes memory kvcalc does not model is a warning naming
it, one that does not touch memory passes quietly, and one the engine does not have is an error,
as the engine itself would refuse it.

How a program's words are read is declared, not re-implemented by each engine: argparse's rules
(``parser="argparse"``: a long flag's unique prefix, ``Arg.nargs``, "-" as a value), vLLM's
underscores, a YAML ``--config`` file (``YamlConfig``), a memory flag quiet at its ``Arg.default``,
Go's ``--flag=false`` (``flag_value``), the environment a program reads (``env_text``,
``env_elsewhere``), and the hooks ``rewrite`` (words as the engine's own code hands them to its
parser) and ``after_words`` (a file the words name, or the program's default one). A reader may
mark a setting ``soft`` (its default, not the line's word): the user's own kvcalc flag wins over it.

Settings are keyed by the API's parameter names (``tokens``, ``batch``, ``tp``, ``utilization``,
``kv_dtype``, a knob's name...), with ``model`` and ``engine`` besides; the CLI turns them into
its flags. Pure: a file the line names (vLLM's ``--config``, a Modelfile) is read through the
``read_text`` function the caller passes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Literal

from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.engines.knobs import EngineOptions, Knob

SettingValue = int | float | str | bool
Settings = dict[str, SettingValue]
# Reads a file the command line names (a YAML config, a Modelfile): path -> its text.
ReadText = Callable[[str], str]
Takes = Literal["value", "flag", "optional"]
# argparse's nargs for a flag taking several words: "+" one or more, "*" any number ("": one value).
Nargs = Literal["", "+", "*"]
# How a program's words are read: "plain" (each flag one value: llama.cpp's own parser, Go's pflag)
# or "argparse" (Python's: a long flag's unique prefix stands for it, an ambiguous one is an error,
# nargs flags take the words up to the next flag, "-" is a value).
Parser = Literal["plain", "argparse"]

# A setting a reader gives where the line leaves the context to the model (vllm serve with no
# --max-model-len, llama-server -c 0): tokens are the model's own context over this many slots,
# which the caller, who opens the model, resolves (api.read_engine_command).
TOKENS_FROM_MODEL = "tokens_from_model"

# The settings fit's answer hands a writer, in the order a written line puts them.
WRITTEN_ORDER = ("model", "tokens", "batch", "max_model_len", "tp", "pp", "dp", "utilization", "kv_budget",
                 "kv_dtype", "k_dtype", "v_dtype")  # fmt: skip


def plain_int(text: str) -> int:
    """An integer as argparse's ``type=int`` reads it (``int()``: digits, a sign, underscores)."""
    return int(text)


def plain_float(text: str) -> float:
    return float(text)


def as_text(text: str) -> str:
    return text


@dataclass(frozen=True)
class Arg:
    """One flag of an engine's command line: its spellings, whether it takes a value, and what it
    means to kvcalc -- ``key`` the setting it gives (None: none), ``parse`` how the engine reads its
    value, ``memory`` (non-empty: it changes memory kvcalc does not model; the warning's reason).
    A flag with no key and no memory reason passes quietly. ``negatable``: argparse's
    BooleanOptionalAction, ``--no-X`` turns it off. ``constant``: the value a flag (no value) sets.
    ``nargs``: argparse's "+"/"*" (its words are joined into one value, space-separated).
    ``default``: the values (as written) that leave the engine as it is: a memory flag given one
    of them changes nothing and passes quietly. ``exact``: argparse abbreviates it to no prefix
    (a word the program takes out before its parser sees the line)."""

    spellings: tuple[str, ...]
    key: str | None = None
    takes: Takes = "value"
    parse: Callable[[str], SettingValue] = as_text
    memory: str = ""
    negatable: bool = False
    constant: SettingValue = True
    nargs: Nargs = ""
    default: tuple[str, ...] = ()
    exact: bool = False

    @property
    def name(self) -> str:
        """The spelling a written line uses: the first long one."""
        return next((s for s in self.spellings if s.startswith("--")), self.spellings[0])


def quiet(*spellings: str, takes: Takes = "value", negatable: bool = False, nargs: Nargs = "") -> Arg:
    """A flag that does not touch memory: read and passed over."""
    return Arg(spellings, takes=takes, negatable=negatable, nargs=nargs)


def unmodelled(*spellings: str, why: str, takes: Takes = "value", negatable: bool = False, nargs: Nargs = "",
               default: tuple[str, ...] = ()) -> Arg:  # fmt: skip
    """A flag that changes memory in a way kvcalc does not model: named in a warning (unless given
    one of its ``default`` values)."""
    return Arg(spellings, takes=takes, memory=why, negatable=negatable, nargs=nargs, default=default)


def knob_args(options: type[EngineOptions], parse_int: Callable[[str], int] = plain_int) -> tuple[Arg, ...]:
    """The flags an engine's knobs are in its own spelling (``Knob.engine_flag``: "-ub,
    --ubatch-size"; a trailing parenthesis says which program has it and is no spelling)."""
    return tuple(knob_arg(k, parse_int) for k in options.knobs())


def knob_arg(knob: Knob, parse_int: Callable[[str], int] = plain_int) -> Arg:
    spellings = tuple(s.strip() for s in knob.engine_flag.partition(" (")[0].split(",") if s.strip())
    if knob.is_flag:
        return Arg(spellings, knob.name, takes="flag")
    return Arg(spellings, knob.name, parse=parse_int)


@dataclass(frozen=True)
class EngineCommand:
    """What an engine's command line says, in kvcalc's terms: the engine (``NAME[@VERSION]``), the
    program as written, the settings (by API parameter name, ``model`` too), the memory flags kvcalc
    does not model (warnings) and the readings it made (notes). ``soft``: the settings that are the
    reader's default rather than the line's word (vLLM's -dp N read as --batch N): the user's own
    kvcalc flag for one wins over it instead of conflicting."""

    engine: str
    program: str
    settings: Settings
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    soft: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WrittenCommand:
    """A command line written for fit's answer: its words, and what it could not say (notes)."""

    argv: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


@dataclass
class Reading:
    """A command line being read: the flags' values by key, in order, with the warnings and notes
    the reading gathers. An engine's ``CommandLine.interpret`` turns ``values`` into settings."""

    program: str
    values: dict[str, SettingValue] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    soft: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class YamlConfig:
    """A ``--config FILE`` whose YAML mapping the program splices into its words, read through the
    caller's ``read_text``: each key a flag (true: the switch, false: its --no- form where it has
    one, a list: its items, a mapping: its JSON, else the value's text). ``first``: the file's flags
    go before every word (SGLang's ConfigArgumentMerger), else after a positional model (vLLM's
    FlexibleArgumentParser); the line's own flags come later either way, and win. The messages are
    the engine's own (formatted with program, path, extension, error, key); ``no_model`` (when set)
    refuses a line and file that name no model; ``negatable`` (when set) refuses a key whose flag is
    a BooleanOptionalAction; ``bool_text``: a true/false for a flag that takes a value is written as
    its text, not as the bare flag; ``note``: a note says the words the file was read as."""

    many: str
    missing: str
    extension: str
    not_yaml: str
    no_mapping: str
    no_model: str = ""
    negatable: str = ""
    bool_text: bool = False
    first: bool = True
    empty_is_mapping: bool = False
    ignore_case: bool = False
    note: bool = False


class CommandLine:
    """One program's command line (``vllm serve``): the words that start it, its flags (knobs' flags
    first, from the engine's options), the environment variables it reads, the source the table
    was read from, and the engine it runs. How its words are read is declared: ``parser``
    ("argparse": abbreviations, nargs, "-" as a value), ``underscores`` (``--max_model_len`` is
    ``--max-model-len``: vLLM's FlexibleArgumentParser), ``config`` (a YAML ``--config`` file),
    ``positional_wins`` (a positional model over ``--model``), ``flag_value`` (a switch's
    ``--flag=VALUE``, as Go's pflag reads it), the environment's ``env_text`` (each value as the
    engine cleans it; an empty one is unset) and ``env_elsewhere`` (the variables another program
    reads: a client given a server's variable). Subclasses override ``interpret`` (the values ->
    kvcalc settings, where the engine's terms are not kvcalc's: llama.cpp's -c is every slot's
    tokens) and ``express`` (the reverse, for a written line), and the hooks ``rewrite`` (the words
    before they are parsed) and ``after_words`` (a file the words name, read once they are
    parsed)."""

    def __init__(self, *, engine: str, programs: tuple[tuple[str, ...], ...], args: tuple[Arg, ...], source: str,
                 env: tuple[Arg, ...] = (), env_prefix: str = "", positional: str | None = None,
                 writes: tuple[str, ...] | None = None, parser: Parser = "plain", underscores: bool = False,
                 config: YamlConfig | None = None, positional_wins: bool = False,
                 flag_value: Callable[[str, str], bool] | None = None, env_text: Callable[[str], str] | None = None,
                 env_elsewhere: tuple[str, frozenset[str]] | None = None) -> None:  # fmt: skip
        self.engine, self.programs, self.args, self.source = engine, programs, args, source
        self.env, self.env_prefix, self.positional = env, env_prefix, positional
        self.parser, self.underscores, self.config, self.positional_wins = parser, underscores, config, positional_wins
        # env_text: each variable's value as the engine cleans it; an empty result is an unset one.
        self.flag_value, self.env_text = flag_value, env_text
        # (the program that reads them, their names): said as not read when given to this one.
        self.env_elsewhere = env_elsewhere
        # The engines whose fit answer this program's line is written for (default: its own).
        self.writes = writes if writes is not None else (engine.partition("@")[0],)
        self._by_spelling = {s: a for a in args for s in a.spellings}
        for arg in args:
            if arg.negatable:
                for s in arg.spellings:
                    if s.startswith("--"):
                        self._by_spelling.setdefault("--no-" + s[2:], arg)
        # The long spellings argparse abbreviates (negations too), sorted as its error lists them.
        self._longs = sorted(s for s, a in self._by_spelling.items() if s.startswith("--") and not a.exact)
        self._env = {s: a for a in env for s in a.spellings}

    def __repr__(self) -> str:
        return f"CommandLine({self.engine!r}, {' '.join(self.programs[0])!r})"

    @property
    def program(self) -> str:
        return " ".join(self.programs[0])

    def matches(self, words: Sequence[str]) -> int:
        """How many of these words name this program (0: not it). ``python3.12 -m X`` matches
        ``python -m X``; a path's directory is ignored (``/opt/bin/llama-server``)."""
        for program in self.programs:
            if len(words) >= len(program) and all(_same_word(w, p) for w, p in zip(words, program, strict=False)):
                return len(program)
        return 0

    def arg(self, spelling: str) -> Arg | None:
        return self._by_spelling.get(spelling)

    def spelt(self, spelling: str) -> str | None:
        """The spelling a word's flag stands for: itself, or (argparse) the one long spelling it is a
        prefix of; an ambiguous prefix is argparse's error; None: no flag of this program."""
        if spelling in self._by_spelling:
            return spelling
        if self.parser != "argparse" or not spelling.startswith("--") or len(spelling) <= 2:
            return None
        matches = [s for s in self._longs if s.startswith(spelling)]
        if len(matches) > 1:
            raise UsageError(f"{self.program}: error: ambiguous option: {spelling} could match {', '.join(matches)}")
        return matches[0] if matches else None

    def read(self, words: Sequence[str], env: Mapping[str, str], read_text: ReadText) -> EngineCommand:
        """The settings this program's words (after the program's own) stand for."""
        reading = Reading(self.program, env=self._cleaned(env))
        words = list(words)
        if self.config is not None and "--config" in words:
            words = self._with_config(words, read_text, reading)
        self._read_env(reading)
        self._read_words(self._normalized(words), reading, read_text)
        if self.env_elsewhere is not None:
            where, names = self.env_elsewhere
            reading.warnings += [f"{name}: {self.program} passes it to no server ({where} reads it when it starts); "
                                 "not read" for name in env if name in names]  # fmt: skip
        self.after_words(reading, read_text)
        settings = self.interpret(reading)
        return EngineCommand(self.engine, self.program, settings, tuple(reading.warnings), tuple(reading.notes),
                             frozenset(reading.soft))  # fmt: skip

    def _cleaned(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment this program reads: none where another program reads it (``env_elsewhere``);
        with ``env_text``, each value as the engine cleans it, and one cleaned to nothing unset."""
        if self.env_elsewhere is not None:
            return {}
        if self.env_text is None:
            return dict(env)
        cleaned = {name: self.env_text(text) for name, text in env.items()}
        return {name: text for name, text in cleaned.items() if text}

    def rewrite(self, words: list[str]) -> list[str]:
        """The words as the engine's own code hands them to its parser (vLLM's ``-O3``): as given."""
        return words

    def after_words(self, reading: Reading, read_text: ReadText) -> None:
        """Once the words are read: a file they name (or the one the program reads by default) read
        into ``reading``; by default none."""

    def _normalized(self, words: list[str]) -> list[str]:
        """The words with the declared rules applied: underscores in a long flag's name are dashes,
        the engine's ``rewrite``, then argparse's reading (``_argparse_words``)."""
        if self.underscores:
            words = [_dashed(w) if w.startswith("--") else w for w in words]
        words = self.rewrite(words)
        return self._argparse_words(words) if self.parser == "argparse" else words

    def _argparse_words(self, words: list[str]) -> list[str]:
        """argparse's reading, one word a flag: an abbreviation as its flag, an nargs flag's words
        (up to the next flag; "-" and negative numbers are words) joined into ``--flag=a b``, a
        value "-" attached (``--prompt -`` reads stdin)."""
        out: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            spelling, equals, attached = word.partition("=")
            found = self.spelt(spelling) if word.startswith("-") and word != "--" else None
            arg = self.arg(found) if found is not None else None
            if found is None or arg is None or arg.takes == "flag" or equals:
                out.append((found or spelling) + equals + attached)
                continue
            if arg.nargs:
                values: list[str] = []
                while index < len(words) and _is_value(words[index]):
                    values.append(words[index])
                    index += 1
                if not values and arg.nargs == "+":
                    raise UsageError(f"{self.program}: error: argument {found}: expected at least one argument")
                out.append(f"{found}={' '.join(values)}")
            elif index < len(words) and words[index] == "-":
                out.append(f"{found}=-")
                index += 1
            else:
                out.append(found)
        return out

    def _with_config(self, words: list[str], read_text: ReadText, reading: Reading) -> list[str]:
        """``--config FILE`` (two words) spliced in as the program's ``config`` declares."""
        import json

        import yaml

        config = self.config
        assert config is not None
        say = {"program": self.program}
        if words.count("--config") > 1:
            raise UsageError(config.many.format(**say))
        index = words.index("--config")
        if index == len(words) - 1:
            raise UsageError(config.missing.format(**say))
        path = say["path"] = words[index + 1]
        say["extension"] = path.split(".")[-1]
        if (say["extension"].lower() if config.ignore_case else say["extension"]) not in ("yaml", "yml") or (
            config.ignore_case and "." not in path
        ):
            raise UsageError(config.extension.format(**say))
        try:
            data = yaml.safe_load(read_text(path))
        except yaml.YAMLError as exc:
            raise UsageError(config.not_yaml.format(**say, error=str(exc).splitlines()[0])) from None
        if data is None and config.empty_is_mapping:
            data = {}
        if not isinstance(data, dict):
            raise UsageError(config.no_mapping.format(**say))
        found: list[str] = []
        for key, value in data.items():
            flag = f"--{key}"
            arg = self.arg(_dashed(flag) if self.underscores else flag)
            if config.negatable and arg is not None and arg.negatable:
                raise UsageError(config.negatable.format(**say, key=str(key).replace("-", "_")))
            switch = arg is not None and arg.takes == "flag"
            if isinstance(value, bool) and (switch or not config.bool_text):
                negation = f"--no-{key}"
                found += [flag] if value else [negation] if self.arg(_dashed(negation)) is not None else []
            elif isinstance(value, bool):
                found += [flag, str(value).lower()]
            elif isinstance(value, list):
                found += [flag, *(str(item) for item in value)] if value else []
            elif isinstance(value, dict):
                found += [flag, json.dumps(value)]
            else:
                found += [flag, str(value)]
        if config.note:
            reading.notes.append(f"read {path} (--config) as: {' '.join(found)}")
        rest = words[:index] + words[index + 2 :]
        if config.first:
            return [*found, *rest]
        if rest and not rest[0].startswith("-") and self.positional == "model":
            return [rest[0], *found, *rest[1:]]
        if config.no_model and self.positional == "model" and "--model" not in found and "--model" not in rest:
            raise UsageError(config.no_model.format(**say))
        return [*found, *rest]

    def _read_env(self, reading: Reading) -> None:
        for name, text in reading.env.items():
            arg = self._env.get(name)
            if arg is None:
                if self.env_prefix and name.startswith(self.env_prefix):
                    reading.warnings.append(f"{name} is no {self.program} variable kvcalc knows ({self.source}): "
                                            "not read")  # fmt: skip
                continue
            self._take(arg, name, text, reading)

    def _read_words(self, words: list[str], reading: Reading, read_text: ReadText) -> None:
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if word == "--" or not word.startswith("-") or _is_number(word):
                reading.positionals.append(word)
                continue
            spelling, equals, attached = word.partition("=")
            arg = self.arg(spelling)
            if arg is None:
                raise UsageError(f"{self.program}: error: unrecognized arguments: {spelling} (its flags as read from "
                                 f"{self.source})")  # fmt: skip
            negated = arg.negatable and spelling.startswith("--no-") and spelling not in arg.spellings
            if arg.takes == "flag" and equals and self.flag_value is not None:
                if self.flag_value(spelling, attached):
                    self._take(arg, spelling, None, reading)
                elif arg.key is not None:
                    reading.values[arg.key] = False
                continue
            if arg.takes == "flag" or negated:
                if equals:
                    raise UsageError(f"{self.program}: error: argument {spelling}: ignored explicit argument "
                                     f"{attached!r}")  # fmt: skip
                self._take(arg, spelling, None if not negated else "", reading, negated=negated)
                continue
            if equals:
                text: str | None = attached
            elif index < len(words) and (not words[index].startswith("-") or _is_number(words[index])):
                text = words[index]
                index += 1
            elif arg.takes == "optional":
                text = None
            else:
                raise UsageError(f"{self.program}: error: argument {spelling}: expected one argument")
            self._take(arg, spelling, text, reading)
            if arg.key == "config" and text is not None:
                self.read_config(text, reading, read_text)
        self.positional_settings(reading)

    def _take(self, arg: Arg, spelling: str, text: str | None, reading: Reading, *, negated: bool = False) -> None:
        unchanged = text is not None and text.strip() in arg.default
        if arg.memory and not unchanged:
            shown = spelling if text is None else f"{spelling} {text}"
            reading.warnings.append(f"{self.program} {shown}: {arg.memory}; kvcalc does not model it")
        if arg.key is None:
            return
        if negated:
            reading.values[arg.key] = False
            return
        if text is None:
            reading.values[arg.key] = arg.constant
            return
        try:
            reading.values[arg.key] = arg.parse(text)
        except (ValueError, UsageError) as exc:
            detail = f": {exc}" if isinstance(exc, UsageError) else ""
            raise UsageError(f"{self.program}: error: argument {spelling}: invalid value {text!r}{detail}") from None

    def positional_settings(self, reading: Reading) -> None:
        """The positional words: the model where the program takes it so (``vllm serve MODEL``;
        ``positional_wins``: over ``--model``); any other is an error, as argparse says it."""
        words = [w for w in reading.positionals if w != "--"]
        if self.positional is not None and words:
            if self.positional_wins:
                reading.values[self.positional] = words.pop(0)
            else:
                reading.values.setdefault(self.positional, words.pop(0))
        if words:
            raise UsageError(f"{self.program}: error: unrecognized arguments: {' '.join(words)}")

    def read_config(self, path: str, reading: Reading, read_text: ReadText) -> None:
        """A config file the line names as ``--config=FILE`` (the two-word form is ``config``'s):
        this program reads none."""
        raise UsageError(f"{self.program}: error: kvcalc cannot read its --config files")

    def interpret(self, reading: Reading) -> Settings:
        """The settings the values stand for: by default each value's key is the setting's name
        (``config`` aside) and the engine is this reader's."""
        settings: Settings = {k: v for k, v in reading.values.items() if k != "config"}
        settings.setdefault("engine", self.engine)
        return settings

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as values by key (for ``write``), and notes for what this engine's line
        cannot say. By default each setting the table has a flag for is written as it is."""
        keys = {a.key for a in self.args if a.key is not None}
        keys.update(a.key for a in self.env if a.key is not None)
        keys.add(self.positional or "")
        values = {k: v for k, v in settings.items() if k in keys}
        return values, []

    def write(self, settings: Mapping[str, SettingValue]) -> WrittenCommand:
        """The line that runs this engine with these settings (fit's answer): the program, the
        environment variables first (``NAME=VALUE``), then each flag under its written spelling."""
        values, notes = self.express(settings)
        env_words: list[str] = []
        flag_words: list[str] = []
        positional: list[str] = []
        if self.positional is not None and self.positional in values:
            positional.append(str(values.pop(self.positional)))
        for arg in self.env:
            if arg.key in values:
                env_words.append(f"{arg.spellings[0]}={_written(values.pop(arg.key))}")
        order = {k: i for i, k in enumerate(WRITTEN_ORDER)}
        for key in sorted(values, key=lambda k: order.get(k, len(order))):
            found = next((a for a in self.args if a.key == key), None)
            if found is None:
                continue
            arg, value = found, values[key]
            if arg.takes == "flag" or isinstance(value, bool):
                if value is True or (value == arg.constant and arg.takes == "flag"):
                    flag_words.append(arg.name)
                elif value is False and arg.negatable:
                    flag_words.append("--no-" + arg.name[2:])
                continue
            flag_words += [arg.name, _written(value)]
        return WrittenCommand((*env_words, *self.programs[0], *positional, *flag_words), tuple(notes))


def _written(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}" if float(f"{value:g}") == value else repr(value)
    return str(value)


def _dashed(word: str) -> str:
    """A long flag's name with its underscores as dashes (before any '=' value or '.' key)."""
    name, equals, value = word.partition("=")
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail + equals + value


def _is_value(word: str) -> bool:
    """A word argparse takes as a value, not a flag: no leading dash, "-" alone, or a number."""
    return not word.startswith("-") or word == "-" or _is_number(word)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _same_word(word: str, expected: str) -> bool:
    word = os.path.basename(word) if expected and "/" not in expected else word
    if expected == "python":
        head, _, rest = word.partition("python")
        return head == "" and (rest == "" or all(c.isdigit() or c == "." for c in rest))
    return word == expected


def readers() -> tuple[CommandLine, ...]:
    """Every engine's command-line readers, in the registry's order (each package's
    ``commandline.READERS``; an engine with none has no module)."""
    from kvcalc.engines import REGISTRY

    found: list[CommandLine] = []
    seen: set[str] = set()
    for plugin in REGISTRY.values():
        # The package beside the rules module (kvcalc.engines.vllm.rules -> kvcalc.engines.vllm); an
        # engine in one module (theoretical) or registered from elsewhere without a package has none.
        package, dot, leaf = plugin.rules.partition(":")[0].rpartition(".")
        if leaf != "rules" or not dot or package in seen:
            continue
        seen.add(package)
        name = f"{package}.commandline"
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        found.extend(module.READERS)
    return tuple(found)


def split_environment(words: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The ``NAME=VALUE`` words before the program (a shell's environment prefix, ``env`` too), and
    the rest."""
    env: dict[str, str] = {}
    index = 0
    if words and words[0] == "env":
        index = 1
    while index < len(words):
        name, equals, value = words[index].partition("=")
        if not equals or not name.replace("_", "").isalnum() or name[0].isdigit():
            break
        env[name] = value
        index += 1
    return env, list(words[index:])


def read_command(words: Sequence[str], read_text: ReadText, engine: str | None = None) -> EngineCommand:
    """What an engine's command line (its words, as a shell splits them; one string is split as a
    shell would) stands for, found by the program it starts. ``engine``: the engine the user named
    beside the line (``--engine lmstudio-mlx -- lms load ...``), which picks among the readers of
    the same program the one for that engine (LM Studio's MLX runtime); by default the first. An
    unknown program is a one-line UsageError naming those kvcalc reads."""
    if len(words) == 1 and " " in words[0].strip():
        words = shlex.split(words[0])
    env, rest = split_environment(words)
    if not rest:
        raise UsageError("the engine command line after '--' names no program (vllm serve MODEL, llama-server ...)")
    every = readers()
    found = [(r, used) for r in every if (used := r.matches(rest))]
    if found:
        wanted = _engine_name(engine) if engine else None
        reader, used = next(((r, u) for r, u in found if wanted in (r.engine.partition("@")[0], *r.writes)), found[0])
        return reader.read(rest[used:], env, read_text)
    known = ", ".join(dict.fromkeys(r.program for r in every))
    raise UsageError(f"kvcalc reads no {rest[0]!r} command line; it reads {known}")


def _engine_name(engine: str) -> str | None:
    from kvcalc.engines import engine_entry

    try:
        return engine_entry(engine).name
    except UsageError:
        return None  # refused where the engine flag is read


def writer(engine: str) -> CommandLine | None:
    """The program whose line fit writes for an engine (the first that ``writes`` it), or None."""
    from kvcalc.engines import engine_entry

    name = engine_entry(engine).name
    return next((r for r in readers() if name in r.writes), None)
