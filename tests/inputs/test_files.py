"""Reading files (kvcalc.inputs.files): FIFOs and devices are refused, never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_subprocess


@pytest.mark.parametrize("flag", ["--lengths", "--from-result"])
def test_fifo_inputs_do_not_block(tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = ["estimate", "llama-3.1-8b", "--lengths", str(fifo)]
    if flag == "--from-result":
        argv = ["probe", "llama-3.1-8b", "--tokens", "40", "--from-result", str(fifo)]
    result = run_subprocess(*argv)  # run_subprocess stops a hang after 120 s with an error
    assert_one_line_error(result, "not a regular file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_device_files_are_refused(run_cli, device: str) -> None:
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", device), "not a regular file")


def test_a_5000_digit_number_in_a_config_says_so_without_python_s_limit_text(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}")
    result = run_cli("estimate", str(path))
    line = assert_one_line_error(result, "a number in it has thousands of digits")
    assert "set_int_max_str_digits" not in line and result.exit_code == 1
