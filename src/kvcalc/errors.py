"""One exception hierarchy: the CLI turns each into a one-line message and a non-zero exit."""

from __future__ import annotations


class KvcalcError(Exception):
    """Base of every error kvcalc reports to a user; the message is a complete sentence."""

    exit_code = 1


class UsageError(KvcalcError):
    """A parameter value that cannot be used (bad number, unknown dtype, ...).

    ``param`` names the API parameter(s) the message speaks of (``tokens``, ``kv_dtype``); the CLI
    shows the first mention of each as its flag (``--tokens``), so the core never has to know the
    command line.
    """

    exit_code = 2

    def __init__(self, message: str, *, param: str | tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.params: tuple[str, ...] = (param,) if isinstance(param, str) else (param or ())


class ConfigError(KvcalcError):
    """A model config that is missing a field, holds an absurd value, or has no readable geometry."""


class SourceError(KvcalcError):
    """MODEL could not be resolved: no such file, unknown preset, unreadable JSON, Hub failure."""


class PresetError(KvcalcError):
    """A bundled preset file that does not match the preset schema."""


class StrictError(KvcalcError):
    """``strict`` was asked for and the config holds fields kvcalc does not model (kvcalc.guard)."""

    exit_code = 3
