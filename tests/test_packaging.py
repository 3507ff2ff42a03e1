"""The wheel carries everything an installed kvcalc needs: presets, py.typed, the console script.

The wheel is built once per session from the repository root without build isolation (so no
network is needed); that needs hatchling in the test environment, else these tests skip.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRESET_FILES = sorted(p.name for p in (ROOT / "model_presets").glob("*.yaml"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed: the wheel cannot be built without build isolation")
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*pip, "--disable-pip-version-check", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("kvcalc-*.whl"))
    assert len(wheels) == 1, f"expected one kvcalc wheel, found {[w.name for w in wheels]}"
    return wheels[0]


def test_repo_has_presets() -> None:
    assert len(PRESET_FILES) > 0, "no model_presets/*.yaml found in the repository"


def test_wheel_contains_presets_py_typed_and_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        missing = [f for f in PRESET_FILES if f"kvcalc/model_presets/{f}" not in names]
        assert missing == [], f"presets missing from {wheel.name}: {missing}"
        assert "kvcalc/py.typed" in names
        assert "kvcalc/cli/__init__.py" in names
        entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert len(entry_points) == 1, f"no entry_points.txt in {wheel.name}"
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(entry_points[0]).decode())
    assert parser.has_section("console_scripts")
    assert parser.get("console_scripts", "kvcalc") == "kvcalc.cli:main"
    # The wheel is a package tree, not a src/ layout or a checkout copy.
    assert not any(n.startswith(("src/", "model_presets/", "tests/")) for n in names)


def test_unpacked_wheel_finds_its_own_presets(wheel: Path, tmp_path: Path) -> None:
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import kvcalc, kvcalc.inputs.presets as p; "
        "assert kvcalc.__file__.startswith(sys.argv[1]), kvcalc.__file__; "
        "assert str(p.presets_dir()).startswith(sys.argv[1]), str(p.presets_dir()); "
        "print(len(p.load_presets()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(unpacked)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) == len(PRESET_FILES)


def test_packed_preset_index_matches_the_yaml_files(wheel: Path) -> None:
    # hatch_build.py ships the presets pre-parsed; it must hold exactly what the YAML files say.
    import json

    import yaml

    with zipfile.ZipFile(wheel) as zf:
        packed = json.loads(zf.read("kvcalc/model_presets/presets.json"))
    expected = {f: yaml.safe_load((ROOT / "model_presets" / f).read_text()) for f in PRESET_FILES}
    assert packed == expected
    # Same key order too: `kvcalc presets show` prints the config in the file's order.
    assert [list(packed[f]["config"]) for f in PRESET_FILES] == [list(expected[f]["config"]) for f in PRESET_FILES]


def test_packed_gpu_presets_load_as_the_yaml(wheel: Path, tmp_path: Path) -> None:
    """hatch_build.py ships gpus.yaml pre-parsed as kvcalc/gpus.json; the installed kvcalc reads
    that copy (no PyYAML) and builds the same presets as the YAML in the checkout."""
    from kvcalc import gpus

    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
        assert "kvcalc/gpus.yaml" in zf.namelist()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import kvcalc.gpus as g; "
        "assert g._PACKED.is_file(), g._PACKED; print(repr(g.GPUS)); assert 'yaml' not in sys.modules"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(unpacked)], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(gpus.GPUS)
