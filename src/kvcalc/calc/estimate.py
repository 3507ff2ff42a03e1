"""ModelSpec x Workload x Engine -> Estimate: the one place where cache bytes are computed.

Bytes are Python integers throughout. Per layer, on one GPU, the cache is::

    slots x (row_bytes(K) + row_bytes(V)) + batch x state_bytes

where ``slots`` are the token slots the engine keeps for the whole batch (``B x T`` in the plain
case, less windows, shared prefixes, plus block rounding), a K row is ``H_kv x d_k`` elements
(``H_kv`` per tensor-parallel rank), and ``row_bytes`` adds the quantization metadata of the
format. For plain attention that is the seed formula ``2 x L x B x T x H_kv x d_h x s``; MLA
caches one ``d_c + d_rope`` row and no V; linear-attention and Mamba layers a fixed state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from kvcalc.checks import MAX_PARALLEL, count
from kvcalc.dtypes import DType
from kvcalc.errors import UsageError
from kvcalc.kinds.base import LayerKind
from kvcalc.spec import Kind, LayerCache, ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.contracts import StorageRules

# More image tokens per sequence than any context holds (Llama 3.2 Vision: 6,404 per image).
MAX_IMAGE_TOKENS = 2**32

_T = TypeVar("_T")


@dataclass(frozen=True)
class Workload:
    """What is cached, and where.

    ``batch`` resident sequences of ``tokens`` tokens each, the first ``shared_prefix`` of them
    identical and cached once. ``kv_dtype`` stores K (and V unless ``v_dtype``); with a
    quantized format the newest ``residual_tokens`` stay in the model dtype (transformers'
    QuantizedCache). ``encoder_tokens`` feeds cross-attention; ``images`` of ``image_tokens``
    tokens each (None: the model's own count) feed image cross-attention (Llama 3.2 Vision), none
    by default: a text-only prompt. ``tp`` / ``pp`` / ``dp``: tensor
    and pipeline parallel sizes and data-parallel replicas (the batch is split across replicas).
    """

    tokens: int
    batch: int = 1
    kv_dtype: DType | None = None
    v_dtype: DType | None = None
    encoder_tokens: int | None = None
    state_dtype: DType | None = None
    shared_prefix: int = 0
    images: int = 0
    image_tokens: int | None = None
    residual_tokens: int = 0
    tp: int = 1
    pp: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tokens", "batch", "tp", "pp", "dp"):
            _check_count(name, getattr(self, name), minimum=1)
        if self.encoder_tokens is not None:
            _check_count("encoder_tokens", self.encoder_tokens, minimum=1)
        if self.image_tokens is not None:
            _check_count("image_tokens", self.image_tokens, minimum=1)
        for name in ("shared_prefix", "residual_tokens", "images"):
            _check_count(name, getattr(self, name), minimum=0)
        if self.shared_prefix > self.tokens:
            raise UsageError(f"shared prefix ({self.shared_prefix:,}) is longer than the {self.tokens:,} tokens")
        if self.images * (self.image_tokens or 1) > MAX_IMAGE_TOKENS:
            raise UsageError(f"{self.images:,} images are implausibly many (at most {MAX_IMAGE_TOKENS:,} image tokens)")
        for name in ("tp", "pp", "dp"):
            if getattr(self, name) > MAX_PARALLEL:
                raise UsageError(f"{name} {getattr(self, name):,} is implausibly large (at most {MAX_PARALLEL:,})",
                                 param=name)  # fmt: skip
        if self.dp > self.batch:
            raise UsageError(f"{self.dp} data-parallel replicas need at least {self.dp} sequences")


def _check_count(name: str, value: object, *, minimum: int) -> None:
    count(value, name, minimum=minimum)


@dataclass(frozen=True)
class GroupEstimate:
    """Identical layers and what they hold for the whole workload.

    Per layer and per GPU: ``tokens_kept`` slots per sequence, ``bytes_per_token`` (K + V rows,
    metadata included), ``state_bytes`` per sequence. ``bytes`` and ``metadata_bytes`` are the
    group's totals over every GPU and replica.
    """

    cache: LayerCache
    layers: int
    tokens_kept: int
    bytes_per_token: int
    state_bytes: int
    bytes: int
    dtype: DType
    kv_heads_per_gpu: int | None = None
    metadata_bytes: int = 0
    slots: int = 0
    # Slots per sequence this layer holds for image tokens, whatever the text length (image
    # cross-attention; SGLang's shared token pool gives them to every layer).
    image_slots: int = 0
    # Whether each text token takes a slot in this layer; None: the layer caches decoder tokens.
    grows_with_tokens: bool | None = None
    # A state layer's parts as the engine stores them, per sequence and GPU: (elements, format),
    # in the order of the cache's state_part_names. Their formats may differ (conv bf16, SSM fp32).
    state_parts: tuple[tuple[int, DType], ...] = ()
    # The V rows' format where it differs from K's (``dtype``): llama.cpp's -ctk / -ctv apart.
    v_dtype: DType | None = None
    # Empty layer slots the engine's pool pads a group of this kind with (vLLM's layer groups):
    # ``layers`` counts slots, each costing as one layer of the kind.
    padding: bool = False

    @property
    def own_state_bytes(self) -> int:
        """A state's bytes as its parts are stored, before any page the engine's pool holds it in
        (``state_bytes`` then being the page: vLLM's hybrid layout)."""
        return sum(n * d.bytes_per_element for n, d in self.state_parts) or self.state_bytes

    @property
    def dtype_label(self) -> str:
        """The group's element format, or "mixed" when its parts (K and V, or a state's conv and
        recurrent parts) are stored in different ones."""
        formats = {d for _, d in self.state_parts} or {self.dtype, self.v_dtype or self.dtype}
        return self.dtype.name if formats == {self.dtype} else "mixed"

    @property
    def kind(self) -> Kind:
        return self.cache.kind

    @property
    def grows_per_token(self) -> bool:
        """Whether one more text token adds a slot to every sequence in this layer."""
        if self.grows_with_tokens is not None:
            return self.grows_with_tokens
        return self.cache.tokens == "decoder"


@dataclass(frozen=True)
class Estimate:
    """The cache of one model under one workload and engine, by group of identical layers."""

    model: ModelSpec
    workload: Workload
    kv_dtype: DType
    groups: tuple[GroupEstimate, ...]
    engine: str
    notes: tuple[str, ...] = field(default=())
    per_gpu_bytes: int = 0
    per_gpu_token_bytes: int = 0
    v_dtype: DType | None = None

    @property
    def total_bytes(self) -> int:
        """The whole cache: every layer, every GPU, every replica."""
        return sum(g.bytes for g in self.groups)

    @property
    def gpus(self) -> int:
        w = self.workload
        return w.tp * w.pp * w.dp

    @property
    def metadata_bytes(self) -> int:
        return sum(g.metadata_bytes for g in self.groups)

    @property
    def per_sequence_bytes(self) -> int:
        return self.total_bytes // self.workload.batch

    @property
    def per_token_bytes(self) -> int:
        """Bytes one more decoder token adds to a sequence across all layers and GPUs of one
        replica, before any window: the figure papers quote."""
        w = self.workload
        # A compressed layer's entry is shared by ratio tokens (token_share); a compressor's
        # pending buffer adds nothing for good.
        return sum(g.layers * g.cache.token_share(g.bytes_per_token) * w.tp for g in self.groups if g.grows_per_token)

    @property
    def fixed_bytes_per_sequence(self) -> int:
        """Bytes per sequence that do not grow with decoder tokens: states, cross-attention over
        the encoder output and over images."""
        w = self.workload
        return sum(
            g.layers
            * w.tp
            * (
                g.state_bytes
                + (g.tokens_kept * g.bytes_per_token if g.cache.tokens == "encoder" else 0)
                + g.image_slots * g.bytes_per_token
            )
            for g in self.groups
        )


def resolve_dtypes(
    spec: ModelSpec, workload: Workload, engine: StorageRules, notes: list[str]
) -> tuple[DType, DType, DType]:
    """(K format, V format, the dtype the engine runs the model in): what was asked for, else the
    engine's own default for this checkpoint (``--kv-dtype auto``), each default noted."""
    compute, compute_note = engine.model_dtype(spec.dtype, spec.model_type)
    k_dtype = workload.kv_dtype
    if k_dtype is None:
        k_dtype, kv_note = engine.auto_kv_dtype(spec.dtype, spec.model_type)
        if kv_note:
            notes.append(kv_note)
    elif compute_note and not any(c.is_state for c, _ in spec.groups):
        compute_note = None  # the run dtype shapes nothing else here
    if compute_note and compute_note not in notes and not (workload.kv_dtype is None and compute == k_dtype):
        notes.append(compute_note)
    return k_dtype, workload.v_dtype or k_dtype, compute


def image_tokens(spec: ModelSpec, workload: Workload, notes: list[str]) -> int:
    """Image tokens one sequence puts in each image cross-attention layer: images x tokens per
    image (the workload's, else the model's own), 0 for a text-only prompt."""
    w = workload
    if not spec.has_image_cross_attention:
        if w.images or w.image_tokens is not None:
            raise UsageError(
                f"images apply to models with image cross-attention (Llama 3.2 Vision); {spec.name} has none"
            )
        return 0
    layers = sum(1 for c in spec.caches if c.tokens == "image")
    if not w.images:
        notes.append(
            f"no images: a text-only prompt caches nothing in the {layers} image cross-attention layers "
            "(set --images; --image-tokens for another tiling)"
        )
        return 0
    per_image = w.image_tokens or spec.image_tokens
    if per_image is None:
        raise UsageError(f"{spec.name} does not say how many tokens an image has: give --image-tokens")
    return w.images * per_image


def _image_shape(engine: StorageRules, cache: LayerCache, images: int) -> tuple[int, bool | None]:
    """(image slots a layer holds per sequence, whether it grows with text tokens) as the engine
    lays them out (``Engine.layer_tokens``); encoder cross-attention keeps its own rule (None)."""
    if cache.tokens == "encoder":
        return 0, None
    return engine.layer_tokens(cache, 0, images), engine.layer_tokens(cache, 1, 0) > 0


def pipeline_stages(layers: int, pp: int) -> list[range]:
    """Layer ranges per pipeline stage, as vllm/distributed/utils.py get_pp_indices splits them:
    evenly, extra layers going to the stages just before the last one."""
    sizes = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(range(start, start + size))
        start += size
    return stages


def stage_entries(spec: ModelSpec, pp: int) -> list[list[int]]:
    """The cache entries each pipeline stage holds: every entry of the stage's layers
    (``spec.entry_layers``) where a layer holds more than one; otherwise entries split as layers."""
    if not spec.entry_layers:
        return [list(stage) for stage in pipeline_stages(len(spec.caches), pp)]
    return [
        [i for i, layer in enumerate(spec.entry_layers) if layer in stage] for stage in pipeline_stages(spec.layers, pp)
    ]


def replica_batches(batch: int, dp: int) -> list[tuple[int, int]]:
    """(sequences, replicas holding that many) for ``dp`` data-parallel replicas, as even as
    possible: ``batch % dp`` replicas take one more. At most two sizes, so a million replicas
    cost no more than two."""
    small, extra = divmod(batch, dp)
    sizes = [(small + 1, extra), (small, dp - extra)]
    return [(size, count) for size, count in sizes if count and size]


def check_parallel(spec: ModelSpec, tp: int) -> None:
    if tp == 1:
        return
    heads = spec.query_heads
    if heads is not None and heads % tp:
        raise UsageError(f"tp {tp} does not divide the {heads} query heads of {spec.name}", param="tp")
    for cache, _ in spec.groups:
        if not cache.tp_split_ok(tp):
            kv_text, _ = cache.describe()
            raise UsageError(f"tp {tp} does not split the {kv_text} KV heads of {spec.name} evenly", param="tp")


def estimate(spec: ModelSpec, workload: Workload, *, engine: StorageRules) -> Estimate:
    """Compute the cache of ``spec`` for ``workload`` under ``engine``'s storage rules."""
    w = workload
    return compile_plan(spec, w, engine).at(w.tokens, w.batch, w.shared_prefix, w.encoder_tokens)


def copy_with(template: _T, changes: dict[str, object]) -> _T:
    """A copy of a frozen dataclass with ``changes``, made without ``__init__`` and
    ``__post_init__``: for values a plan has checked already (``dataclasses.replace`` costs several
    times a whole evaluation)."""
    new = object.__new__(type(template))
    new.__dict__.update(template.__dict__)
    new.__dict__.update(changes)
    return new


class _GroupPlan:
    """One group of identical layers, compiled: everything that does not change with the tokens.

    Per layer and GPU a sequence of T tokens costs ``slots x per_slot`` (K + V rows, metadata
    included) where the engine lays out the slots (windows, pages, blocks, cells), or a fixed
    ``state_bytes``; with a quantized cache the newest ``residual`` tokens of each sequence cost
    ``residual_extra`` more a slot (their rows in full precision), and no metadata. ``plain``: the
    engine keeps the base rules (Engine.layer_tokens, tokens_held, batch_slots) and the layer one
    entry a token (no compression), so a sequence holds min(T, ``bound``) slots and the plan need
    not ask the engine.

    A plain class, not a dataclass: the plan is built often and never compared, and a dataclass
    costs its methods' compilation at every start-up (~1 ms each on Python 3.11)."""

    __slots__ = (
        "bound",
        "cache",
        "engine",
        "full_dtype",
        "layers",
        "meta_per_slot",
        "per_slot",
        "plain",
        "residual",
        "residual_extra",
        "rows",
        "shape",
        "state_bytes",
    )  # fmt: skip

    def __init__(
        self,
        cache: LayerCache,
        layers: int,
        shape: GroupEstimate,
        *,
        state_bytes: int = 0,
        rows: bool = False,
        per_slot: int = 0,
        meta_per_slot: int = 0,
        residual: int = 0,
        residual_extra: int = 0,
        plain: bool = False,
        bound: int | None = None,
        engine: StorageRules | None = None,
        full_dtype: DType | None = None,
    ) -> None:
        self.cache = cache
        self.engine = engine  # the engine holding this group where it differs from the plan's (larger blocks)
        self.layers = layers
        self.shape = shape  # the group's fixed fields; the token-dependent ones are filled in
        self.state_bytes = state_bytes
        self.rows = rows
        self.per_slot = per_slot
        self.meta_per_slot = meta_per_slot
        self.residual = residual
        self.residual_extra = residual_extra
        self.plain = plain
        self.bound = bound
        self.full_dtype = full_dtype  # the format of the ``residual`` full-precision rows

    def replaced(self, **changes: object) -> _GroupPlan:
        """A copy with ``changes`` (the engine's pool layout: another engine, a padded state, slots)."""
        new = object.__new__(_GroupPlan)
        for name in self.__slots__:
            setattr(new, name, changes.get(name, getattr(self, name)))
        return new


class Plan:
    """The cache of one model under one engine, formats and layout, compiled once
    (``compile_plan``): a sum over groups of identical layers of what a length costs each.
    ``at`` evaluates it for a length, batch and shared prefix in microseconds, exactly as
    ``estimate`` does (``estimate`` is ``compile_plan(...).at(...)``). Treat it as immutable (a
    plain class for start-up's sake, as _GroupPlan)."""

    def __init__(
        self,
        model: ModelSpec,
        engine: StorageRules,
        workload: Workload,
        groups: tuple[_GroupPlan, ...],
        stages: tuple[tuple[tuple[int, int], ...], ...],
        estimate: Estimate,
        lead_notes: tuple[str, ...],
        tail_notes: tuple[str, ...],
        encoder_tokens: int | None,
        images: int,
        per_gpu_token_bytes: int,
    ) -> None:
        self.model = model
        self.engine = engine
        self.workload = workload  # the compiled one: formats, images, residual tokens and layout
        self.groups = groups
        # (group index, layers) per pipeline stage: one stage of the whole model unless pp > 1.
        self.stages = stages
        self.estimate = estimate  # the fixed fields of every Estimate this plan gives
        self.lead_notes = lead_notes  # the notes before the encoder default, then after it
        self.tail_notes = tail_notes
        self.encoder_tokens = encoder_tokens  # the model's or the workload's; None: the decoder length (noted)
        self.images = images
        self.per_gpu_token_bytes = per_gpu_token_bytes
        # lead + tail, once each: the notes when no length adds one
        self.static_notes = tuple(dict.fromkeys((*lead_notes, *tail_notes)))

    @cached_property
    def encoder_decoder(self) -> bool:
        return self.model.is_encoder_decoder

    @cached_property
    def monotone(self) -> bool:
        """Whether the bytes never fall as the tokens grow: no layer holds fewer entries for more
        tokens (a compressor's pending buffer empties each time a window closes)."""
        return not self.drops and all(type(g.cache).entries is LayerKind.entries for g in self.groups)

    @cached_property
    def drops(self) -> tuple[int, ...]:
        """The lengths at which the bytes fall as the tokens grow, the engine converting a whole
        buffer of full-precision slots to the quantized format at once (``full_precision_drops``):
        the cost is monotone between them."""
        drops = self.engine.full_precision_drops
        return tuple(sorted({d for g in self.groups if g.residual for d in drops(g.residual)}))

    def at(
        self,
        tokens: int,
        batch: int = 1,
        shared_prefix: int = 0,
        encoder_tokens: int | None = None,
        *,
        lead: tuple[str, ...] = (),
        tail: Sequence[str] = (),
    ) -> Estimate:
        """The estimate of ``batch`` sequences of ``tokens`` tokens, the first ``shared_prefix``
        shared (``encoder_tokens`` of encoder output; None: the compiled workload's). ``lead`` and
        ``tail``: notes of the caller's to put before and after the estimate's own."""
        w = self.workload
        self._check(tokens, batch, shared_prefix, encoder_tokens)
        assumed: tuple[str, ...] = ()
        encoder = self.encoder_tokens if encoder_tokens is None else encoder_tokens
        if encoder is None and self.encoder_decoder:
            encoder = tokens
            assumed = (self.assumed_encoder_note(encoder),)
        notes: list[str] = []  # what the windows and chunks drop at this length
        batches = replica_batches(batch, w.dp) if w.dp > 1 else [(batch, 1)]
        busiest = batches[0][0]  # the largest replica batch sits on the most loaded GPU
        groups = []
        busiest_bytes = []
        stored = []  # a quantized group's rows all still in full precision: (its format, whether so)
        for g in self.groups:
            total_bytes = meta_bytes = 0
            kept = slots = 0
            layer_bytes = 0
            for b, replicas in batches:
                cost, meta, kept_b, slots_b = self._cost(g, tokens, b, shared_prefix, encoder, notes)
                total_bytes += cost * replicas
                meta_bytes += meta * replicas
                if b == busiest:
                    kept, slots, layer_bytes = kept_b, slots_b, cost
            scale = w.tp * g.layers
            busiest_bytes.append(layer_bytes)
            changes: dict[str, object] = {"bytes": total_bytes * scale}
            if g.rows:
                changes.update(tokens_kept=kept, slots=slots, metadata_bytes=meta_bytes * scale)
            if g.residual and g.full_dtype is not None:
                # Every row kept in full precision (MLX below quantized_kv_start, a quantized cache
                # shorter than its residual): the group stores the model dtype, as its bytes say.
                whole = 0 < kept <= self.engine.full_precision_slots(kept, tokens, g.residual)
                stored.append((g.full_dtype, whole))
                if whole:
                    changes.update(dtype=g.full_dtype, v_dtype=None, bytes_per_token=g.per_slot + g.residual_extra)
            groups.append(copy_with(g.shape, changes))
        if len(self.stages) == 1:
            per_gpu = sum(cost * g.layers for g, cost in zip(self.groups, busiest_bytes, strict=True))
        else:
            per_gpu = max(sum(busiest_bytes[i] * n for i, n in stage) for stage in self.stages)
        changes = {"tokens": tokens, "batch": batch, "shared_prefix": shared_prefix}
        if encoder_tokens is not None:
            changes["encoder_tokens"] = encoder_tokens
        formats: dict[str, object] = {}
        if stored and all(whole for _, whole in stored) and len({d for d, _ in stored}) == 1:
            formats = {"kv_dtype": stored[0][0], "v_dtype": None}
        if notes or assumed:  # the length added some: each in its place among the compiled ones
            merged = tuple(dict.fromkeys((*lead, *self.lead_notes, *assumed, *self.tail_notes, *notes, *tail)))
        elif lead or tail:
            merged = tuple(dict.fromkeys((*lead, *self.static_notes, *tail)))
        else:
            merged = self.static_notes
        return copy_with(
            self.estimate,
            {"workload": copy_with(w, changes), "groups": tuple(groups), "notes": merged, "per_gpu_bytes": per_gpu,
             **formats},
        )  # fmt: skip

    def total_bytes(self, tokens: int, batch: int = 1, shared_prefix: int = 0) -> int:
        """``at(...).total_bytes`` without building the estimate: a sweep asks it per length."""
        w = self.workload
        self._check(tokens, batch, shared_prefix, None)
        encoder = tokens if self.encoder_tokens is None else self.encoder_tokens
        notes: list[str] = []
        batches = replica_batches(batch, w.dp) if w.dp > 1 else [(batch, 1)]
        total = 0
        for g in self.groups:
            for b, replicas in batches:
                total += self._cost(g, tokens, b, shared_prefix, encoder, notes)[0] * replicas * g.layers
        return total * w.tp

    def totals(self, tokens: Sequence[int], batch: int = 1) -> list[int]:
        """``total_bytes`` at each of ``tokens`` (no shared prefix): a sweep. Where every group
        holds min(T, bound) slots or a fixed state (the base rules, one replica, no residual
        tokens), each length is a few multiplications; otherwise ``total_bytes`` per length."""
        w = self.workload
        closed = w.dp == 1 and all(
            (g.plain and not g.residual and g.cache.tokens == "decoder") or not g.rows for g in self.groups
        )
        if not closed or not tokens:
            return [self.total_bytes(t, batch) for t in tokens]
        for t in tokens:
            if type(t) is not int or t < 1:
                _check_count("tokens", t, minimum=1)
        self._check(tokens[0], batch, 0, None)
        # Per group: bytes a slot for the whole batch over the group's layers and ranks, and its bound.
        fixed = sum(batch * g.state_bytes * g.layers for g in self.groups if not g.rows) * w.tp
        unbounded = sum(batch * g.per_slot * g.layers for g in self.groups if g.rows and g.bound is None) * w.tp
        bounded = [
            (batch * g.per_slot * g.layers * w.tp, g.bound) for g in self.groups if g.rows and g.bound is not None
        ]
        if not bounded:
            return [fixed + unbounded * t for t in tokens]
        return [fixed + unbounded * t + sum(c * (t if t < b else b) for c, b in bounded) for t in tokens]

    @cached_property
    def per_token_bytes(self) -> int:
        """``Estimate.per_token_bytes``, which no length changes."""
        tp = self.workload.tp
        return sum(
            g.layers * g.cache.token_share(g.shape.bytes_per_token) * tp for g in self.groups if g.shape.grows_per_token
        )

    def fixed_notes(self, tokens: int) -> tuple[str, ...]:
        """The estimate's notes at ``tokens`` but what windows and chunks drop (a note per length)."""
        if self.encoder_tokens is None and self.encoder_decoder:
            return tuple(dict.fromkeys((*self.lead_notes, self.assumed_encoder_note(tokens), *self.tail_notes)))
        return self.static_notes

    @staticmethod
    def assumed_encoder_note(encoder: int) -> str:
        """The note an estimate gives when it assumes the encoder length (fit's engine plans too)."""
        return (
            f"encoder length not given: cross-attention assumed to cache {encoder:,} encoder tokens "
            "(set --encoder-tokens)"
        )

    def per_gpu_bytes(self, tokens: int, batch: int = 1, shared_prefix: int = 0) -> int:
        """Bytes on the most loaded GPU for ``batch`` sequences of ``tokens`` on one replica:
        ``at(...).per_gpu_bytes`` without building the estimate (fit's searches ask it often)."""
        return max(self.stage_bytes(tokens, batch, shared_prefix))

    def stage_bytes(self, tokens: int, batch: int = 1, shared_prefix: int = 0) -> list[int]:
        """Bytes on one GPU of each pipeline stage (one stage unless pp > 1) for ``batch``
        sequences of ``tokens`` on one replica: a request mix sums them stage by stage."""
        self._check(tokens, batch, shared_prefix, None, replicas=False)
        encoder = tokens if self.encoder_tokens is None else self.encoder_tokens
        notes: list[str] = []
        costs = [self._cost(g, tokens, batch, shared_prefix, encoder, notes)[0] for g in self.groups]
        return [sum(costs[i] * n for i, n in stage) for stage in self.stages]

    def _check(
        self, tokens: int, batch: int, shared_prefix: int, encoder_tokens: int | None, *, replicas: bool = True
    ) -> None:
        """The checks ``Workload`` makes of what changes between evaluations (``replicas``: the
        batch is split over the compiled data-parallel replicas)."""
        if type(tokens) is not int or tokens < 1:
            _check_count("tokens", tokens, minimum=1)
        if type(batch) is not int or batch < 1:
            _check_count("batch", batch, minimum=1)
        if shared_prefix:
            _check_count("shared_prefix", shared_prefix, minimum=0)
            if shared_prefix > tokens:
                raise UsageError(f"shared prefix ({shared_prefix:,}) is longer than the {tokens:,} tokens")
        if encoder_tokens is not None:
            _check_count("encoder_tokens", encoder_tokens, minimum=1)
        if replicas and self.workload.dp > batch:
            raise UsageError(f"{self.workload.dp} data-parallel replicas need at least {self.workload.dp} sequences")

    def _cost(
        self, g: _GroupPlan, tokens: int, batch: int, prefix: int, encoder: int | None, notes: list[str]
    ) -> tuple[int, int, int, int]:
        """(bytes, metadata bytes, slots kept per sequence, slots) of one layer of ``g`` on one GPU
        for ``batch`` sequences of ``tokens``; a note when a window or chunk drops tokens."""
        if not g.rows:
            return batch * g.state_bytes, 0, 0, 0
        cache = g.cache
        if g.plain and not prefix:
            held = encoder if cache.tokens == "encoder" else self.images if cache.tokens == "image" else tokens
            assert held is not None
            kept = held if g.bound is None or held <= g.bound else g.bound
            slots = batch * kept
        else:
            kept, slots, held = self._slots(g, tokens, batch, prefix, encoder)
        total = slots * g.per_slot
        meta = slots * g.meta_per_slot
        if g.residual:
            # The newest tokens of each sequence wait in full precision until a group is full.
            full_slots = batch * self.engine.full_precision_slots(kept, tokens, g.residual)
            total += full_slots * g.residual_extra
            meta -= full_slots * g.meta_per_slot
        if g.bound is not None and held > kept:
            notes.append(f"{cache.kind} layers keep at most {kept:,} of the {held:,} tokens")
        return total, meta, kept, slots

    def _slots(self, g: _GroupPlan, tokens: int, batch: int, prefix: int, encoder: int | None) -> tuple[int, int, int]:
        """(slots kept per sequence, slots of the batch, tokens the layer is given) as the engine
        lays them out."""
        cache, engine = g.cache, g.engine or self.engine
        if cache.tokens == "encoder":
            assert encoder is not None
            held = encoder
            prefix = 0
        else:
            held = engine.layer_tokens(cache, tokens, self.images)
            if cache.tokens != "decoder":
                prefix = 0
        return engine.tokens_held(cache, held), engine.batch_slots(cache, held, batch, prefix), held


def compile_plan(spec: ModelSpec, workload: Workload, engine: StorageRules) -> Plan:
    """Everything of ``estimate`` that does not depend on the tokens, the batch or the shared
    prefix, worked out once for ``workload``'s formats, images, residual tokens and layout; every
    check ``estimate`` makes of them is made here."""
    w = workload
    notes: list[str] = []
    engine.check_model_type(spec.model_type)
    k_dtype, v_dtype, compute_dtype = resolve_dtypes(spec, w, engine, notes)
    for dtype in {k_dtype, v_dtype}:
        engine.check_dtype(dtype)
    spec, engine_notes = engine.prepare(spec, k_dtype, v_dtype)
    notes += engine_notes
    if w.pp > spec.layers:
        raise UsageError(f"pp {w.pp} is more pipeline stages than the {spec.layers} layers of {spec.name}",
                         param="pp")  # fmt: skip
    engine.check_shared_prefix(w.shared_prefix)
    check_parallel(spec, w.tp)
    lead = tuple(notes)
    notes = []
    encoder_tokens = w.encoder_tokens or spec.encoder_tokens
    residual = w.residual_tokens if not (k_dtype.is_plain and v_dtype.is_plain) else 0
    images = image_tokens(spec, w, notes)
    if spec.has_image_cross_attention and engine.layer_tokens(spec.caches[0], 1, 1) > 1:
        notes.append(
            f"{engine.name} keeps one token pool across all layers: image tokens take a cell in every layer, and "
            "the image cross-attention layers take one for every text token"
        )
    groups = tuple(
        _compile_group(cache, layers, engine, w, k_dtype, v_dtype, compute_dtype, residual, images)
        for cache, layers in spec.groups
    )
    index = {g.cache: i for i, g in enumerate(groups)}
    stage_layers = stage_entries(spec, w.pp)
    staged = []
    for stage in stage_layers:
        counted: dict[int, int] = {}
        for i in stage:
            counted[index[spec.caches[i]]] = counted.get(index[spec.caches[i]], 0) + 1
        staged.append(counted)
    groups = _arranged(spec, engine, groups, stage_layers, staged, notes)
    stages = tuple(tuple(counted.items()) for counted in staged)
    per_gpu_token = max(
        sum(groups[i].cache.token_share(groups[i].shape.bytes_per_token) * n for i, n in stage
            if groups[i].shape.grows_per_token)
        for stage in stages
    )  # fmt: skip
    fixed = Estimate(
        model=spec, workload=w, kv_dtype=k_dtype, v_dtype=v_dtype if v_dtype != k_dtype else None, groups=(),
        engine=engine.name, per_gpu_token_bytes=per_gpu_token,
    )  # fmt: skip
    return Plan(spec, engine, w, groups, stages, fixed, lead, tuple(notes), encoder_tokens, images, per_gpu_token)


def _arranged(
    spec: ModelSpec,
    engine: StorageRules,
    groups: tuple[_GroupPlan, ...],
    stage_layers: list[list[int]],
    staged: list[dict[int, int]],
    notes: list[str],
) -> tuple[_GroupPlan, ...]:
    """The groups as the engine's pool holds them (``Engine.arrange``, per pipeline stage: each
    worker groups its own layers): a group held with larger blocks, a state padded to the page, and
    a group of empty layer slots per padded kind, added to ``staged`` (group index -> layers)."""
    index = {g.cache: i for i, g in enumerate(groups)}
    arranged = list(groups)
    padding: list[dict[LayerCache, int]] = []  # empty slots per stage and kind
    busiest = max(range(len(stage_layers)), key=lambda n: len(stage_layers[n]))
    for n, stage in enumerate(stage_layers):
        layers = [(c, groups[index[c]].per_slot, groups[index[c]].state_bytes) for c in (spec.caches[i] for i in stage)]
        arrangement = engine.arrange(layers)
        padding.append(dict(arrangement.padding) if arrangement is not None else {})
        if arrangement is None or n != busiest:
            continue
        notes += [note for note in arrangement.notes if note not in notes]
        for cache, held_by in arrangement.engines.items():
            arranged[index[cache]] = arranged[index[cache]].replaced(engine=held_by, plain=False)
        for cache, state in arrangement.state_bytes.items():
            g = arranged[index[cache]]
            # The state's own parts stay as they are; the page around them is what it holds.
            arranged[index[cache]] = g.replaced(state_bytes=state, shape=copy_with(g.shape, {"state_bytes": state}))
    for cache in dict.fromkeys(c for empty in padding for c in empty):
        like, i = arranged[index[cache]], len(arranged)
        slots = sum(empty.get(cache, 0) for empty in padding)
        arranged.append(like.replaced(layers=slots, shape=copy_with(like.shape, {"layers": slots, "padding": True})))
        for n, empty in enumerate(padding):
            if empty.get(cache):
                staged[n][i] = empty[cache]
    return tuple(arranged)


def _compile_group(
    cache: LayerCache,
    layers: int,
    engine: StorageRules,
    w: Workload,
    k_dtype: DType,
    v_dtype: DType,
    compute_dtype: DType,
    residual: int,
    images: int,
) -> _GroupPlan:
    """One group's fixed costs and shape."""
    engine.check_layer(cache)
    engine.check_state(cache)
    if cache.tokens != "encoder":
        engine.layer_tokens(cache, w.tokens, images)  # an engine refuses a layer it cannot hold here
    if cache.is_state:
        dtype = cache.state_dtype or w.state_dtype or compute_dtype
        # Tensor parallel splits the heads (and conv channels) of the state across ranks.
        ranks = w.tp if cache.state_splits_across_ranks else 1
        parts = tuple(
            (-(-elements // ranks), part_dtype or dtype) for elements, part_dtype in engine.state_parts(cache)
        )
        per_seq = sum(elements * part.bytes_per_element for elements, part in parts)
        formats = {part for _, part in parts}
        shape = GroupEstimate(cache, layers, 0, 0, per_seq, 0, formats.pop() if len(formats) == 1 else dtype,
                              state_parts=parts)  # fmt: skip
        return _GroupPlan(cache, layers, shape, state_bytes=per_seq)
    if not cache.caches_tokens:  # a layer that stores nothing of its own (KV sharing)
        return _GroupPlan(cache, layers, GroupEstimate(cache, layers, 0, 0, 0, 0, k_dtype))
    k_fmt = k_dtype
    if (family := cache.indexer_family) is not None:
        k_fmt = engine.indexer_dtype(k_dtype, compute_dtype, family)
    k_row, v_row, heads = engine.rows(cache, w.tp)
    k_data, k_meta = k_fmt.row_bytes(k_row)
    v_data, v_meta = v_dtype.row_bytes(v_row) if v_row else (0, 0)
    per_slot = k_data + k_meta + v_data + v_meta
    image_slots, grows = _image_shape(engine, cache, images)
    shape = GroupEstimate(
        cache, layers, 0, per_slot, 0, 0, k_fmt, heads, image_slots=image_slots, grows_with_tokens=grows,
        v_dtype=v_dtype if v_row and v_dtype != k_fmt else None,
    )  # fmt: skip
    kept_full = residual if cache.kind is not Kind.INDEXER else 0
    full_row = (k_row + v_row) * compute_dtype.bytes_per_element
    plain = engine.base_slot_rules and type(cache).entries is LayerKind.entries and cache.compress_ratio == 1
    return _GroupPlan(
        cache, layers, shape, rows=True, per_slot=per_slot, meta_per_slot=k_meta + v_meta, residual=kept_full,
        residual_extra=full_row - per_slot, plain=plain, bound=cache.token_bound, full_dtype=compute_dtype,
    )  # fmt: skip
