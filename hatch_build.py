"""Build hook: ship the YAML presets pre-parsed as JSON inside the wheel.

The YAML files in model_presets/ and src/kvcalc/gpus.yaml stay the source of truth (and ship
too); the JSON copies only spare an installed ``kvcalc estimate <preset>`` the ~9 ms it takes to
import PyYAML, and ``kvcalc fit --gpu`` the ~9 ms it takes to parse the GPU presets.
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
        gpus = Path(self.directory) / "preset-index" / "gpus.json"
        gpus.write_text(json.dumps(yaml.safe_load((root / "src/kvcalc/gpus.yaml").read_text(encoding="utf-8"))),
                        encoding="utf-8")  # fmt: skip
        build_data["force_include"][str(gpus)] = "kvcalc/gpus.json"
