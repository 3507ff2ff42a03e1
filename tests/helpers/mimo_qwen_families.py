"""What the MiMo-V2-Flash, Qwen3.5 and Nemotron-H test modules share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc.inputs.presets import load_presets


def _probe(run_cli: Any, path: Path) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(path), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    return data


PRESETS = load_presets()
