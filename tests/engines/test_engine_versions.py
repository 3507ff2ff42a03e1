"""Each engine package a probe runs names its release when it is not the one the rules were read from."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_probed_engine_package_names_its_release() -> None:
    # llama-cpp-python and mlx-lm probes say so too when another release runs them (.ci/run pins
    # 0.3.36 and 0.32.2, the releases the rules were read from).
    from kvcalc.engines.base import version_warning as package_warning
    from kvcalc.engines.llamacpp import RULES_VERSION as LLAMA_CPP
    from kvcalc.engines.mlx.releases import RULES_VERSION as MLX_LM

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"llama-cpp-python=={LLAMA_CPP}" in ci and f"mlx-lm=={MLX_LM}" in ci
    assert package_warning("mlx-lm", MLX_LM, MLX_LM) is None
    assert package_warning("mlx-lm", None, MLX_LM) is None  # an older child that does not say
    line = package_warning("llama-cpp-python", "0.3.40", LLAMA_CPP)
    assert line is not None and "0.3.40" in line and "0.3.36" in line and "\n" not in line
