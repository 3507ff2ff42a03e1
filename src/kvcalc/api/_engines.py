"""The engines kvcalc models and their knobs, read from the engines' plugins (no engine's rules load)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.api._serving import KnobValue
    from kvcalc.engines.commandline import EngineCommand, SettingValue, WrittenCommand
    from kvcalc.engines.knobs import EnginePlugin


def list_engines() -> list[EnginePlugin]:
    """Every registered engine's plugin (name, aliases, releases, summary, knobs), in help's order."""
    from kvcalc.engines import REGISTRY

    return list(REGISTRY.values())


def show_engine(name: str) -> EnginePlugin:
    """One engine's plugin by name or alias (any case; an ``@VERSION`` is ignored); its knobs are
    ``plugin.options.knobs()``. An unknown name is a one-line UsageError naming the engines."""
    from kvcalc import checks
    from kvcalc.engines import engine_entry
    from kvcalc.errors import UsageError

    checks.instance(name, "name", str, "an engine's name (a str) such as 'vllm'")
    try:
        return engine_entry(name)
    except UsageError as exc:
        raise UsageError(str(exc), param="name") from None


def engine_command_lines(name: str) -> tuple[tuple[str, ...], str | None]:
    """The programs whose command lines kvcalc reads as this engine (after ``--``), and the one
    fit writes for it (None: none); an unknown name is a one-line UsageError."""
    from kvcalc.engines.commandline import readers, writer

    plugin = show_engine(name)
    reads = [r.program for r in readers() if plugin.name in (r.engine.partition("@")[0], *r.writes)]
    written = writer(plugin.name)
    return tuple(dict.fromkeys(reads)), None if written is None else written.program


def read_engine_command(words: Sequence[str], engine: str | None = None, model: str | None = None) -> EngineCommand:
    """What an engine's own command line stands for in kvcalc's terms (``vllm serve MODEL -tp 2
    ...``, ``OLLAMA_NUM_PARALLEL=4 ollama serve``; one string is split as a shell would): the engine,
    the settings by API parameter name (``model``, ``tokens``, ``tp``, ``kv_dtype``, knobs), the
    memory flags kvcalc does not model (warnings) and its readings (notes). A file the line names
    (vLLM's ``--config``, a Modelfile) is read here, bounded. A flag the engine does not have, or a
    program kvcalc does not read, is a one-line UsageError. ``engine``: the engine named beside the
    line, which picks among readers of the same program (``lms load`` as LM Studio's MLX runtime).
    ``model``: the model named beside the line; where the line leaves the context to the model
    (``vllm serve`` with no --max-model-len, ``llama-server -c 0``), its own context is read from
    it (or from the line's model), said in a note; a --tokens given beside the line wins."""
    from kvcalc.engines.commandline import read_command

    command = _model_as_preset(read_command(list(words), _read_text, engine))
    return _tokens_from_model(command, model)


def _tokens_from_model(command: EngineCommand, model: str | None) -> EngineCommand:
    """The line's context where it leaves it to the model: the model's own, over the slots."""
    from dataclasses import replace

    from kvcalc.api._models import open_model
    from kvcalc.engines.commandline import TOKENS_FROM_MODEL

    slots = command.settings.get(TOKENS_FROM_MODEL)
    if slots is None:
        return command
    settings = {k: v for k, v in command.settings.items() if k != TOKENS_FROM_MODEL}
    ref = model or settings.get("model")
    spec = open_model(str(ref)).spec if isinstance(ref, str) else None
    context = spec.max_context if spec is not None else None
    if spec is None or context is None or not isinstance(slots, int):
        note = f"{command.program}: the line leaves the context to the model, which names none: give --tokens"
        return replace(command, settings=settings, notes=(*command.notes, note))
    settings["tokens"] = max(1, context // slots)
    share = f", {settings['tokens']:,} a slot over {slots}" if slots > 1 else ""
    note = (f"{command.program}: no context given: the model's own, {context:,} tokens ({spec.max_context_key})"
            f"{share}, unless --tokens is given beside the line")  # fmt: skip
    return replace(command, settings=settings, notes=(*command.notes, note), soft=command.soft | {"tokens"})


def write_engine_command(engine: str, settings: Mapping[str, SettingValue]) -> WrittenCommand | None:
    """The engine's own command line for these settings (fit's answer: ``model``, ``tokens``,
    ``batch``, ``utilization``, ``kv_dtype``, layout, knobs), with notes for what its line cannot
    say; None for an engine kvcalc writes no line for (theoretical, transformers)."""
    from kvcalc.engines.commandline import writer

    found = writer(engine)
    return None if found is None else found.write(settings)


def idle_knobs(model: str, engine: str, options: Mapping[str, KnobValue]) -> tuple[str, ...]:
    """The knobs among ``options`` that change nothing for this model's cache under this engine
    (llama.cpp's ubatch for a model with no sliding layer), in their order."""
    from kvcalc.api._models import open_model
    from kvcalc.api._serving import Serving, resolve_serving

    spec = open_model(model).spec
    chosen = resolve_serving(spec, Serving(engine, options=dict(options)))
    idle = set(chosen.engine.idle_knobs(spec))
    return tuple(k for k in options if k in idle)


def _read_text(path: str) -> str:
    from pathlib import Path

    from kvcalc.errors import SourceError
    from kvcalc.inputs.files import CONFIG_LIMIT, read_regular_file

    data = read_regular_file(Path(path).expanduser(), what="the engine command line's file", limit=CONFIG_LIMIT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not UTF-8 text") from None


def _model_as_preset(command: EngineCommand) -> EngineCommand:
    """A Hub repo id one of kvcalc's presets was taken from reads as that preset (its config.json,
    offline), said in a note, unless a local path of that name exists."""
    from dataclasses import replace

    model = command.settings.get("model")
    preset = hub_preset(model) if isinstance(model, str) else None
    if preset is None:
        return command
    note = f"{model}: read as kvcalc's preset {preset} (that repository's config.json)"
    return replace(command, settings={**command.settings, "model": preset}, notes=(*command.notes, note))


def hub_preset(model: str) -> str | None:
    """The preset taken from the Hub repository ``model`` names (``org/name``), unless a local path
    of that name exists; None if none."""
    import os

    from kvcalc.inputs.presets import load_presets

    if os.path.exists(model) or model.count("/") != 1:
        return None
    return next((p.name for p in load_presets().values() if p.hf_repo.lower() == model.lower()), None)
