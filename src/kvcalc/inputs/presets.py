"""Bundled model presets: YAML files validated against a typed schema when loaded.

The ``model_presets`` folder ships inside the wheel as ``kvcalc/model_presets``; in a source
checkout it is the repository's top-level ``model_presets/``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kvcalc.errors import PresetError, SourceError

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._\-]*$")
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class PresetWeights:
    """The checkpoint's weights as stored: exact bytes of every tensor (the safetensors index's
    ``metadata.total_size``, or a per-tensor count from the real config), with where that came from.

    ``unloaded_bytes`` are checkpoint tensors a serving engine does not load by default (an MTP /
    next-token module), so ``loaded_bytes`` is what lands on the GPUs."""

    bytes: int
    parameters: int
    format: str
    source: str
    unloaded_bytes: int = 0
    note: str | None = None

    @property
    def loaded_bytes(self) -> int:
        return self.bytes - self.unloaded_bytes


@dataclass(frozen=True)
class Preset:
    """One bundled model: its names, where its config came from, the config itself, and its
    checkpoint's weights."""

    name: str
    aliases: tuple[str, ...]
    family: str
    hf_repo: str
    source: str
    config: dict[str, Any]
    weights: PresetWeights | None = None

    @property
    def parameters(self) -> int | None:
        return self.weights.parameters if self.weights is not None else None


_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True),
    "aliases": (list, False),
    "family": (str, True),
    "hf_repo": (str, True),
    "source": (str, True),
    "config": (dict, True),
    "weights": (dict, False),
}

_WEIGHT_FIELDS: dict[str, tuple[type, bool]] = {
    "bytes": (int, True),
    "parameters": (int, True),
    "format": (str, True),
    "source": (str, True),
    "unloaded_bytes": (int, False),
    "note": (str, False),
}


def presets_dir() -> Path:
    """The folder holding the preset files, in an installed wheel or a source checkout.

    A wheel installs them as ``kvcalc/model_presets`` in the package; an editable install or
    a checkout finds the repository's top-level ``model_presets/``. (Plain paths rather than
    importlib.resources: it costs ~2 ms of start-up and kvcalc is never imported from a zip.)
    """
    package = Path(__file__).resolve().parents[1]  # kvcalc/, this module being kvcalc/inputs/presets.py
    for folder in (package / "model_presets", package.parents[1] / "model_presets"):
        if folder.is_dir():
            return folder
    raise PresetError("the bundled model_presets folder is missing from this installation")


def _check_fields(data: dict[str, Any], fields: dict[str, tuple[type, bool]], filename: str, prefix: str = "") -> None:
    """No unknown field, every required one present, each of its type; errors name the field."""
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise PresetError(f"preset {filename}: unknown field {prefix + unknown[0]!r}")
    for key, (kind, required) in fields.items():
        if key not in data:
            if required:
                raise PresetError(f"preset {filename}: missing field {prefix + key!r}")
            continue
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise PresetError(f"preset {filename}: field {prefix + key!r} must be a {kind.__name__}")


def parse_preset(data: Any, *, filename: str) -> Preset:
    """Validate one preset document against the schema; errors name the file and the field."""
    if not isinstance(data, dict):
        raise PresetError(f"preset {filename}: expected a mapping at the top level")
    _check_fields(data, _FIELDS, filename)
    name = data["name"]
    if not _NAME_RE.match(name) or f"{name}.yaml" != filename:
        raise PresetError(f"preset {filename}: name {name!r} must be lower-case and match the file")
    aliases = data.get("aliases", [])
    if not all(isinstance(a, str) and _NAME_RE.match(a) for a in aliases):
        raise PresetError(f"preset {filename}: aliases must be lower-case names")
    if not _REPO_RE.match(data["hf_repo"]):
        raise PresetError(f"preset {filename}: hf_repo {data['hf_repo']!r} is not an org/name id")
    if not isinstance(data["config"].get("model_type"), str):
        raise PresetError(f"preset {filename}: config needs a model_type")
    return Preset(
        name=name,
        aliases=tuple(aliases),
        family=data["family"],
        hf_repo=data["hf_repo"],
        source=data["source"],
        config=data["config"],
        weights=_parse_weights(data.get("weights"), filename),
    )


