"""Running an engine's standalone probe file in that engine's own Python (vLLM and SGLang pin their
own torch, so each lives in an environment of its own), and describing its figures beside kvcalc's
(as data: kvcalc.engines.probing's items, which views.probe draws).

The child reads one JSON request on stdin and prints one JSON line; a request it refuses is one
``<name>: error:`` line on stderr. The run is bounded (``timeout``) and the child's whole process
group is killed afterwards (an engine may leave workers behind even when it exits normally).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar

from kvcalc.engines.probing import Item, Remark
from kvcalc.errors import DependencyError, UsageError

# An engine's own error lines can be long; one line of the user's terminal is enough to say why.
_REASON_LIMIT = 400


def engine_python(explicit: str | None, env_var: str, module: str, engine: str, hint: str) -> str:
    """The Python that runs an engine: ``explicit`` (--engine-python), then $``env_var``, then this
    one if it can import ``module``; else a one-line DependencyError with the set-up ``hint``."""
    chosen = explicit or os.environ.get(env_var)
    if chosen:
        if not Path(chosen).is_file():
            where = "--engine-python" if explicit else env_var
            raise UsageError(f"{where} {chosen!r} is not a file: give the Python of {engine}'s environment")
        return chosen
    if find_spec(module) is not None:  # found without importing it (it takes seconds)
        return sys.executable
    raise DependencyError(f"{engine} is not installed here: {hint}")


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
    try:
        started = subprocess.Popen(
            [python, str(script), "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **env),
            start_new_session=True,  # its own process group: one killpg ends the engine and its workers
        )
    except OSError as exc:  # not executable, not a program (a text file), gone since it was checked
        raise DependencyError(
            f"{python} (the Python that runs {engine}) cannot be run: {exc.strerror or exc}"
        ) from None
    with started as process:
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
        stderr = err.decode("utf-8", "replace")
        own = _own_error(stderr, script.stem)
        if own is not None:  # the probe ran and refused the request, saying why
            raise UsageError(own)
        raise DependencyError(_failure(stderr, process.returncode, python, engine, script.name))
    try:
        result: dict[str, Any] = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UsageError(f"{script.name} printed no JSON result (KVCALC_DEBUG=1 shows {engine}'s traceback)") from None
    return result


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _own_error(stderr: str, name: str) -> str | None:
    """The child's own last ``<name>: error:`` line: a request it ran and refused."""
    mine = [line.strip() for line in stderr.splitlines() if line.strip().startswith(f"{name}: error:")]
    return _printable(mine[-1]) if mine else None


def _failure(stderr: str, status: int, python: str, engine: str, script: str) -> str:
    """A child that ended without a result or a refusal of its own: it could not start, import the
    engine, or run it. The message names the Python that was run, its exit status (a signal when
    killed by one) and the last line it wrote on stderr, if any."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    ended = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
    last = f": {_printable(lines[-1])}" if lines else " and wrote nothing on stderr"
    return (f"{python} (the Python that runs {engine}) failed to start {engine} or to import it: running {script} "
            f"it {ended}{last}")  # fmt: skip


def _printable(line: str) -> str:
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


@dataclass(frozen=True)
class EngineProbe:
    """A real engine's figures beside kvcalc's (the vLLM and SGLang probes): ``checks`` are
    objects with ``what``, ``kvcalc``, ``match`` and the engine's value under ``engine_key``, which
    names it in the JSON too. Subclasses give the title."""

    model: str
    engine: str  # the kvcalc engine the result was compared under (vllm@0.32.0, sglang@0.5.23)
    request: dict[str, Any]
    result: dict[str, Any]
    checks: tuple[Any, ...]
    notes: tuple[str, ...] = field(default=())
    engine_key: ClassVar[str] = ""
    engine_label: ClassVar[str] = ""

    @property
    def match(self) -> bool:
        return all(c.match for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        key = self.engine_key
        return {
            "model": self.model,
            "engine": self.engine,
            "match": self.match,
            "checks": [
                {"what": c.what, key: getattr(c, key), "kvcalc": c.kvcalc, "match": c.match} for c in self.checks
            ],
            "request": {k: v for k, v in self.request.items() if k != "config"},
            "result": self.result,
            "notes": list(self.notes),
        }

    def describe(self) -> list[Item]:
        return [*self.lines(), *(Remark(note) for note in dict.fromkeys(self.notes))]

    def title(self) -> list[str]:
        raise NotImplementedError

    def lines(self) -> list[str]:
        rows = [(c.what, getattr(c, self.engine_key), c.kvcalc, c.match) for c in self.checks]
        return [*self.title(), *check_rows(self.engine_label, rows)]
