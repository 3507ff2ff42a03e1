"""Reading files (kvcalc.inputs.files): FIFOs and devices are refused, never read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvcalc.errors import SourceError
from kvcalc.inputs.files import CONFIG_LIMIT, RESULT_LIMIT, open_regular_file, read_json_file, read_regular_file
from tests.conftest import assert_one_line_error, run_subprocess
from tests.helpers.cwd import here_relative  # noqa: F401  (the fixture "here")
from tests.helpers.local_files import SUBPROCESS_TIMEOUT_S, needs_fifo


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


@needs_fifo
@pytest.mark.parametrize("layout", ["fifo", "folder", "symlink"])
def test_a_fifo_as_model_fails_at_once(tmp_path: Path, layout: str) -> None:
    """Opening a FIFO for reading waits for a writer: as MODEL, or as the config.json of a folder,
    or behind a symlink, it must be refused without being opened."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    model = {"fifo": fifo, "folder": tmp_path, "symlink": tmp_path / "link.json"}[layout]
    if layout == "symlink":
        model.symlink_to(fifo)
    start = time.monotonic()
    result = run_subprocess("estimate", str(model))  # conftest's timeout turns a hang into a failure
    assert time.monotonic() - start < SUBPROCESS_TIMEOUT_S
    assert_one_line_error(result, "is not a regular file (a FIFO)")


@needs_fifo
def test_a_path_that_becomes_a_fifo_after_the_check_does_not_block(tmp_path: Path) -> None:
    """The type is checked again on the descriptor, which is opened without blocking: a path swapped
    for a FIFO between stat() and open() is refused too. Here stat() is made to report a regular file."""
    fifo = tmp_path / "swapped.json"
    os.mkfifo(fifo)
    regular = tmp_path / "regular.json"
    regular.write_text("{}", encoding="utf-8")
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from kvcalc.errors import SourceError\n"
        "from kvcalc.inputs.files import read_regular_file\n"
        "fifo, regular = sys.argv[1:]\n"
        "real_stat = os.stat\n"
        "os.stat = lambda path, *a, **k: real_stat(regular if str(path) == fifo else path, *a, **k)\n"
        "try:\n"
        "    read_regular_file(Path(fifo), what='MODEL', limit=100)\n"
        "except SourceError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(fifo), str(regular)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"MODEL {fifo} is not a regular file (a FIFO)"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_as_model_is_refused(run_cli, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    assert_one_line_error(run_cli("estimate", device), f"MODEL {device} is not a regular file (a character device)")


def test_a_directory_and_a_socket_are_not_regular_files(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"is not a regular file \(a directory\)"):
        read_regular_file(tmp_path, what="--lengths", limit=RESULT_LIMIT)
    with pytest.raises(SourceError, match=r"^--lengths .* is not a regular file \(a directory\)$"):
        open_regular_file(tmp_path, what="--lengths")
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
    except OSError:  # e.g. a temporary path longer than a socket address allows
        pytest.skip("cannot bind a unix socket here")
    try:
        with pytest.raises(SourceError, match=r"--from-result .* is not a regular file \(a socket\)"):
            read_regular_file(path, what="--from-result", limit=RESULT_LIMIT)
    finally:
        server.close()


def test_a_streamed_file_is_checked_as_a_read_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_regular_file (request mixes) refuses what read_regular_file refuses, at any size, and a
    read that fails midway is one SourceError naming the file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match=r"^--lengths .*pipe is not a regular file \(a FIFO\)$"):
        open_regular_file(fifo, what="--lengths")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(SourceError, match=r"^--lengths .*loop is a symlink loop$"):
        open_regular_file(loop, what="--lengths")
    with pytest.raises(SourceError, match=r"^cannot read --lengths .*none\.csv: No such file or directory$"):
        open_regular_file(tmp_path / "none.csv", what="--lengths")
    path = tmp_path / "mix.csv"
    path.write_bytes(b"prompt\n" + b"7\n" * 100)
    with open_regular_file(path, what="--lengths") as stream:
        assert stream.read(7) == b"prompt\n" and stream.read(1000) == b"7\n" * 100 and stream.read(10) == b""
        assert stream.seek(0) == 0 and stream.read(6) == b"prompt"

        def failing(fd: int, size: int) -> bytes:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "read", failing)
        with pytest.raises(SourceError, match=r"^cannot read --lengths .*mix\.csv: Input/output error$"):
            stream.read(10)


