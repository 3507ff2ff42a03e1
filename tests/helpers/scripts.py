"""The repository's scripts (scripts/NAME.py), imported by the tests that check them: they are
files to run, not a package, so each is loaded from its path under its own name."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.helpers.paths import ROOT


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as the module NAME (registered in sys.modules, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
