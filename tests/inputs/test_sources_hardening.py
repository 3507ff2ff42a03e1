"""MODEL and the files behind it, as an adversary would give them: FIFOs, devices, huge files, symlink
loops, Hub URLs, an unreachable Hub, a local folder named like a repo id, and malformed safetensors.

Every failure is one ``kvcalc: error:`` line, and none of them waits: a FIFO once blocked forever,
``/dev/zero`` filled memory, and an unreachable Hub took 23 s (minutes when it never answered).
Hub tests use the real huggingface_hub against a pre-populated cache (tests/helpers/hub_cache.py) or a
local server on 127.0.0.1 (tests/helpers/fake_hub.py), in fresh interpreters because huggingface_hub reads
its environment when it is imported.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.api import load_model
from kvcalc.errors import SourceError
from kvcalc.inputs.files import CONFIG_LIMIT, RESULT_LIMIT, open_regular_file, read_json_file, read_regular_file
from kvcalc.inputs.hub import parse_hub_url
from kvcalc.inputs.source import resolve
from kvcalc.inputs.weights import weights_bytes
from tests.conftest import FIXTURES, assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import REPO as SERVED_REPO
from tests.helpers.fake_hub import FakeHub, serve_config
from tests.helpers.hub_cache import LLAMA_31_8B_TOTAL, QWEN3_8B_TOTAL, V2_HASH, HubCache
from tests.helpers.hub_cache import REPO as CACHED_REPO

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
# A regression that blocks again must fail the test, not hang the suite.
SUBPROCESS_TIMEOUT_S = 60
# A correctness bound, not a benchmark: kvcalc's default wait is 5 s, huggingface_hub's own 10 s
# plus a 23 s retry round (and 60 s per retry against a server that never answers).
FAIL_FAST_S = 15.0


def llama_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    return path


# --- regular files only, of bounded size ---------------------------------------------------------------


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


# --- symlinks ------------------------------------------------------------------------------------------


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


# --- Hub URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://huggingface.co/org/name", ("org/name", None)),
        ("https://huggingface.co/org/name/", ("org/name", None)),
        ("huggingface.co/org/name", ("org/name", None)),
        ("hf.co/org/name", ("org/name", None)),
        ("http://www.huggingface.co/org/name", ("org/name", None)),
        ("HTTPS://HuggingFace.co/Org/Name", ("Org/Name", None)),
        ("https://huggingface.co/org/name/tree/main", ("org/name", "main")),
        ("https://huggingface.co/org/name/tree/v2/", ("org/name", "v2")),
        ("https://huggingface.co/org/name/blob/main/config.json", ("org/name", "main")),
        ("https://huggingface.co/org/name/blob/main/config.json#L12", ("org/name", "main")),
        ("https://huggingface.co/org/name/resolve/v2/config.json?download=true", ("org/name", "v2")),
        ("hf.co/org/name/tree/refs%2Fpr%2F3", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/tree/refs/pr/3", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/blob/refs%2Fpr%2F3/config.json", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/resolve/refs/pr/3/config.json", ("org/name", "refs/pr/3")),
        ("org/name", None),  # a repo id, not a URL
        ("llama-3.1-8b", None),
        ("./huggingface.co/org/name", None),  # a path
    ],
)
def test_hub_url_forms(url: str, expected: tuple[str, str | None] | None) -> None:
    assert parse_hub_url(url) == expected


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("https://github.com/org/name", "is not a Hugging Face URL"),
        ("ftp://huggingface.co/org/name", "is not a Hugging Face URL"),
        ("s3://bucket/model", "is not a Hugging Face URL"),
        ("https://huggingface.co/datasets/org/name", "is a dataset, not a model"),
        ("hf.co/spaces/org/name", "is a Space, not a model"),
        ("https://huggingface.co/gpt2", "is not a model repo URL"),
        ("https://huggingface.co/", "is not a model repo URL"),
        ("https://huggingface.co/docs/transformers", "is not a model repo URL"),
        ("https://huggingface.co/org/name/discussions/1", "is a page of Hub repo org/name"),
        ("https://huggingface.co/org/name/tree", "is a page of Hub repo org/name"),
        ("https://huggingface.co/org/name/tree/main/text_encoder", "is the folder text_encoder"),
        ("https://huggingface.co/org/name/blob/main/text_encoder/config.json", "is the file text_encoder/config.json"),
        ("https://huggingface.co/org/name/resolve/main/model.safetensors", "is the file model.safetensors"),
        ("https://huggingface.co:99999/org/name", "is not a valid URL"),
    ],
)
def test_other_urls_are_one_line(run_cli, url: str, needle: str) -> None:
    line = assert_one_line_error(run_cli("estimate", url), f"MODEL {url}", needle)
    assert "no such file" not in line


def test_hf_endpoint_host_is_a_hub_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private Hub or mirror in HF_ENDPOINT: its URLs name its repos."""
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.com")
    assert parse_hub_url("https://hub.example.com/org/name/tree/v1") == ("org/name", "v1")


