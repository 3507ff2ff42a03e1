"""estimate_requests: a request mix (a list of requests, or a CSV / JSON lines file streamed
once), summarised by its distinct lengths."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from kvcalc import checks
from kvcalc.api._models import DTypeLike, ModelArg, OnFetch, open_model
from kvcalc.api._serving import (
    KnobValue,
    Layout,
    Serving,
    _merge,
    _past_limit,
    as_layout,
    as_serving,
    refuse_idle_knobs,
    resolve_serving,
)
from kvcalc.calc.estimate import Workload
from kvcalc.errors import SourceError, UsageError

if TYPE_CHECKING:
    from kvcalc.calc.requests import Request, RequestSummary
    from kvcalc.engines import Engine
    from kvcalc.inputs.traces import Trace

_T = TypeVar("_T")


def read_requests(path: str | os.PathLike[str]) -> list[Request]:
    """A request-mix file's requests in file order: CSV (prompt,output or tokens columns) or JSON
    lines, a regular file. This holds every request; ``estimate_requests`` given the path streams
    the file instead, holding only its distinct lengths."""
    from kvcalc.calc.requests import parse_requests

    return _read(_path(path, "path"), parse_requests)


def read_trace(path: str | os.PathLike[str], *, limit: int | None = None) -> Trace | None:
    """A request trace with arrival times (``Load(trace=trace.requests)``): kvcalc's CSV
    ``arrival,prompt,output`` or JSON lines ``{"arrival", "prompt", "output"}`` (seconds), an Azure
    LLM inference trace, BurstGPT or a Mooncake trace, told by its header or first line's keys
    (``kvcalc.inputs.traces``); arrivals in seconds from the first request, ``notes`` naming what
    the load does not take (failed rows, Mooncake's shared blocks). ``limit``: the file's first
    ``limit`` requests only. None: the file has no arrival times (a mix for ``read_requests``)."""
    from functools import partial

    from kvcalc.inputs.traces import read_trace as parse

    if limit is not None:
        limit = checks.count(limit, "limit")
    return _read(_path(path, "path"), partial(parse, limit=limit))


def estimate_requests(
    model: ModelArg,
    requests: Sequence[Request] | str | os.PathLike[str],
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
    every request resident at once. A mix of no requests is refused: it has no cache to size."""
    from kvcalc.calc.requests import Request, mix_of, parse_lengths, summarize_requests

    shared_prefix = checks.count(shared_prefix, "shared_prefix", minimum=0)
    if shared_prefix:
        # Each length of a mix is sized as one request alone, where a prefix shared with nothing
        # saves nothing: taking it would print the figures without it as if it were applied.
        raise UsageError(
            "shared_prefix is not modelled for a request mix (each length is sized as one request alone): give "
            "tokens and batch for a batch that shares a prefix",
            param=("shared_prefix", "tokens", "batch"),
        )
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    if isinstance(requests, str | os.PathLike):
        mix = _read(_path(requests, "requests"), parse_lengths)  # a file of no requests is refused
    else:
        if not isinstance(requests, Sequence) or isinstance(requests, bytes):
            raise UsageError(f"requests must be a list of kvcalc.Request or a file's path, got "
                             f"{checks.shown(requests)}", param="requests")  # fmt: skip
        for request in requests:
            if not isinstance(request, Request):
                raise UsageError(f"requests must hold kvcalc.Request(prompt=..., output=...) items, got "
                                 f"{checks.shown(request)}", param="requests")  # fmt: skip
        if not requests:
            raise UsageError("requests is empty: a mix of no requests has no cache to size", param="requests")
        mix = mix_of(cast("Sequence[Request]", requests))  # not a path: narrowed above
    asked = as_serving(serving, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, options=options)
    chosen = resolve_serving(spec, asked)
    refuse_idle_knobs(spec, chosen.engine, asked.options)
    checks.instance(layout, "layout", Layout, "a kvcalc.Layout or None")
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


def _path(path: object, param: str) -> Path:
    """A file's path as the API takes it: a str or any os.PathLike."""
    if not isinstance(path, str | os.PathLike):
        raise UsageError(f"{param} must be a file's path (a str or a pathlib.Path), got {checks.shown(path)}",
                         param=param)  # fmt: skip
    return Path(path)


def _read(path: Path, parse: Callable[..., _T]) -> _T:
    """``parse`` over the file at ``path``, streamed; every failure is a SourceError of ``lengths``."""
    from kvcalc.inputs.files import open_regular_file

    # A file that cannot be read or parsed is a failure (exit 1), as an unreadable MODEL is.
    try:
        with open_regular_file(path, what="lengths file") as stream:
            return parse(stream, name=f"lengths file {path}")
    except SourceError as exc:
        raise SourceError(str(exc), param="lengths") from None
