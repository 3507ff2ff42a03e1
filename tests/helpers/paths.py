"""The repository's folders, for test modules at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root: README.md, pyproject.toml, src/
SRC = ROOT / "src" / "kvcalc"  # the package's source
PRESETS = ROOT / "model_presets"  # the bundled presets' YAML files
FIXTURES = ROOT / "tests" / "fixtures"  # real config.json files (see fixtures/SOURCES.md)
