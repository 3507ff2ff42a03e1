"""Build hook: ship the YAML presets pre-parsed as one JSON file inside the wheel.

The YAML files in model_presets/ stay the source of truth (and ship too); the JSON copy only
spares an installed ``kvcalc estimate <preset>`` the ~9 ms it takes to import PyYAML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PresetIndexHook(BuildHookInterface):  # type: ignore[misc]  # hatchling ships no types
    PLUGIN_NAME = "preset-index"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return  # an editable install reads the YAML files from the checkout
        root = Path(self.root)
        index = {
            path.name: yaml.safe_load(path.read_text(encoding="utf-8"))
            for path in sorted((root / "model_presets").glob("*.yaml"))
        }
        out = Path(self.directory) / "preset-index" / "presets.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(index), encoding="utf-8")  # key order kept: `presets show` prints it
        build_data["force_include"][str(out)] = "kvcalc/model_presets/presets.json"
