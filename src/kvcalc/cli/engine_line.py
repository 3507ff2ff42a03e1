"""An engine's own command line after ``--`` (``kvcalc fit --gpu h100 -- vllm serve MODEL -tp 2``):
read by the engine's reader (``kvcalc.api.read_engine_command``) and put back as kvcalc's own
flags, so the command answers exactly as it would for those flags. Only main() calls this, and
only when the arguments hold a ``--``: a plain command never imports it."""

from typing import TYPE_CHECKING, Any

from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.engines.commandline import EngineCommand, SettingValue

# The commands that take an engine's command line after "--".
READING_COMMANDS = ("estimate", "fit", "speed", "probe")

# The commands that refuse an engine knob that changes nothing for the model's cache (fit takes
# them: llama.cpp's -ub sizes its compute buffer too).
REFUSING_IDLE_KNOBS = ("estimate", "speed", "probe")

# The command that reads the line itself (``kvcalc check``: the server's settings win over it), and
# the line given to it, kept aside here for it.
SELF_READING = ("check",)
CHECK_LINE: list[str] = []

# The memory flags kvcalc does not model in the line read: stderr says them once, and the JSON
# answer lists them beside the config's own (cli.options.with_warnings).
LINE_WARNINGS: list[str] = []


def translate(argv: list[str], app: Any) -> list[str]:
    """The arguments with the engine command line after ``--`` replaced by the kvcalc flags it
    stands for. A flag given both before ``--`` and by the line is a one-line UsageError; a setting
    the command has no flag for (``--gpu-memory-utilization`` to estimate) changes nothing there and
    passes quietly."""
    end = argv.index("--")
    name = next((a for a in argv[:end] if not a.startswith("-")), None)
    if name in SELF_READING:
        CHECK_LINE[:] = argv[end + 1 :]
        if not CHECK_LINE:
            raise UsageError(f"'--' ends kvcalc {name}'s flags: give the engine's command line after it")
        return argv[:end]
    if name not in READING_COMMANDS:
        return argv
    words = argv[end + 1 :]
    if not words:
        raise UsageError(f"'--' ends kvcalc {name}'s flags: give the engine's command line after it "
                         "(vllm serve MODEL ..., llama-server -m FILE ...)")  # fmt: skip
    from kvcalc import api

    own = argv[:end]
    start = own.index(name) + 1
    engine, model = _given(_command(app, name), own[start:])
    command = api.read_engine_command(words, engine, model)
    if name in REFUSING_IDLE_KNOBS:
        command = _without_idle_knobs(_command(app, name), own[start:], command)
    flags = _flags(_command(app, name), own[start:], command)
    LINE_WARNINGS.extend(command.warnings)
    _say(name, command, [*own[start:], *flags], quiet="--json" in own)
    return [*own, *flags]


def _command(app: Any, name: str) -> Any:
    """The app's click command of that name (typer vendors its own click: its objects are used by
    shape)."""
    import typer.main

    group: Any = typer.main.get_command(app)
    return group.get_command(group.context_class(group), name)


def _given(command: Any, own: list[str]) -> tuple[str | None, str | None]:
    """The --engine and MODEL given before '--', if any: the engine picks the reader of a program
    several engines share (``--engine lmstudio-mlx -- lms load ...``) and refines the release; the
    model gives the context a line leaves to it."""
    context = command.make_context(command.name, list(own), resilient_parsing=True)
    found: list[str | None] = []
    for key in ("engine", "model"):
        source = context.get_parameter_source(key)
        given = source is not None and source.name == "COMMANDLINE" and context.params.get(key) is not None
        found.append(str(context.params[key]) if given else None)
    return found[0], found[1]