def test_an_oversized_sparse_config_is_refused_unread(run_cli, here: Path) -> None:
    """17 MiB of holes: refused from its size, before a byte is read."""
    with Path("config.json").open("wb") as handle:
        handle.truncate(17 * 2**20)
    assert_one_line_error(
        run_cli("estimate", "config.json"), "MODEL config.json is 17,825,792 bytes; kvcalc reads at most 16 MiB"
    )


def test_the_limit_is_inclusive(tmp_path: Path) -> None:
    path = tmp_path / "mix.txt"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(path, what="--lengths", limit=10) == b"x" * 10
    with pytest.raises(SourceError, match=r"^--lengths .*mix\.txt is 10 bytes; kvcalc reads at most 9 bytes for it$"):
        read_regular_file(path, what="--lengths", limit=9)


def test_a_file_whose_size_is_not_known_in_advance_is_still_capped() -> None:
    """/proc files report size 0 and then produce text: at most limit + 1 bytes are read."""
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("no /proc here")
    with pytest.raises(SourceError, match="grew past 16 bytes while kvcalc read it"):
        read_regular_file(status, what="", limit=16)


def test_limits_and_read_json_file_defaults(tmp_path: Path) -> None:
    assert (CONFIG_LIMIT, RESULT_LIMIT) == (16 * 2**20, 64 * 2**20)  # request mixes are streamed: no limit
    path = tmp_path / "result.json"
    path.write_text('{"mode": "raw"}', encoding="utf-8")
    assert read_json_file(path) == {"mode": "raw"}  # the signature the CLI already uses
    with pytest.raises(SourceError, match=r"^probe result .* is 15 bytes; kvcalc reads at most 8 bytes for it$"):
        read_json_file(path, limit=8, what="probe result")


@pytest.mark.parametrize("model", ["loop", "./loop", "loop/config.json"])
def test_a_symlink_loop_is_named_not_looked_up_on_the_hub(run_cli, here: Path, model: str) -> None:
    Path("loop").symlink_to("loop")
    where = "goes through" if model.endswith(".json") else "is"
    line = assert_one_line_error(run_cli("estimate", model), f"MODEL {model} {where} a symlink loop")
    assert "Hub" not in line


def test_a_loop_of_two_links(run_cli, here: Path) -> None:
    Path("a").symlink_to("b")
    Path("b").symlink_to("a")
    assert_one_line_error(run_cli("estimate", "a"), "MODEL a is a symlink loop")


@pytest.mark.parametrize("model", ["config.json", "org/name"])
def test_a_dangling_symlink_names_its_target(run_cli, here: Path, model: str) -> None:
    """org/name that is a broken link here was once reported as a Hub cache miss."""
    Path(model).parent.mkdir(exist_ok=True)
    Path(model).symlink_to("../gone.json")
    line = assert_one_line_error(run_cli("estimate", model), f"MODEL {model} is a broken symlink to ../gone.json")
    assert "Hub" not in line


def test_a_folder_whose_config_is_a_dangling_symlink(run_cli, here: Path) -> None:
    """As in a Hugging Face cache snapshot whose blob was deleted."""
    here.mkdir()
    (here / "config.json").symlink_to("../../blobs/0123")
    assert_one_line_error(run_cli("estimate", "m"), "m/config.json is a broken symlink to ../../blobs/0123")
