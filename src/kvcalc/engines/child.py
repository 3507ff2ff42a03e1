"""Running an engine's standalone probe file in that engine's own Python (vLLM and SGLang pin their
own torch, so each lives in an environment of its own), and showing its figures beside kvcalc's.

The child reads one JSON request on stdin and prints one JSON line; a request it refuses is one
``<name>: error:`` line on stderr. The run is bounded (``timeout``) and the child's whole process
group is killed afterwards (an engine may leave workers behind even when it exits normally).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import suppress
from pathlib import Path
from typing import Any

from kvcalc.errors import UsageError

# An engine's own error lines can be long; one line of the user's terminal is enough to say why.
_REASON_LIMIT = 400


def run_child(
    python: str,
    script: Path,
    request: dict[str, Any],
    timeout: float,
    *,
    engine: str,
    doing: str,
    env: dict[str, str],
) -> dict[str, Any]:
    """Run ``script`` with ``python`` on ``request`` (extra environment ``env``); its JSON result.
    ``engine`` names the engine and ``doing`` what it did not finish in time ("start") in the
    one-line errors."""
    with subprocess.Popen(
        [python, str(script), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **env),
        start_new_session=True,  # its own process group: one killpg ends the engine and its workers
    ) as process:
        try:
            out, err = process.communicate(json.dumps(request).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise UsageError(
                f"{engine} did not {doing} within {timeout:g} s (raise --timeout); it was stopped"
            ) from None
        except BaseException:
            _kill_group(process)
            raise
    _kill_group(process)
    if process.returncode != 0:
        raise UsageError(_failure(err.decode("utf-8", "replace"), process.returncode, script.stem))
    try:
        result: dict[str, Any] = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UsageError(f"{script.name} printed no JSON result (KVCALC_DEBUG=1 shows {engine}'s traceback)") from None
    return result


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _failure(stderr: str, status: int, name: str) -> str:
    """The child's own ``<name>: error:`` line, or the last line the engine wrote."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    mine = [line for line in lines if line.startswith(f"{name}: error:")]
    line = mine[-1] if mine else (lines[-1] if lines else f"exit status {status}")
    line = "".join(ch if ch.isprintable() else "?" for ch in line)
    return line if len(line) <= _REASON_LIMIT else line[: _REASON_LIMIT - 3] + "..."


def check_rows(engine: str, checks: list[tuple[str, Any, Any, bool]], width: int = 16) -> list[str]:
    """The figures as a table: what, the engine's, kvcalc's, ok or DIFFERS; then the verdict."""
    label = max(len(what) for what, *_ in checks)
    rows = [f"  {'':<{label}}  {engine:>{width}}  {'kvcalc':>{width}}"]
    for what, theirs, ours, match in checks:
        rows.append(
            f"  {what:<{label}}  {show(theirs):>{width}}  {show(ours):>{width}}  {'ok' if match else 'DIFFERS'}"
        )
    rows.append("match: every figure agrees" if all(c[3] for c in checks) else "MISMATCH: see the rows marked DIFFERS")
    return rows


def show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)
