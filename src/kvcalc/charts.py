"""Charts saved to files with matplotlib (the optional ``plot`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.calc.compare import Comparison
from kvcalc.errors import DependencyError, SourceError, UsageError

if TYPE_CHECKING:
    from kvcalc.calc.simulate import Done, Sample
    from kvcalc.calc.speed import SweepRow

_FORMATS = {".png": "png", ".svg": "svg"}


def _pyplot(path: str) -> tuple[Any, Path, str]:
    """matplotlib's pyplot (files only), the target and its format; a DependencyError without matplotlib."""
    target = Path(path)
    fmt = _FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise UsageError(f"--plot needs a .png or .svg file name, got {path!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise DependencyError(
            "--plot needs matplotlib: pip install matplotlib (in a kvcalc checkout: pip install '.[plot]')"
        ) from None
    return plt, target, fmt


def _save(fig: Any, target: Path, fmt: str, path: str) -> None:
    """Write the chart whole or not at all: into a hidden file beside the target, renamed over it
    once complete, so an interrupt (Ctrl-C) or a full disk leaves no half-written chart behind."""
    import os
    import tempfile

    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            fig.savefig(out, format=fmt)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _umask() -> int:
    """The process's umask (read by setting it and setting it back): a chart gets the mode a
    plain open() would have given it, not mkstemp's 0600."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_speed_plot(rows: Sequence[SweepRow], path: str, title: str) -> None:
    """The batch sweep of kvcalc speed: per-request TPOT (ms) and the batch's output tokens/s
    against batch size, side by side: what a request waits and what the GPU delivers."""
    plt, target, fmt = _pyplot(path)
    fig, (wait, rate) = plt.subplots(1, 2, figsize=(10, 4.5), dpi=120)
    try:
        batches = [r.batch for r in rows]
        wait.plot(batches, [r.decode.mean_s * 1e3 for r in rows], marker="o")
        rate.plot(batches, [r.throughput for r in rows], marker="o", color="tab:green")
        for ax, label in ((wait, "TPOT per request, mean (ms)"), (rate, "output tokens/s of the batch")):
            if len(batches) > 1 and max(batches) / min(batches) >= 8:
                ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [f"{b:,}" for b in batches])
            ax.minorticks_off()
            ax.set_xlabel("batch (sequences decoding together)")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        fig.suptitle(title)
        fig.tight_layout()
        _save(fig, target, fmt, path)
    finally:
        plt.close(fig)


def save_plot(comp: Comparison, path: str) -> None:
    """Bytes (GiB) against context length, one line per row of the comparison."""
    plt, target, fmt = _pyplot(path)

    series: dict[str, list[tuple[int, int]]] = {}
    for r in comp.rows:
        label = r.candidate.label + (f" {r.kv_dtype.name}" if len(comp.dtypes) > 1 else "")
        series.setdefault(label, []).append((r.tokens, r.total_bytes))
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    try:
        for label, points in series.items():
            xs = [t for t, _ in points]
            ys = [b / 2**30 for _, b in points]
            ax.plot(xs, ys, marker="o", label=label)
        if len(comp.tokens) > 1 and max(comp.tokens) / min(comp.tokens) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(list(comp.tokens), [_tokens_label(t) for t in comp.tokens])
        ax.minorticks_off()
        ax.set_xlabel("context length (tokens per sequence)")
        ax.set_ylabel("KV cache (GiB = 2^30 bytes)")
        what = f"{comp.rows[0].candidate.spec.name} attention variants" if comp.mode == "variants" else "models"
        ax.set_title(f"KV cache of {what}, batch {comp.batch}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        _save(fig, target, fmt, path)
    finally:
        plt.close(fig)


def _tokens_label(tokens: int) -> str:
    """``32768`` -> ``32k``, the way context lengths are quoted (k = 1024)."""
    for suffix, scale in (("m", 2**20), ("k", 2**10)):
        if tokens % scale == 0:
            return f"{tokens // scale}{suffix}"
    return f"{tokens:,}"


def save_simulation_plot(samples: Sequence[Sample], pool_units: int, done: Sequence[Done], path: str,
                         title: str) -> None:  # fmt: skip
    """A simulated run over time: the pool in use (%), requests running and waiting, preemptions so
    far, and each request's TTFT at its arrival: what the load does to the engine and to a user."""
    plt, target, fmt = _pyplot(path)
    fig, (pool, queue, ttft) = plt.subplots(3, 1, figsize=(10, 8), dpi=120, sharex=True)
    try:
        times = [s.time_s for s in samples]
        pool.plot(times, [100 * s.used_units / max(pool_units, 1) for s in samples], color="tab:purple")
        pool.set_ylabel("KV pool used (%)")
        queue.plot(times, [s.running for s in samples], label="running")
        queue.plot(times, [s.waiting for s in samples], label="waiting", color="tab:orange")
        queue.plot(times, [s.preemptions for s in samples], label="preemptions so far", color="tab:red")
        queue.set_ylabel("requests")
        queue.legend(loc="upper left")
        ttft.scatter([d.request.arrival_s for d in done], [d.ttft_s * 1e3 for d in done], s=4)
        ttft.set_ylabel("TTFT (ms)")
        ttft.set_xlabel("time (s)")
        for ax in (pool, queue, ttft):
            ax.grid(True, alpha=0.3)
        fig.suptitle(title)
        fig.tight_layout()
        _save(fig, target, fmt, path)
    finally:
        plt.close(fig)
