"""speed's service (kvcalc.api._speed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc import api
from kvcalc.errors import SourceError
from tests.helpers.gguf_files import typed_gguf_file
from tests.helpers.gguf_models import with_nextn


def test_speed_on_a_gguf_with_no_tensors_takes_the_weights_given(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 3, 0)
    path = typed_gguf_file(tmp_path / "empty.gguf", arch, keys)
    with pytest.raises(SourceError, match=r"holds no tensors: give --weights SIZE$"):
        api.speed(str(path), prompt=10, output=2, compute=api.Compute(bandwidth=10**12, flops=10**15))
    report = api.speed(
        str(path), prompt=10, output=2, weights=10**9, compute=api.Compute(bandwidth=10**12, flops=10**15)
    )
    assert report.result.weights.total_bytes == 10**9
