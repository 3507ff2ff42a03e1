"""One exception hierarchy: the CLI turns each into a one-line message and a non-zero exit."""

from __future__ import annotations


class KvcalcError(Exception):
    """Base of every error kvcalc reports to a user; the message is a complete sentence.

    ``param`` names the API parameter(s) the message speaks of (``tokens``, ``kv_dtype``,
    ``lengths``); the CLI shows the first mention of each as its flag (``--tokens``), so the core
    never has to know the command line.
    """

    exit_code = 1

    def __init__(self, message: str, *, param: str | tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.params: tuple[str, ...] = (param,) if isinstance(param, str) else (param or ())


class UsageError(KvcalcError):
    """A parameter value that cannot be used (bad number, unknown dtype, ...)."""

    exit_code = 2


class ConfigError(KvcalcError):
    """A model config that is missing a field, holds an absurd value, or has no readable geometry."""


class SourceError(KvcalcError):
    """A file or model kvcalc was pointed at could not be read: MODEL (no such file, unknown
    preset, unreadable JSON, Hub failure), a --lengths or --from-result file, or an output file
    (--plot) that cannot be written. Exit status 1, as the README's table says."""


class DependencyError(KvcalcError):
    """An environment problem, not a bad request: an optional package a command needs is not
    installed (matplotlib for --plot, torch and transformers for the probe, llama-cpp-python), or an
    engine's own Python (--engine-python) fails to start or to import its engine. Exit status 1, as
    the README's table says: the same command works once the environment is set up."""


class PresetError(KvcalcError):
    """A bundled preset file that does not match the preset schema."""


class StrictError(KvcalcError):
    """``strict`` was asked for and the config holds fields kvcalc does not model (kvcalc.inputs.hf.guard)."""

    exit_code = 3
