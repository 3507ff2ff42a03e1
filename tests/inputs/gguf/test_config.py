"""GGUF metadata read as a config (kvcalc.inputs.gguf.config): errors name the GGUF key, not the config
field it maps to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error
from tests.helpers.commands import FIT
from tests.helpers.cwd import here_absolute  # noqa: F401  (the fixture "here")
from tests.helpers.gguf_files import attention, gguf_file


@pytest.mark.parametrize(
    ("keys", "named", "not_named"),
    [
        # 3 KV heads for 8 query heads: once "config field 'num_key_value_heads' (3) must divide the 8 query heads"
        (attention(8, 3, 64, 2), "GGUF key llama.attention.head_count_kv (3) must divide the 8 query heads",
         "num_key_value_heads"),
        (attention(8, 16, 64, 2), "GGUF key llama.attention.head_count_kv (16) must divide", "num_key_value_heads"),
        # once "config field 'num_hidden_layers' is implausibly large"
        (attention(8, 2, 64, 2**31), "GGUF key llama.block_count is implausibly large: 2147483648",
         "num_hidden_layers"),
        (attention(8, 2, 2**28, 2), "GGUF key llama.attention.key_length is implausibly large", "head_dim"),
        ({**attention(8, 2, 64, 2), "attention.head_count": 2**32 - 1}, "GGUF key llama.attention.head_count is",
         "num_attention_heads"),
        # a per-layer KV-head count: the layer it is wrong on
        ({**attention(8, 2, 64, 3), "attention.head_count_kv": [2, 3, 2]},
         "GGUF key llama.attention.head_count_kv[1] (3) must divide the 8 query heads", "num_key_value_heads"),
    ],
)  # fmt: skip
def test_gguf_errors_name_the_gguf_key(run_cli, here: Path, keys: dict[str, Any], named: str, not_named: str) -> None:
    gguf_file(here / "bad.gguf", "llama", keys)
    for command in (("estimate",), ("fit", *FIT)):
        result = run_cli(command[0], "bad.gguf", *command[1:])
        line = assert_one_line_error(result, f"bad.gguf: {named}")
        assert not_named not in line and "config field" not in line and result.exit_code == 1


def test_a_gguf_window_is_named_by_its_key(run_cli, here: Path) -> None:
    keys = attention(8, 4, 32, 2, **{"attention.sliding_window": 2**32 - 1})
    gguf_file(here / "gemma2.gguf", "gemma2", keys)
    line = assert_one_line_error(
        run_cli("estimate", "gemma2.gguf"), "GGUF key gemma2.attention.sliding_window is implausibly"
    )
    assert "'sliding_window'" not in line


def test_the_python_api_says_the_same(tmp_path: Path) -> None:
    from kvcalc.api import load_model
    from kvcalc.errors import KvcalcError

    path = gguf_file(tmp_path / "bad.gguf", "llama", attention(8, 3, 64, 2))
    with pytest.raises(KvcalcError, match=r"GGUF key llama\.attention\.head_count_kv \(3\)"):
        load_model(str(path))