def test_url_revision_conflicting_with_revision_flag(run_cli) -> None:
    url = "https://huggingface.co/org/name/tree/v2"
    assert_one_line_error(run_cli("estimate", url, "--revision", "v3"), "names revision 'v2' but --revision is 'v3'")


@pytest.mark.parametrize(
    ("url", "total"),
    [
        (f"https://huggingface.co/{CACHED_REPO}", LLAMA_31_8B_TOTAL),
        (f"hf.co/{CACHED_REPO}/", LLAMA_31_8B_TOTAL),
        (f"https://huggingface.co/{CACHED_REPO}/tree/v2", QWEN3_8B_TOTAL),
        (f"huggingface.co/{CACHED_REPO}/tree/{V2_HASH}/", QWEN3_8B_TOTAL),
        (f"https://huggingface.co/{CACHED_REPO}/blob/v2/config.json", QWEN3_8B_TOTAL),
        (f"https://hf.co/{CACHED_REPO}/resolve/main/config.json?download=true", LLAMA_31_8B_TOTAL),
    ],
)
def test_a_url_reads_the_repo_and_revision_it_names(hub_env: HubCache, url: str, total: int) -> None:
    """Offline, from the cache: main holds Llama-3.1-8B, v2 (and its hash) Qwen3-8B."""
    result = run_subprocess("estimate", url, "--tokens", "2048", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert (data["model"], data["total_bytes"]) == (CACHED_REPO, total)


def test_a_url_revision_equal_to_the_flag_is_fine(hub_env: HubCache) -> None:
    url = f"https://huggingface.co/{CACHED_REPO}/tree/v2"
    result = run_subprocess("estimate", url, "--revision", "v2", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["model_type"] == "qwen3"


def test_a_url_sizes_the_weights_of_its_repo(hub_env: HubCache) -> None:
    """fit --weights auto with a URL asks the Hub about the repo id (offline here: the way out)."""
    result = run_subprocess("fit", f"https://huggingface.co/{CACHED_REPO}/tree/v2", "--gpu", "h100-sxm")
    line = assert_one_line_error(result, f"Hub repo {CACHED_REPO}", "--weights SIZE")
    assert "https://" not in line


# --- an unfetchable repo that a preset describes ---------------------------------------------------


def test_offline_repo_with_a_preset_suggests_it(hub_env: HubCache) -> None:
    result = run_subprocess("estimate", "meta-llama/Llama-3.1-8B")
    assert_one_line_error(
        result,
        "not in the local Hugging Face cache",
        "; the bundled preset llama-3.1-8b describes meta-llama/Llama-3.1-8B: kvcalc estimate llama-3.1-8b",
    )


def test_the_preset_hint_ignores_case_and_needs_a_match(hub_env: HubCache) -> None:
    assert_one_line_error(run_subprocess("estimate", "Qwen/QWEN3-8B"), "the bundled preset qwen3-8b describes")
    line = assert_one_line_error(run_subprocess("estimate", "someorg/not-cached"), "not in the local")
    assert "preset" not in line


# --- a local folder named like a repo id -------------------------------------------------------------


def test_a_local_folder_shadowing_a_repo_id_is_noted(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    llama_config(tmp_path / "meta-llama" / "Llama-3.1-8B")
    result = run_cli("estimate", "meta-llama/Llama-3.1-8B", "--json")
    assert result.exit_code == 0, result.stderr
    notes = result.json()["notes"]
    assert notes[0] == (
        "MODEL meta-llama/Llama-3.1-8B is the local folder ./meta-llama/Llama-3.1-8B, read instead of the Hub "
        "repo meta-llama/Llama-3.1-8B (write ./meta-llama/Llama-3.1-8B to mean the folder, or "
        "https://huggingface.co/meta-llama/Llama-3.1-8B for the Hub repo)"
    )
    text = run_cli("estimate", "meta-llama/Llama-3.1-8B")
    assert "note: MODEL meta-llama/Llama-3.1-8B is the local folder" in text.stdout
    # Said explicitly, the folder is no surprise: no note.
    explicit = run_cli("estimate", "./meta-llama/Llama-3.1-8B", "--json")
    assert not any("local folder" in note for note in explicit.json()["notes"])


def test_the_note_reaches_the_python_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    llama_config(tmp_path / "org" / "name")
    (tmp_path / "org" / "file.json").write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    assert resolve("org/name").notes[0].startswith("MODEL org/name is the local folder ./org/name")
    assert load_model("org/name").notes[0].startswith("MODEL org/name is the local folder ./org/name")
    (tmp_path / "org" / "file").write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    assert resolve("org/file").notes[0].startswith("MODEL org/file is the local file ./org/file, read instead")
    assert resolve("org/file.json").notes == ()  # a .json name is plainly a file
    assert resolve(str(tmp_path / "org" / "name")).notes == ()


# --- on_fetch: told before the network is used, and only then -------------------------------------------

ON_FETCH = """
import json, sys
from kvcalc.api import load_model
from kvcalc.errors import KvcalcError
said = []
try:
    load_model(sys.argv[1], on_fetch=said.append)
except KvcalcError as exc:
    said.append(f"error: {exc}")
print(json.dumps(said))
"""


def fetch_messages(model: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", ON_FETCH, model],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    said: list[str] = json.loads(proc.stdout)
    return said


def test_on_fetch_is_called_before_a_download(hub: FakeHub) -> None:
    serve_config(hub)
    assert fetch_messages(f"https://huggingface.co/{SERVED_REPO}/tree/main") == [
        f"fetching config.json of {SERVED_REPO} at revision main from the Hub..."
    ]
    assert hub.seen()[0][0] == "HEAD"


def test_on_fetch_is_not_called_offline_or_for_local_models(hub_env: HubCache) -> None:
    assert fetch_messages(CACHED_REPO) == []
    assert fetch_messages("llama-3.1-8b") == []
    assert fetch_messages(str(FIXTURES / "Llama-3.1-8B.json")) == []


# --- an unreachable Hub fails fast -----------------------------------------------------------------

SILENT_LIFETIME_S = 60.0  # the server goes away by itself even if the fixture's finalizer never runs


@dataclass
class SilentHub:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte back."""

    listener: socket.socket
    stop: threading.Event = field(default_factory=threading.Event)
    held: list[socket.socket] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def serve(self) -> None:
        deadline = time.monotonic() + SILENT_LIFETIME_S
        self.listener.settimeout(0.1)
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.held.append(connection)  # kept open, unanswered
        for connection in self.held:
            connection.close()
        self.listener.close()


def online_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str) -> None:
    """As the ``hub`` fixture (tests/helpers/fake_hub.py): online, an empty cache, loopback only, no token."""
    proxies = {"http_proxy", "https_proxy", "all_proxy"}  # loopback must not go through a proxy
    for name in list(os.environ):
        if name.startswith(("HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_OFFLINE")) or name.lower() in proxies:
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture
def silent_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SilentHub]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    silent = SilentHub(listener)
    thread = threading.Thread(target=silent.serve, daemon=True)
    thread.start()
    online_env(monkeypatch, tmp_path, silent.endpoint)
    try:
        yield silent
    finally:
        silent.stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive()


def timed_estimate(model: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    result = run_subprocess("estimate", model, env=env)
    elapsed = time.monotonic() - start
    return elapsed, assert_one_line_error(result, model)


def test_a_hub_that_never_answers_fails_fast(silent_hub: SilentHub) -> None:
    elapsed, line = timed_estimate("meta-llama/Llama-3.1-8B")
    assert elapsed < FAIL_FAST_S, f"{elapsed:.1f} s: {line}"
    assert "did not answer within 5 s (HF_HUB_ETAG_TIMEOUT)" in line
    assert "kvcalc estimate llama-3.1-8b" in line  # the preset hint holds for a silent Hub too
    assert len(silent_hub.held) == 1  # one attempt: no second round of retries


def test_hf_hub_etag_timeout_is_honoured(silent_hub: SilentHub) -> None:
    elapsed, line = timed_estimate("org/name", env={"HF_HUB_ETAG_TIMEOUT": "1"})
    assert "did not answer within 1 s" in line
    assert elapsed < FAIL_FAST_S


def test_a_refused_connection_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No server at all: huggingface_hub once retried 5 times over 23 s before giving up."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # the port is now closed: connections are refused
    online_env(monkeypatch, tmp_path, f"http://127.0.0.1:{port}")
    elapsed, line = timed_estimate("org/name")
    assert "cannot be reached" in line
    assert elapsed < FAIL_FAST_S


def test_the_retry_switches_are_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kvcalc empties huggingface_hub's retry switches only for the duration of its own call."""
    online_env(monkeypatch, tmp_path, "http://127.0.0.1:9")
    script = (
        "from huggingface_hub import file_download\n"
        "from kvcalc.errors import SourceError\n"
        "from kvcalc.inputs.hub import fetch_hub_config\n"
        "before = (file_download._DEFAULT_RETRY_ON_EXCEPTIONS, file_download._DEFAULT_RETRY_ON_STATUS_CODES)\n"
        "try:\n"
        "    fetch_hub_config('org/name')\n"
        "except SourceError:\n"
        "    pass\n"
        "after = (file_download._DEFAULT_RETRY_ON_EXCEPTIONS, file_download._DEFAULT_RETRY_ON_STATUS_CODES)\n"
        "assert before == after and all(after), after\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stderr


# --- malformed safetensors for fit --weights auto ----------------------------------------------------------

GOOD_TENSOR = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}


def write_safetensors(folder: Path, header: Any, *, data: int = 8, length: int | None = None) -> Path:
    """model.safetensors: u64 header length (``length`` to lie about it), the header, ``data`` bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + bytes(data))
    return path


def fit_weights(run_cli, folder: Path) -> Any:
    return run_cli("fit", str(folder), "--gpu-memory", "80GB", "--overhead", "0", "--utilization", "1", "--json")


@pytest.mark.parametrize(
    ("index", "needle"),
    [
        ({"metadata": [1, 2]}, "metadata is a list, not an object"),
        ({"metadata": {"total_size": "16060522496"}}, "total_size is '16060522496', not a whole number of bytes"),
        ({"metadata": {"total_size": -16}}, "metadata.total_size must be positive, got -16"),
        ({"metadata": {"total_size": 0}}, "metadata.total_size must be positive, got 0"),
        ({"metadata": {"total_size": True}}, "metadata.total_size is True, not a whole number of bytes"),
        ({"metadata": {"total_size": 1.6e10}}, "metadata.total_size is 16000000000.0, not a whole number"),
        ({"metadata": {"total_size": 10**30}}, "is implausibly large"),
        ({"metadata": {"total_size": 10**1000}}, "a 3,322-bit integer is implausibly large"),
        ({"metadata": {"total_size": None}}, "has no metadata.total_size"),
        ({"metadata": {}}, "has no metadata.total_size"),
        ({"weight_map": {}}, "has no metadata.total_size"),
        ([1, 2], "is a list, not a JSON object"),
    ],
)
def test_a_malformed_safetensors_index(run_cli, here: Path, index: Any, needle: str) -> None:
    llama_config(here)
    (here / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors.index.json", needle)


def test_an_index_that_is_not_a_regular_file(run_cli, here: Path) -> None:
    llama_config(here)
    (here / "model.safetensors.index.json").mkdir()
    assert_one_line_error(
        fit_weights(run_cli, here), "weights index m/model.safetensors.index.json is not a regular file (a directory)"
    )


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        ([GOOD_TENSOR], "the safetensors header is a list, not a JSON object"),
        ("text", "the safetensors header is a string, not a JSON object"),
        ({"w": [0, 8]}, "tensor 'w' is a list, not an object"),
        ({"w": 8}, "tensor 'w' is an integer, not an object"),
        ({"w": {"dtype": "BF16", "shape": [2, 2]}}, "tensor 'w' has no data_offsets"),
        ({"w": {**GOOD_TENSOR, "data_offsets": "0,8"}}, "tensor 'w' has data_offsets '0,8'; expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [8]}}, "has data_offsets [8]; expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 4, 8]}}, "expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 8.0]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": ["0", "8"]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [False, True]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [-8, 0]}}, "has data_offsets [-8, 0]; expected 0 <= begin <= end"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, -8]}}, "has data_offsets [0, -8]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [8, 0]}}, "has data_offsets [8, 0]; expected 0 <= begin <= end"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 2**70]}}, "ends at a 71-bit offset of the data"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 9]}}, "ends at byte 9 of the data, but the file holds 8 bytes"),
        ({"w": {**GOOD_TENSOR, "dtype": 2}}, "tensor 'w' has no dtype string"),
        ({"w": {**GOOD_TENSOR, "shape": [-1, 2]}}, "has shape [-1, 2]"),
        ({"w": {**GOOD_TENSOR, "shape": "2x2"}}, "has shape '2x2'"),
        ({"__metadata__": ["pt"], "w": GOOD_TENSOR}, "__metadata__ must be an object of strings"),
        ({"__metadata__": {"format": 1}, "w": GOOD_TENSOR}, "__metadata__ must be an object of strings"),
        ({"a\nb": [0]}, "tensor 'a\\nb' is a list"),  # a name cannot break the one line
        (b'{"w": ', "the safetensors header is not valid JSON"),
        (b"\xff\xfe{}", "the safetensors header is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_malformed_safetensors_header(run_cli, here: Path, header: Any, needle: str) -> None:
    llama_config(here)
    write_safetensors(here, header)
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors", needle)


@pytest.mark.parametrize(
    ("length", "needle"),
    [
        (10**6, "declares a 1,000,000-byte safetensors header but is only"),
        (2**64 - 1, "declares a 18,446,744,073,709,551,615-byte safetensors header; the format allows at most"),
    ],
)
def test_a_length_prefix_past_the_end(run_cli, here: Path, length: int, needle: str) -> None:
    llama_config(here)
    write_safetensors(here, {"w": GOOD_TENSOR}, length=length)
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors", needle)


@pytest.mark.parametrize("content", [b"", b"\x01\x02\x03"])
def test_a_file_too_short_for_a_length_prefix(run_cli, here: Path, content: bytes) -> None:
    llama_config(here)
    (here / "model.safetensors").write_bytes(content)
    assert_one_line_error(fit_weights(run_cli, here), "too short to be a safetensors file")


def test_a_negative_offset_no_longer_raises_the_budget(run_cli, here: Path) -> None:
    """The old reader took each entry's end as it came: [0, -10^12] made the weights negative and
    added a terabyte to the KV budget."""
    llama_config(here)
    write_safetensors(here, {"w": {**GOOD_TENSOR, "data_offsets": [0, -(10**12)]}})
    assert_one_line_error(fit_weights(run_cli, here), "tensor 'w'", "expected 0 <= begin <= end")


def test_a_valid_header_still_sizes_the_weights(run_cli, here: Path) -> None:
    llama_config(here)
    header = {
        "__metadata__": {"format": "pt"},
        "a": GOOD_TENSOR,
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
        "empty": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]},
    }
    write_safetensors(here, header, data=16)
    result = fit_weights(run_cli, here)
    assert result.exit_code == 0, result.stderr
    assert result.json()["kv_budget_bytes"] == 80 * 10**9 - 16
    assert weights_bytes("m", spec_dtype=None) == (16, "model.safetensors header")


@needs_fifo
def test_a_safetensors_fifo_does_not_block(tmp_path: Path) -> None:
    llama_config(tmp_path / "m")
    os.mkfifo(tmp_path / "m" / "model.safetensors")
    result = run_subprocess("fit", "m", "--gpu-memory", "80GB", cwd=tmp_path)
    assert_one_line_error(result, "m/model.safetensors is not a regular file (a FIFO)")


# --- any header: a size or a SourceError, nothing else ---------------------------------------------------

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
)
offsets = st.lists(st.integers(min_value=-64, max_value=96) | json_leaves, max_size=3)
# Mostly tensor-shaped entries with a field or two wrong, so most examples get past the first check.
tensor_entries = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["BF16", "F32", "I8"]) | json_leaves},
    optional={
        "shape": st.lists(st.integers(min_value=-2, max_value=8), max_size=3) | json_values,
        "data_offsets": offsets | json_values,
    },
)
headers = st.dictionaries(
    st.sampled_from(["__metadata__", "w", "b"]) | st.text(max_size=6),
    tensor_entries | st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2) | json_values,
    max_size=4,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=headers.map(lambda h: json.dumps(h).encode()) | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=48),
    length=st.none() | st.integers(min_value=0, max_value=2**64 - 1) | st.integers(min_value=0, max_value=128),
    data=st.integers(min_value=0, max_value=96),
)  # fmt: skip
def test_any_safetensors_header_gives_a_size_or_a_source_error(body: bytes, length: int | None, data: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.safetensors").write_bytes(
            struct.pack("<Q", len(body) if length is None else length) + body + bytes(data)
        )
        try:
            size, label = weights_bytes(folder, spec_dtype=None)
        except SourceError as exc:
            assert "\n" not in str(exc)
            return
    assert isinstance(size, int) and not isinstance(size, bool)
    assert 0 <= size <= data  # never more than the data the file holds, never negative
    assert label == "model.safetensors header"
