"""kvcalc.engines.child: an engine's probe run in its own Python, and how it fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvcalc.engines.child import run_child
from kvcalc.errors import DependencyError, UsageError
from tests.conftest import assert_one_line_error

SCRIPT = Path("vllm_probe.py")  # only its name is used: the stand-in Pythons below ignore it


def stand_in(tmp_path: Path, body: str) -> str:
    """An executable that plays an engine's Python: ``body`` as a shell script."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def run(python: str) -> dict[str, object]:
    return run_child(python, SCRIPT, {}, 30, engine="vLLM", doing="start", env={})


def test_a_python_that_fails_at_once_is_named() -> None:
    """/bin/false as the engine's Python said only "exit status 1"."""
    with pytest.raises(DependencyError) as caught:
        run("/bin/false")
    message = str(caught.value)
    assert message == (
        "/bin/false (the Python that runs vLLM) failed to start vLLM or to import it: running vllm_probe.py it "
        "exited with status 1 and wrote nothing on stderr"
    )
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("mode", "body", "reason"),
    [(0o644, "#!/bin/sh\nexit 0\n", "Permission denied"), (0o755, "not a program\n", "Exec format error")],
)
def test_a_python_that_cannot_be_run_is_one_line(tmp_path: Path, mode: int, body: str, reason: str) -> None:
    """--engine-python /etc/passwd (a file, not executable) was a PermissionError traceback from
    subprocess; a text file with no #! line an OSError (ENOEXEC). Either is the environment's
    problem: exit 1, as a Python that fails to start is."""
    path = tmp_path / "python"
    path.write_text(body)
    path.chmod(mode)
    if mode == 0o644 and os.access(path, os.X_OK):
        pytest.skip("running as a user that may execute any file")
    with pytest.raises(DependencyError) as caught:
        run(str(path))
    assert str(caught.value) == f"{path} (the Python that runs vLLM) cannot be run: {reason}"
    assert caught.value.exit_code == 1


def test_the_last_stderr_line_is_the_reason(tmp_path: Path) -> None:
    python = stand_in(tmp_path, "echo 'Traceback (most recent call last):' >&2\n"
                                "echo \"ModuleNotFoundError: No module named 'vllm'\" >&2\nexit 1")  # fmt: skip
    with pytest.raises(DependencyError, match=r"exited with status 1: ModuleNotFoundError: No module named 'vllm'$"):
        run(python)


def test_a_signal_is_named(tmp_path: Path) -> None:
    with pytest.raises(DependencyError, match="it was killed by signal 9 and wrote nothing"):
        run(stand_in(tmp_path, "kill -9 $$"))


def test_the_probes_own_refusal_stays_a_usage_error(tmp_path: Path) -> None:
    """The probe ran and refused the request: that is about the request (exit 2), its line as written."""
    python = stand_in(tmp_path, "echo 'vllm_probe: error: max_model_len must be positive' >&2\nexit 2")
    with pytest.raises(UsageError, match=r"^vllm_probe: error: max_model_len must be positive$"):
        run(python)


def test_cli_engine_python_false(run_cli) -> None:
    result = run_cli("probe", "llama-3.1-8b", "--engine", "vllm", "--engine-python", "/bin/false")
    assert result.exit_code == 1
    assert_one_line_error(result, "/bin/false (the Python that runs vLLM) failed to start vLLM", "status 1")
