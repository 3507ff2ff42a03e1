"""estimate_requests: a request mix (a list of requests, or a CSV / JSON lines file streamed
once), summarised by its distinct lengths."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kvcalc.api._models import DTypeLike, Model, OnFetch, open_model
from kvcalc.api._serving import KnobValue, Layout, Serving, _merge, _past_limit, as_layout, as_serving, resolve_serving
from kvcalc.calc.estimate import Workload
from kvcalc.errors import SourceError, UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.requests import Request, RequestSummary
    from kvcalc.engines import Engine

_T = TypeVar("_T")


def read_requests(path: str | Path) -> list[Request]:
    """A request-mix file's requests in file order: CSV (prompt,output or tokens columns) or JSON
    lines, a regular file. This holds every request; ``estimate_requests`` given the path streams
    the file instead, holding only its distinct lengths."""
    from kvcalc.calc.requests import parse_requests

    return _read(path, parse_requests)


def estimate_requests(
    model: str | ModelSpec | Model,
    requests: Sequence[Request] | str | Path,
    *,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    engine: str | Engine | None = None,
    options: Mapping[str, KnobValue] | None = None,
    serving: Serving | None = None,
    tp: int = 1,
    pp: int = 1,
    layout: Layout | None = None,
    shared_prefix: int = 0,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> RequestSummary:
    """A request mix (a list of ``Request``, or a CSV/JSONL file path, read in one pass): each
    distinct length's cache (one request of it), percentiles over the requests, and the total with
    every request resident at once."""
    from kvcalc.calc.requests import mix_of, parse_lengths, summarize_requests

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    mix = _read(requests, parse_lengths) if isinstance(requests, str | Path) else mix_of(requests)
    asked = as_serving(serving, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, options=options)
    chosen = resolve_serving(spec, asked)
    if layout is not None and layout.dp != 1:
        raise UsageError("a request mix is sized on one replica: layout's dp changes nothing", param="layout")
    got_tp, pp, _ = as_layout(layout, tp=tp, pp=pp, dp=1)
    tp = got_tp if got_tp is not None else 1
    longest = max(mix.counts) if mix.counts else 1
    workload = Workload(
        tokens=longest, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, residual_tokens=chosen.residual_tokens,
        shared_prefix=min(shared_prefix, longest), tp=tp, pp=pp,
    )  # fmt: skip
    summary = summarize_requests(spec, workload, chosen.engine, mix)
    limit = spec.max_context
    past = sum(n for t, n in mix.counts.items() if t > limit) if limit is not None else 0
    limit_notes = (
        _past_limit(spec, longest, f"{past:,} request(s), the longest ") if past and not spec.is_encoder_decoder else []
    )
    return replace(summary, notes=_merge(spec.notes, chosen.notes, summary.notes, limit_notes))


def _read(path: str | Path, parse: Callable[..., _T]) -> _T:
    """``parse`` over the file at ``path``, streamed; every failure is a SourceError of ``lengths``."""
    from kvcalc.inputs.files import open_regular_file

    # A file that cannot be read or parsed is a failure (exit 1), as an unreadable MODEL is.
    try:
        with open_regular_file(Path(path), what="lengths file") as stream:
            return parse(stream, name=f"lengths file {path}")
    except SourceError as exc:
        raise SourceError(str(exc), param="lengths") from None
