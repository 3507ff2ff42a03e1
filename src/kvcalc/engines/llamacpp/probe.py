"""``kvcalc probe MODEL --engine llama.cpp``: what the real llama.cpp allocates for a model's KV cache.

The probe writes a GGUF holding the metadata convert_hf_to_gguf.py would write for the model's
llama.cpp architecture (layers, heads, KV heads, K and V head dims, sliding window or its absence,
MLA latent dims) with a tiny vocabulary and feed-forward, and no tensor data: llama.cpp's own
``llama_model_init_from_user`` creates the architecture's tensors from that metadata (left
unset: no token is ever decoded, a context is only created). For a GGUF file as MODEL it writes
the file's own metadata instead (``file_plan``: every key with its own value type, no tokenizer),
so that llama.cpp, not kvcalc's reading of the header, decides the geometry. It then creates real llama.cpp
contexts (``llama_init_from_model``) with the user's n_ctx, sequences, unified cache, n_batch,
n_ubatch, K/V types and swa_full, and reads what llama.cpp logs as it allocates each KV cache
(``llama_kv_cache: size = ... (N cells, L layers, S/T seqs), K (type): ..., V (type): ...``,
src/llama-kv-cache.cpp) and the per-layer K/V widths it loaded (``print_info: n_embd_k_gqa``).
Recurrent and hybrid models (Mamba, Mamba-2, Jamba, Granite-4.0-H, LFM2, Qwen3-Next, Nemotron-H,
Falcon-H1) also get a recurrent memory: ``llama_memory_recurrent: size = ... (N cells, L layers, S
seqs Q rs_seq), R (f32): ..., S (f32): ..., P (f32): ...`` (src/llama-memory-recurrent.cpp), whose
R (conv history) and S (SSM / delta-rule state) rows are rebuilt from the SSM sizes print_info
prints (or lfm2's shortconv.l_cache) and set beside kvcalc's state bytes, apart from the K/V.
Sparse-attention models (deepseek32, glm-dsa: llama_kv_cache_dsa; minimax-m3: llama_kv_cache_msa)
get a second llama_kv_cache for the indexer's keys, logged after "creating indexer KV cache": its
rows (one key of indexer.key_length; for a model that is not MLA also one V head) are rebuilt and
set beside kvcalc's indexer groups in a row of their own, with the layers each places them in.
The bytes are rebuilt from those figures with llama.cpp's own ``ggml_row_size`` and must print as
llama.cpp's MiB figures do, to the last digit.

The GGUF plans are written by kvcalc.engines.llamacpp.probe_plans. llama.cpp runs in a child process
(``python -m kvcalc.engines.llamacpp.probe_child REQUEST.json``; probe_child also reads its log), so an
abort inside it cannot take kvcalc down, and a time-out kills it. This module starts the child and sets
its figures beside the estimate (``compare``, ``probe_json``, ``probe_lines``), and re-exports the other
two modules' names: it is the probe's one import path. llama_cpp (``pip install 'kvcalc[llamacpp]'``)
and gguf are imported only in the child and in ``write_gguf``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.llamacpp.probe_child import (
    _ASSERT_LINE,
    _KV_LAYER_LINE,
    _RS_LAYER_LINE,
    _SIZE_LINE,
    _context_result,
    _per_layer,
    _recurrent_rows,
    kv_layers,
    main,
    recurrent_layers,
    run_request,
)
from kvcalc.engines.llamacpp.probe_plans import (
    INSTALL_HINT,
    TINY_EMBD,
    TINY_EXPERTS,
    TINY_FF,
    TINY_VOCAB,
    VALUE_TYPES,
    GgufPlan,
    LlamaCppMissing,
    LlamaCppProbeError,
    file_plan,
    gguf_plan,
    write_gguf,
)
from kvcalc.engines.probing import Item, Remark, Table
from kvcalc.errors import UsageError
from kvcalc.spec import Kind, ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate

# With the names of probe_plans and probe_child it re-exports (the private ones for the tests that
# read llama.cpp's log lines and layer lists).
__all__ = [
    "ALLOCATE_LIMIT",
    "CONV",
    "DEFAULT_TIMEOUT",
    "GGML_TYPES",
    "INSTALL_HINT",
    "PLE",
    "PLE_NOTE",
    "STATE",
    "TINY_EMBD",
    "TINY_EXPERTS",
    "TINY_FF",
    "TINY_VOCAB",
    "VALUE_TYPES",
    "_KV_LAYER_LINE",
    "_RS_LAYER_LINE",
    "_SIZE_LINE",
    "GgufPlan",
    "GroupCheck",
    "LlamaCppMissing",
    "LlamaCppProbe",
    "LlamaCppProbeError",
    "_context_result",
    "_layer_list",
    "_per_layer",
    "_recurrent_rows",
    "compare",
    "context_request",
    "file_plan",
    "gguf_plan",
    "kv_layers",
    "llama_cpp_available",
    "main",
    "measure",
    "measure_file",
    "probe_json",
    "probe_lines",
    "recurrent_layers",
    "run_request",
    "version_note",
    "write_gguf",
]

# ggml type names as llama.cpp logs them, from kvcalc's names.
GGML_TYPES = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
              "q5_0": "q5_0", "q5_1": "q5_1", "iq4_nl": "iq4_nl"}  # fmt: skip

DEFAULT_TIMEOUT = 600
# Caches up to this size are allocated for real; larger ones are sized by llama.cpp with no_alloc.
ALLOCATE_LIMIT = 2**30


# --- the comparison ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupCheck:
    """One of llama.cpp's memories beside kvcalc's groups of the same layers (layers, cells x
    streams per layer, bytes): ``full`` (its base KV cache), ``swa`` (the SWA cache of
    llama_kv_cache_iswa: sliding or chunked layers), ``indexer`` (the sparse-attention indexer's key
    cache of llama_kv_cache_dsa / _msa, beside kvcalc's IndexerCache groups; ``measured_at`` and
    ``estimated_at``, the layers each puts it in, must agree), or the two buffers of its recurrent memory
    (llama_memory_recurrent): ``conv (R)``, the conv history rows, and ``state (S)``, the SSM /
    delta-rule state rows, one row per sequence; ``ple (P)`` only when llama.cpp made a PLE buffer,
    which kvcalc does not model (so it fails)."""

    side: str
    estimated_layers: int
    estimated_cells: int
    estimated_bytes: int
    measured_layers: int
    measured_cells: int
    measured_bytes: int
    streams: int = 1
    prints_as_logged: bool = True
    note: str = ""
    measured_at: tuple[int, ...] | None = None
    estimated_at: tuple[int, ...] | None = None

    @property
    def match(self) -> bool:
        return (
            self.prints_as_logged
            and self.measured_at == self.estimated_at
            and self.estimated_layers == self.measured_layers
            and self.estimated_cells == self.measured_cells
            and self.estimated_bytes == self.measured_bytes
        )


def context_request(engine: Any, tokens: int, batch: int, k_type: str, v_type: str) -> dict[str, Any]:
    """The llama_context_params of ``batch`` sequences of ``tokens`` under a LlamaCpp engine's
    settings: n_ctx = B x T (llama.cpp pads it), n_seq_max = B. The probe runs the llama.cpp of
    llama-cpp-python RULES_VERSION (0c1e570, b11312): an engine with another build's rules
    (``llama.cpp@b4905``) cannot be measured by it, a one-line UsageError."""
    from kvcalc.engines.llamacpp import RULES_VERSION
    from kvcalc.engines.llamacpp.releases import CURRENT

    if engine.build != CURRENT:
        raise UsageError(
            f"kvcalc probe runs llama-cpp-python {RULES_VERSION}'s llama.cpp (b{CURRENT}), not b{engine.build}: "
            f"probe {engine.name} without '@b{engine.build}'",
            param="engine",
        )
    return {
        "n_ctx": tokens * batch, "n_seq_max": batch, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
        "kv_unified": engine.unified, "swa_full": engine.swa_full,
        "type_k": GGML_TYPES[k_type], "type_v": GGML_TYPES[v_type],
    }  # fmt: skip


# The recurrent memory's buffers as the probe's rows name them.
CONV, STATE, PLE = "conv (R)", "state (S)", "ple (P)"
# Why llama.cpp's P buffer is not in kvcalc's estimate (src/llama-memory-recurrent.cpp and
# src/models/qwen4exp.cpp, 0c1e570).
PLE_NOTE = (
    "llama.cpp's recurrent memory also logs P, the PLE conv history (cache_ple_r_l*), made only for the "
    "PLE layer of a qwen4exp file (ple.* keys); kvcalc does not model it"
)


def compare(estimate: Estimate, measured: dict[str, Any]) -> tuple[GroupCheck, ...]:
    """kvcalc's groups (an Estimate under llama.cpp's rules) side by side with llama.cpp's caches
    and recurrent memory."""
    estimated: dict[str, list[int]] = {}
    states = []
    for g in estimate.groups:
        if g.cache.is_state:
            states.append(g)
            continue
        if not g.cache.caches_tokens:
            continue  # KV-sharing layers (Gemma 3n) read another layer's cache: llama.cpp makes none
        side = "swa" if g.cache.token_bound is not None and g.cache.tokens == "decoder" else "full"
        if g.kind is Kind.INDEXER:  # llama.cpp keeps the indexer's keys in a cache of their own
            side = "indexer"
        layers, cells, total = estimated.get(side, [0, 0, 0])
        estimated[side] = [layers + g.layers, max(cells, g.slots), total + g.bytes]
    found = {c["side"]: c for c in measured["caches"]}
    if len(found) < len(measured["caches"]):
        sides = ", ".join(c["side"] for c in measured["caches"])
        raise UsageError(f"llama.cpp made more than one KV cache of a kind ({sides}); the probe compares one of each")
    checks = []
    for side in ("full", "swa", "indexer"):
        if side not in estimated and side not in found:
            continue
        e = estimated.get(side, [0, 0, 0])
        c = found.get(side)
        at: dict[str, Any] = {}
        note = ""
        if side == "indexer":
            at = {"measured_at": tuple(sorted(c["held"])) if c and c.get("held") is not None else None,
                  "estimated_at": _indexer_layers(estimate.model)}  # fmt: skip
            note = _indexer_note(c, at["measured_at"], at["estimated_at"])
        checks.append(
            GroupCheck(
                side,
                e[0],
                e[1],
                e[2],
                c["layers"] if c else 0,
                c["cells"] * c["streams"] if c else 0,
                c["k_bytes"] + c["v_bytes"] if c else 0,
                c["streams"] if c else 1,
                c["prints_as_logged"] if c else True,
                note,
                **at,
            )
        )
    return tuple(checks) + _recurrent_checks(states, measured.get("recurrent", []))


def _indexer_layers(spec: ModelSpec) -> tuple[int, ...] | None:
    """The layers kvcalc gives an indexer key cache (its IndexerCache entries' layers), None when
    its entries name no layers (more entries than layers and no entry_layers)."""
    where = spec.entry_layers or (tuple(range(spec.layers)) if len(spec.caches) == spec.layers else ())
    if len(where) != len(spec.caches):
        return None
    return tuple(sorted(where[i] for i, c in enumerate(spec.caches) if c.kind is Kind.INDEXER))


def _indexer_note(
    cache: dict[str, Any] | None, measured: tuple[int, ...] | None, estimated: tuple[int, ...] | None
) -> str:
    """Why an indexer row cannot match, when it is not only its bytes: rows the probe could not
    rebuild, or the layers llama.cpp placed the cache in against kvcalc's."""
    if cache is None:
        return "llama.cpp made no indexer key cache"
    if not cache.get("rows_known", True):
        return "no indexer.key_length in the model llama.cpp loaded: the probe cannot rebuild the indexer rows"
    if measured is None or estimated is None:
        return "the layers of the indexer cache are not known on both sides (llama.cpp's layer list or kvcalc's)"
    if measured != estimated:
        return f"llama.cpp put the indexer keys in layers {list(measured)}, kvcalc in {list(estimated)}"
    return ""


def _recurrent_checks(states: list[Any], memories: list[dict[str, Any]]) -> tuple[GroupCheck, ...]:
    """kvcalc's state groups beside llama.cpp's recurrent memory, R and S apart. kvcalc's R is its
    llama.cpp engine rule (kvcalc.engines.llamacpp ``state_parts``: kernel - 1 conv columns, f32) over
    the group's layers and sequences; its S the rest of the group's bytes, so R + S is the estimate."""
    from kvcalc.engines.llamacpp.rules import LlamaCpp

    if not states and not memories:
        return ()
    layers = sum(g.layers for g in states)
    seqs = conv = 0
    for g in states:
        per_sequence = g.layers * g.state_bytes
        seqs = max(seqs, g.bytes // per_sequence if per_sequence else 0)
        (elements, dtype), _ = LlamaCpp().state_parts(g.cache)
        size = dtype.bytes_per_element if dtype is not None else 0  # llama.cpp's rule names f32 for both
        conv += g.layers * (g.bytes // per_sequence if per_sequence else 0) * elements * size
    total = sum(g.bytes for g in states)
    m = memories[0] if len(memories) == 1 else None
    if len(memories) > 1:  # one recurrent memory a model (llama_memory_hybrid holds one)
        raise UsageError(f"llama.cpp made {len(memories)} recurrent memories; the probe compares one")
    unknown = ""
    if m is not None and not m["rows_known"]:
        unknown = "the probe does not rebuild this architecture's recurrent rows (llama_hparams::n_embd_r / n_embd_s)"
    checks = [
        GroupCheck(CONV, layers, seqs, conv, m["layers"] if m else 0, m["rows"] if m else 0,
                   m["r_bytes"] if m else 0, 1, m["r_prints_as_logged"] if m else True, unknown),
        GroupCheck(STATE, layers, seqs, total - conv, m["layers"] if m else 0, m["rows"] if m else 0,
                   m["s_bytes"] if m else 0, 1, m["s_prints_as_logged"] if m else True, unknown),
    ]  # fmt: skip
    if m is not None and m["p_mib"] != "0.00":
        # Not rebuilt (its row is not among print_info's figures): it fails, with its MiB in the note.
        why = f"llama.cpp's P ({m['p_type']}): {m['p_mib']} MiB, not in kvcalc's estimate"
        checks.append(GroupCheck(PLE, 0, 0, 0, 1, m["rows"], 0, 1, False, why))
    return tuple(checks)


@dataclass(frozen=True)
class LlamaCppProbe:
    """A probe's request, what llama.cpp allocated and the estimate beside it."""

    name: str
    estimate: Estimate
    request: dict[str, Any]
    checks: tuple[GroupCheck, ...]
    cparams: dict[str, int]
    notes: tuple[str, ...] = ()
    allocated: bool = True

    @property
    def measured_bytes(self) -> int:
        return sum(c.measured_bytes for c in self.checks)

    @property
    def match(self) -> bool:
        return all(c.match for c in self.checks) and self.measured_bytes == self.estimate.total_bytes

    def as_json(self) -> dict[str, Any]:
        return probe_json(self)

    def describe(self) -> list[Item]:
        return probe_lines(self)

    @property
    def check_notes(self) -> tuple[str, ...]:
        """What the rows leave out or could not rebuild: each row's note, and, beside a recurrent
        memory with no P, what P is and why it is not in the estimate."""
        notes = [f"{c.side}: {c.note}" for c in self.checks if c.note]
        sides = {c.side for c in self.checks}
        if CONV in sides and PLE not in sides:
            notes.append(f"P 0 bytes: {PLE_NOTE}")
        return tuple(notes)


def probe_json(report: LlamaCppProbe) -> dict[str, Any]:
    return {
        "model": report.name,
        "engine": report.estimate.engine,
        "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36)",
        "request": report.request,
        "llama_context": report.cparams,
        "groups": [
            {
                "group": c.side,
                "layers": {
                    "measured": c.measured_layers,
                    "estimated": c.estimated_layers,
                    **({"measured_at": list(c.measured_at)} if c.measured_at is not None else {}),
                    **({"estimated_at": list(c.estimated_at)} if c.estimated_at is not None else {}),
                },
                "cells": {"measured": c.measured_cells, "estimated": c.estimated_cells, "streams": c.streams},
                "bytes": {"measured": c.measured_bytes, "estimated": c.estimated_bytes},
                "prints_as_logged": c.prints_as_logged,
                "match": c.match,
                **({"note": c.note} if c.note else {}),
            }
            for c in report.checks
        ],
        "measured_bytes": report.measured_bytes,
        "estimated_bytes": report.estimate.total_bytes,
        "match": report.match,
        "allocated": report.allocated,
        "notes": [*report.check_notes, *report.notes],
    }


def probe_lines(report: LlamaCppProbe) -> list[Item]:
    """The probe's answer as items a view draws (kvcalc.engines.probing): the headline and legend
    as lines, the layer groups as a table, the notes as remarks."""
    r = report.request
    streams = "one unified stream" if r["kv_unified"] else f"{r['n_seq_max']} streams"
    head = (
        f"llama.cpp 0c1e570 allocated for {report.name}: n_ctx {r['n_ctx']:,} asked ({r['n_seq_max']} x "
        f"{r['n_ctx'] // r['n_seq_max']:,}), {streams}, K {r['type_k']}, V {r['type_v']}, n_batch {r['n_batch']}, "
        f"n_ubatch {r['n_ubatch']}, swa_full {'on' if r['swa_full'] else 'off'}"
    )
    headers = ("group", "layers", "cells (all streams)", "llama.cpp bytes", "kvcalc bytes", "match")
    rows = [
        (c.side, f"{c.measured_layers} / {c.estimated_layers}", f"{c.measured_cells:,} / {c.estimated_cells:,}",
         f"{c.measured_bytes:,}", f"{c.estimated_bytes:,}", "yes" if c.match else "NO")
        for c in report.checks
    ]  # fmt: skip
    rows.append(("total", "", "", f"{report.measured_bytes:,}", f"{report.estimate.total_bytes:,}", ""))
    verdict = "matches byte for byte" if report.match else "DIFFERS from llama.cpp"
    legend = "layers and cells: llama.cpp / kvcalc"
    if any(c.side in (CONV, STATE, PLE) for c in report.checks):
        legend += "; recurrent memory: R (conv history) and S (state), one row (cell) per sequence"
    for c in report.checks:
        if c.side == "indexer":  # which layers, beside the counts
            where, mine = _layer_list(c.measured_at), _layer_list(c.estimated_at)
            legend += f"; indexer: the sparse-attention indexer's key cache, in layers {where} / {mine}"
    context = ", ".join(f"{k} {v:,}" for k, v in report.cparams.items())
    blocks: list[Item] = [head, legend, Table("", headers, tuple(rows), left=("group", "match")),
                         f"kvcalc estimate --engine {report.estimate.engine} {verdict}",
                         f"llama.cpp's context: {context}"]  # fmt: skip
    if not report.allocated:
        blocks.append(
            f"cache or weights over {ALLOCATE_LIMIT // 2**30} GiB (or unbounded): llama.cpp sized its tensors with "
            "no_alloc (as it would allocate them) without allocating them"
        )
    return blocks + [Remark(n) for n in (*report.check_notes, *report.notes)]


def _layer_list(layers: tuple[int, ...] | None) -> str:
    """Layer numbers in runs: ``0-2, 6, 10``; ``?`` when not known."""
    if layers is None:
        return "?"
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][1] + 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


# --- running the child --------------------------------------------------------------------------------------


def llama_cpp_available() -> bool:
    from importlib.util import find_spec

    return find_spec("llama_cpp") is not None and find_spec("gguf") is not None


def measure(
    plan: GgufPlan, contexts: list[dict[str, Any]], *, timeout: float = DEFAULT_TIMEOUT, no_alloc: bool = False
) -> dict[str, Any]:
    """Write ``plan``'s GGUF and create ``contexts`` with llama.cpp in a child process. ``no_alloc``
    (llama_model_params.no_alloc): llama.cpp sizes every tensor as it would allocate it but
    allocates none, for caches larger than this machine's memory."""
    if not llama_cpp_available():
        raise LlamaCppMissing(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="kvcalc-llamacpp-") as tmp:
        path = Path(tmp) / "model.gguf"
        write_gguf(plan, path)
        return measure_file(path, contexts, timeout=timeout, no_alloc=no_alloc)


def measure_file(
    path: Path, contexts: list[dict[str, Any]], *, timeout: float = DEFAULT_TIMEOUT, no_alloc: bool = False
) -> dict[str, Any]:
    """Create ``contexts`` with llama.cpp from the GGUF at ``path`` in a child process (see ``measure``)."""
    if not llama_cpp_available():
        raise LlamaCppMissing(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="kvcalc-llamacpp-") as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"gguf": str(path), "contexts": contexts, "no_alloc": no_alloc}))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "kvcalc.engines.llamacpp.probe_child", str(request)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        except subprocess.TimeoutExpired:  # subprocess.run kills the child before raising
            raise LlamaCppProbeError(f"llama.cpp did not finish within {timeout:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()
        asserted = _ASSERT_LINE.findall(done.stderr or "")
        why = f"{asserted[-1][1]} ({asserted[-1][0]})" if asserted else (tail[-1] if tail else "no output")
        raise LlamaCppProbeError(f"llama.cpp failed (exit {done.returncode}): {why}")
    answer: dict[str, Any] = json.loads(lines[-1])
    if "error" in answer:
        raise LlamaCppProbeError(str(answer["error"]))
    return answer


def version_note(answer: dict[str, Any]) -> str | None:
    """One line when the llama-cpp-python the child ran is not the release these rules were read from."""
    from kvcalc.engines.base import version_warning
    from kvcalc.engines.llamacpp import RULES_VERSION

    return version_warning("llama-cpp-python", answer.get("llama_cpp_version"), RULES_VERSION)


if __name__ == "__main__":  # the child's entry point under its older name
    sys.exit(main(sys.argv))
