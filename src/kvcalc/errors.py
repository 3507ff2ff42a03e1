"""One exception hierarchy: the CLI turns each into a one-line message and a non-zero exit."""

from __future__ import annotations


class KvcalcError(Exception):
    """Base of every error kvcalc reports to a user; the message is a complete sentence."""

    exit_code = 1


class UsageError(KvcalcError):
    """A flag or argument value that cannot be used (bad number, unknown dtype, ...)."""

    exit_code = 2


class ConfigError(KvcalcError):
    """A model config that is missing a field, holds an absurd value, or has no readable geometry."""


class SourceError(KvcalcError):
    """MODEL could not be resolved: no such file, unknown preset, unreadable JSON, Hub failure."""


class PresetError(KvcalcError):
    """A bundled preset file that does not match the preset schema."""