def _without_idle_knobs(command: Any, own: list[str], line: "EngineCommand") -> "EngineCommand":
    """The line less the engine knobs that change nothing for this model's cache (llama.cpp's -ub
    for a model with no sliding layer), each said in a note: kvcalc refuses such a flag of its own,
    but an engine line that sets one is a real line, and the engine takes it."""
    from dataclasses import replace

    from kvcalc import api
    from kvcalc.engines import every_knob

    knobs = every_knob()
    given: dict[str, int | bool] = {k: v for k, v in line.settings.items()
                                    if k in knobs and isinstance(v, int) and v is not False}  # fmt: skip
    context = command.make_context(command.name, list(own), resilient_parsing=True)
    model = context.params.get("model") or line.settings.get("model")
    if not given or not model:
        return line
    engine = str(line.settings.get("engine", line.engine))
    source = context.get_parameter_source("engine")
    if source is not None and source.name == "COMMANDLINE":
        if not _same_engine(str(context.params["engine"]), engine):
            return line  # refused as a conflict later
        engine = str(context.params["engine"])
    idle = api.idle_knobs(str(model), engine, given)
    if not idle:
        return line
    notes = [f"the {line.program} line's {knobs[k].engine_flag.partition(' (')[0]} {given[k]} changes nothing "
             f"for {model}'s cache under {engine}: not passed on" for k in idle]  # fmt: skip
    kept = {k: v for k, v in line.settings.items() if k not in idle}
    return replace(line, settings=kept, notes=(*line.notes, *notes))


def _flags(command: Any, own: list[str], line: "EngineCommand") -> list[str]:
    """The line's settings as this command's flags, each checked against the user's own (a soft
    setting, the reader's default, gives way to it)."""
    context = command.make_context(command.name, list(own), resilient_parsing=True)
    params = {p.name: p for p in command.params if p.name}
    flags: list[str] = []
    model: list[str] = []
    for key, value in line.settings.items():
        param = params.get(key)
        if param is None:
            continue  # this command has no such flag: the setting does not change its answer
        source = context.get_parameter_source(key)
        given = source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
        if param.param_type_name == "argument":
            if given and str(context.params.get(key)) != str(value):
                raise UsageError(f"MODEL {context.params.get(key)} and the {line.program} line's model differ: "
                                 "give one")  # fmt: skip
            if not given:
                model.append(str(value))
            continue
        flag = max(param.opts, key=len)
        if given and key == "engine" and _same_engine(str(context.params.get(key)), str(value)):
            continue  # --engine vllm@0.19 -- vllm serve ...: the release (or platform) the line cannot say
        if given and key in line.soft:
            continue  # the reader's default (vLLM's -dp N read as --batch N): the user's own flag wins
        if given:
            raise UsageError(f"{flag} is given both before '--' and by the {line.program} line: give it once")
        flags += _spelt(param, flag, value)
    return [*flags, *model]


def _same_engine(mine: str, line: str) -> bool:
    from kvcalc.engines import engine_entry

    return engine_entry(mine).name == engine_entry(line).name


def _spelt(param: Any, flag: str, value: "SettingValue") -> list[str]:
    """One setting as this command's flag: a switch alone when on (off: nothing, its default), a
    byte size with its unit, every other value as digits."""
    if isinstance(value, bool) or getattr(param, "is_flag", False):
        return [flag] if value else []
    if param.name == "kv_budget" and isinstance(value, int):
        return [flag, f"{value}B"]
    if isinstance(value, float):
        return [flag, repr(value)]
    return [flag, str(value)]


def _say(name: str, line: "EngineCommand", flags: list[str], *, quiet: bool) -> None:
    """On stderr: every warning (one line each, as kvcalc's warnings are), then how the line was
    read (not under --json), wrapped to the screen's width as notes are."""
    from kvcalc.console import clean, err

    for warning in dict.fromkeys(line.warnings):
        err(f"kvcalc: warning: {clean(warning)}")
    if quiet:
        return
    import textwrap

    from kvcalc.views.console import screen

    width = screen().width
    said = [f"kvcalc: note: {note}" for note in line.notes]
    said.append(f"kvcalc: read the {line.program} line as: kvcalc {name} {' '.join(flags)}")
    for text in said:
        for part in textwrap.wrap(clean(text), width=width, subsequent_indent=" " * 14, break_long_words=False,
                                  break_on_hyphens=False):  # fmt: skip
            err(part)