def _parse_weights(data: dict[str, Any] | None, filename: str) -> PresetWeights | None:
    if data is None:
        return None
    _check_fields(data, _WEIGHT_FIELDS, filename, prefix="weights.")
    for key in ("bytes", "parameters"):
        if data[key] <= 0:
            raise PresetError(f"preset {filename}: weights.{key} must be positive")
    unloaded = data.get("unloaded_bytes", 0)
    if not 0 <= unloaded < data["bytes"]:
        raise PresetError(f"preset {filename}: weights.unloaded_bytes must be at least 0 and below weights.bytes")
    return PresetWeights(
        bytes=data["bytes"], parameters=data["parameters"], format=data["format"], source=data["source"],
        unloaded_bytes=unloaded, note=data.get("note"),
    )  # fmt: skip


def _parse_yaml(path: Path) -> Any:
    import yaml

    # The C loader is ~10x faster than the pure-Python one; both are safe loaders.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # safe loader
    except yaml.YAMLError as exc:
        raise PresetError(f"preset {path.name}: invalid YAML ({exc.__class__.__name__})") from None


@cache
def _packed() -> dict[str, Any] | None:
    """File name -> parsed document of every preset, from the wheel's ``presets.json``; None in a
    checkout, which has only the YAML files. (Read once, as ``load_presets`` is.)"""
    packed = presets_dir() / "presets.json"
    if not packed.is_file():
        return None
    # Installed wheels carry the YAML pre-parsed (hatch_build.py): same data, no PyYAML import.
    import json

    index: dict[str, Any] = json.loads(packed.read_text(encoding="utf-8"))
    return index


def _documents() -> list[tuple[str, Any]]:
    """(file name, parsed document) for every preset file, in name order."""
    packed = _packed()
    if packed is not None:
        return sorted(packed.items())
    return [(path.name, _parse_yaml(path)) for path in sorted(presets_dir().glob("*.yaml"))]


@cache
def load_presets() -> dict[str, Preset]:
    """Every bundled preset by name, validated; a name or alias used twice is an error."""
    presets: dict[str, Preset] = {}
    taken: dict[str, str] = {}
    for filename, data in _documents():
        preset = parse_preset(data, filename=filename)
        for label in (preset.name, *preset.aliases):
            if label in taken:
                raise PresetError(f"preset {filename}: name {label!r} is also used by {taken[label]}")
            taken[label] = filename
        presets[preset.name] = preset
    return presets


def _index() -> dict[str, Preset]:
    presets = load_presets()
    index = {p.name: p for p in presets.values()}
    index.update({alias: p for p in presets.values() for alias in p.aliases})
    return index


def find_preset(name: str) -> Preset | None:
    """The preset a name or alias stands for (case-insensitive), or None."""
    key = name.strip().lower()
    if _NAME_RE.match(key):
        # A preset's own name is its file name: validate that one document instead of every
        # preset (the wheel's pre-parsed one, or in a checkout the one YAML file). Aliases and
        # near-misses fall through to the full index.
        filename = f"{key}.yaml"
        packed = _packed()
        if packed is not None:
            if filename in packed:
                return parse_preset(packed[filename], filename=filename)
        else:
            path = presets_dir() / filename
            if path.is_file():
                return parse_preset(_parse_yaml(path), filename=path.name)
    return _index().get(key)


def get_preset(name: str) -> Preset:
    """The preset a name stands for; an unknown name lists the closest matches."""
    found = find_preset(name)
    if found is not None:
        return found
    index = _index()
    close = difflib.get_close_matches(name.strip().lower(), list(index), n=len(index), cutoff=0.5)
    # One name per preset (its own), however many of its aliases are close.
    names = list(dict.fromkeys(index[label].name for label in close))[:3]
    hint = f"; did you mean {', '.join(names)}?" if names else "; 'kvcalc presets' lists them"
    raise SourceError(f"unknown preset {name!r}{hint}")
