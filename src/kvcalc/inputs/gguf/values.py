"""Reading one GGUF's ``<arch>.*`` values: the keys as the mappings see them, and the checks every
count goes through (one SourceError line naming the key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcalc.engines.llamacpp.architectures import Architecture
from kvcalc.errors import SourceError


@dataclass(frozen=True)
class ArchKeys:
    """A GGUF's keys under ``<arch>.`` (``record.name``), as an architecture's mapping reads them:
    ``blocks`` is block_count, ``layers`` the trunk (block_count less the NextN layers), and a
    per-layer array that lists the NextN layers too, after the trunk, is cut to the trunk."""

    meta: dict[str, Any]
    record: Architecture
    label: str
    blocks: int
    layers: int

    @property
    def arch(self) -> str:
        return self.record.name

    def get(self, key: str) -> Any:
        """The value of ``<arch>.key``, or None where the file has none."""
        value = self.meta.get(f"{self.arch}.{key}")
        if self.layers != self.blocks and isinstance(value, list) and len(value) == self.blocks:
            return value[: self.layers]
        return value

    def need(self, key: str) -> Any:
        """The value of ``<arch>.key``; a SourceError where the file has none."""
        value = self.get(key)
        if value is None:
            raise SourceError(f"{self.label}: GGUF has no {self.arch}.{key}")
        return value

    def count(self, key: str) -> int:
        """The value of ``<arch>.key``, which must be a positive integer."""
        return count(self.need(key), f"{self.arch}.{key}", self.label)

    def state(self) -> dict[str, int]:
        """The recurrent state's keys (Architecture.ssm), each a positive integer."""
        assert self.record.ssm is not None, self.arch
        return {key: self.count(key) for key in self.record.ssm.keys}


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def count(value: Any, key: str, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SourceError(f"{label}: GGUF key {key} is {short(value)}; expected a positive integer")
    return value


def uniform(value: Any, key: str, layers: int, label: str) -> int:
    """A scalar, or a per-layer array whose items are all the same."""
    if isinstance(value, list):
        if len(value) != layers or len(set(value)) != 1:
            raise SourceError(f"{label}: GGUF key {key} differs by layer ({short(value)}); kvcalc cannot read it")
        value = value[0]
    return count(value, key, label)


def ratio(value: int, by: int, key: str, other: str, label: str) -> int:
    if value % by:
        raise SourceError(f"{label}: GGUF key {key} ({value}) is no multiple of {other} ({by}); kvcalc cannot read it")
    return value // by


def given_or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the key is absent (llama.cpp's optional get_key)."""
    return default if value is None else value


def per_layer(value: Any, key: str, layers: int, label: str, *, zero: bool = False) -> list[int]:
    """A scalar or a per-layer array of counts as one count per layer (0 allowed with ``zero``)."""
    items = value if isinstance(value, list) else [value] * layers
    if len(items) != layers:
        raise SourceError(f"{label}: GGUF key {key} lists {len(items)} layers but the model has {layers}")
    return [0 if zero and v == 0 and not isinstance(v, bool) else count(v, key, label) for v in items]
