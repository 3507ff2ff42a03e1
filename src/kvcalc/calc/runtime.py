"""What an engine takes from a GPU besides weights and KV cache: activations, CUDA graphs, the
CUDA context and communication buffers, each a term with its inputs and the range it may fall in.

``fit`` subtracts these terms to find the KV budget. Each engine decides differently how much of
the GPU it claims (vLLM: total x gpu_memory_utilization; SGLang: free memory x
mem_fraction_static; llama.cpp: whatever is free), so a model here returns both the share it
claims and the terms it takes out of that share. A term the engine's source does not determine
(the CUDA context's size, allocator slack) is an assumption with a range, marked as such; a user
who knows better gives ``--overhead``. Pure: integers in, integers out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.dims import ModelDims
    from kvcalc.gpus import GPU

GIB = 2**30
MIB = 2**20


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RuntimeTerm:
    """One thing the runtime takes per GPU: ``bytes`` the central figure, ``low``..``high`` the
    range it may fall in, ``detail`` the arithmetic with its inputs. ``derived`` is False for an
    assumption the engine's source does not settle."""

    label: str
    bytes: int
    detail: str
    low: int | None = None
    high: int | None = None
    derived: bool = True

    @property
    def range(self) -> tuple[int, int]:
        return (self.bytes if self.low is None else self.low, self.bytes if self.high is None else self.high)


@dataclass(frozen=True)
class Runtime:
    """The terms one engine subtracts per GPU, and the share of memory it claims first:
    ``claimed = memory x share`` (vLLM's gpu_memory_utilization; SGLang's mem_fraction_static of
    the memory free at start, after ``before_share`` is gone)."""

    engine: str
    terms: tuple[RuntimeTerm, ...]
    share: Fraction
    share_label: str
    before_share: tuple[RuntimeTerm, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    @property
    def low(self) -> int:
        return sum(t.range[0] for t in self.terms)

    @property
    def high(self) -> int:
        return sum(t.range[1] for t in self.terms)


def given_runtime(
    overhead: int, engine: str, share: Fraction, share_label: str, *, default: str | None = None
) -> Runtime:
    """The user's --overhead, taken as it is; or, with ``default`` (why it is assumed), the figure
    assumed when none was given, said to be a default and whose."""
    if default is None:
        term = RuntimeTerm("activations and runtime (--overhead)", overhead, f"{overhead:,} B as given")
    else:
        detail = f"{overhead:,} B assumed by default: {default}"
        term = RuntimeTerm("activations and runtime (assumed)", overhead, detail, derived=False)
    return Runtime(engine, (term,), share, share_label)


@dataclass(frozen=True)
class RuntimeRequest:
    """What an engine's runtime model reads: the GPU's bytes (and its preset, when one was named),
    the layout, the share of memory asked for (None: the engine's default), the model's widths
    (None: its config gives none), its run dtype's bytes per element, whether it is multimodal or
    keeps recurrent state, and the context llama.cpp would create (cells and sequences)."""

    gpu_bytes: int
    gpu: GPU | None
    tp: int
    pp: int
    share: Fraction | None
    dims: ModelDims | None
    dtype_bytes: int
    multimodal: bool
    recurrent: bool
    n_ctx: int
    n_seq: int
    quantized_kv: bool
