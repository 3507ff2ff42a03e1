"""The bundled presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.calc.estimate import Workload
from kvcalc.calc.estimate import estimate as estimate_spec
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from kvcalc.inputs.presets import Preset


@dataclass(frozen=True)
class PresetSummary:
    """A bundled preset, its model, and the bytes one token adds at bf16 (every layer, no window)."""

    preset: Preset
    spec: ModelSpec
    bf16_bytes_per_token: int


def list_presets() -> list[PresetSummary]:
    """Every bundled preset, in file order."""
    from kvcalc.dtypes import BF16
    from kvcalc.engines import THEORETICAL
    from kvcalc.inputs.presets import load_presets

    found = []
    for preset in load_presets().values():
        spec = read_config(preset.config, name=preset.name)
        per_token = estimate_spec(spec, Workload(tokens=1, kv_dtype=BF16), engine=THEORETICAL).per_token_bytes
        found.append(PresetSummary(preset, spec, per_token))
    return found


def show_preset(name: str) -> PresetSummary:
    """One preset by name or alias (case-insensitive)."""
    from kvcalc import checks
    from kvcalc.inputs.presets import get_preset

    checks.text(name, "name", optional=False)
    preset = get_preset(name)
    return next(s for s in list_presets() if s.preset.name == preset.name)
