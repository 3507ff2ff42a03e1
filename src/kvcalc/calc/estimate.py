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

from dataclasses import dataclass, field

from kvcalc.dtypes import DType
from kvcalc.engines import THEORETICAL, Engine
from kvcalc.errors import UsageError
from kvcalc.spec import Kind, LayerCache, ModelSpec

# More GPUs in one layout than any deployment has; keeps every loop over ranks or stages small.
MAX_PARALLEL = 2**16
# More image tokens per sequence than any context holds (Llama 3.2 Vision: 6,404 per image).
MAX_IMAGE_TOKENS = 2**32


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
                raise UsageError(f"{name} {getattr(self, name):,} is implausibly large (at most {MAX_PARALLEL:,})")
        if self.dp > self.batch:
            raise UsageError(f"{self.dp} data-parallel replicas need at least {self.dp} sequences")


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum else "a non-negative integer"
        raise UsageError(f"{name.replace('_', ' ')} must be {kind}, got {value!r}")


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


def resolve_dtypes(spec: ModelSpec, workload: Workload, engine: Engine, notes: list[str]) -> tuple[DType, DType, DType]:
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


def _image_shape(engine: Engine, cache: LayerCache, images: int) -> tuple[int, bool | None]:
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


def _check_parallel(spec: ModelSpec, tp: int) -> None:
    if tp == 1:
        return
    heads = spec.query_heads
    if heads is not None and heads % tp:
        raise UsageError(f"--tp {tp} does not divide the {heads} query heads of {spec.name}")
    for cache, _ in spec.groups:
        if not cache.tp_split_ok(tp):
            kv_text, _ = cache.describe()
            raise UsageError(f"--tp {tp} does not split the {kv_text} KV heads of {spec.name} evenly")


def estimate(spec: ModelSpec, workload: Workload, *, engine: Engine = THEORETICAL) -> Estimate:
    """Compute the cache of ``spec`` for ``workload`` under ``engine``'s storage rules."""
    w = workload
    notes: list[str] = []
    engine.check_model_type(spec.model_type)
    k_dtype, v_dtype, compute_dtype = resolve_dtypes(spec, w, engine, notes)
    for dtype in {k_dtype, v_dtype}:
        engine.check_dtype(dtype)
    spec, engine_notes = engine.prepare(spec, k_dtype, v_dtype)
    notes += engine_notes
    if w.pp > spec.layers:
        raise UsageError(f"--pp {w.pp} is more pipeline stages than the {spec.layers} layers of {spec.name}")
    _check_parallel(spec, w.tp)
    encoder_tokens = w.encoder_tokens or spec.encoder_tokens
    if spec.is_encoder_decoder and encoder_tokens is None:
        encoder_tokens = w.tokens
        notes.append(
            f"encoder length not given: cross-attention assumed to cache {encoder_tokens:,} "
            "encoder tokens (set --encoder-tokens)"
        )
    residual = w.residual_tokens if not (k_dtype.is_plain and v_dtype.is_plain) else 0
    images = image_tokens(spec, w, notes)
    if spec.has_image_cross_attention and engine.layer_tokens(spec.caches[0], 1, 1) > 1:
        notes.append(
            f"{engine.name} keeps one token pool across all layers: image tokens take a cell in every layer, and "
            "the image cross-attention layers take one for every text token"
        )

    def layer_cost(cache: LayerCache, batch: int) -> tuple[int, int, GroupEstimate]:
        """(bytes, metadata bytes) of one layer on one GPU for ``batch`` sequences."""
        engine.check_layer(cache)
        tokens = encoder_tokens if cache.tokens == "encoder" else engine.layer_tokens(cache, w.tokens, images)
        assert tokens is not None
        if cache.is_state:
            dtype = cache.state_dtype or w.state_dtype or compute_dtype
            # Tensor parallel splits the heads (and conv channels) of the state across ranks.
            ranks = w.tp if cache.state_splits_across_ranks else 1
            parts = tuple(
                (-(-elements // ranks), part_dtype or dtype) for elements, part_dtype in engine.state_parts(cache)
            )
            per_seq = sum(elements * part.bytes_per_element for elements, part in parts)
            formats = {part for _, part in parts}
            g = GroupEstimate(cache, 0, 0, 0, per_seq, 0, formats.pop() if len(formats) == 1 else dtype,
                              state_parts=parts)  # fmt: skip
            return batch * per_seq, 0, g
        if not cache.caches_tokens:  # a layer that stores nothing of its own (KV sharing)
            return 0, 0, GroupEstimate(cache, 0, 0, 0, 0, 0, k_dtype)
        k_fmt = k_dtype
        if (family := cache.indexer_family) is not None:
            k_fmt = engine.indexer_dtype(k_dtype, compute_dtype, family)
        k_row, v_row, heads = engine.rows(cache, w.tp)
        kept = engine.tokens_held(cache, tokens)
        slots = engine.batch_slots(cache, tokens, batch, w.shared_prefix if cache.tokens == "decoder" else 0)
        k_data, k_meta = k_fmt.row_bytes(k_row)
        v_data, v_meta = v_dtype.row_bytes(v_row) if v_row else (0, 0)
        per_slot = k_data + k_meta + v_data + v_meta
        meta = slots * (k_meta + v_meta)
        total = slots * per_slot
        if residual and cache.kind is not Kind.INDEXER:
            # The newest tokens of each sequence wait in full precision until a group is full.
            full_slots = batch * min(kept, residual)
            full_row = (k_row + v_row) * compute_dtype.bytes_per_element
            total += full_slots * (full_row - per_slot)
            meta -= full_slots * (k_meta + v_meta)
        if cache.token_bound is not None and tokens > kept:
            notes.append(f"{cache.kind} layers keep at most {kept:,} of the {tokens:,} tokens")
        image_slots, grows = _image_shape(engine, cache, images)
        g = GroupEstimate(
            cache, 0, kept, per_slot, 0, 0, k_fmt, heads, slots=slots, image_slots=image_slots, grows_with_tokens=grows,
            v_dtype=v_dtype if v_row and v_dtype != k_fmt else None,
        )  # fmt: skip
        return total, meta, g

    batches = replica_batches(w.batch, w.dp)
    # Each pipeline stage as (distinct entry, how many): one stage of the whole model unless pp > 1.
    stages: list[tuple[tuple[LayerCache, int], ...]] = [spec.groups]
    if w.pp > 1:
        stages = []
        for stage in stage_entries(spec, w.pp):
            counted: dict[LayerCache, int] = {}
            for i in stage:
                counted[spec.caches[i]] = counted.get(spec.caches[i], 0) + 1
            stages.append(tuple(counted.items()))
    costs: dict[tuple[LayerCache, int], tuple[int, int, GroupEstimate]] = {}

    def cost(cache: LayerCache, batch: int) -> tuple[int, int, GroupEstimate]:
        key = (cache, batch)
        if key not in costs:
            costs[key] = layer_cost(cache, batch)
        return costs[key]

    group_layers = dict(spec.groups)
    group_bytes: dict[LayerCache, int] = {}
    group_meta: dict[LayerCache, int] = {}
    for cache, layers in group_layers.items():
        for b, replicas in batches:
            total, meta, _ = cost(cache, b)
            group_bytes[cache] = group_bytes.get(cache, 0) + total * w.tp * replicas * layers
            group_meta[cache] = group_meta.get(cache, 0) + meta * w.tp * replicas * layers
    busiest = batches[0][0]  # the largest replica batch sits on the most loaded GPU
    per_gpu = max(sum(cost(c, busiest)[0] * n for c, n in stage) for stage in stages)
    per_gpu_token = max(
        sum(c.token_share(cost(c, 1)[2].bytes_per_token) * n for c, n in stage if cost(c, 1)[2].grows_per_token)
        for stage in stages
    )
    groups = []
    for cache, layers in group_layers.items():
        shape = cost(cache, busiest)[2]
        groups.append(
            GroupEstimate(
                cache=cache,
                layers=layers,
                tokens_kept=shape.tokens_kept,
                bytes_per_token=shape.bytes_per_token,
                state_bytes=shape.state_bytes,
                bytes=group_bytes[cache],
                dtype=shape.dtype,
                kv_heads_per_gpu=shape.kv_heads_per_gpu,
                metadata_bytes=group_meta[cache],
                slots=shape.slots,
                image_slots=shape.image_slots,
                grows_with_tokens=shape.grows_with_tokens,
                state_parts=shape.state_parts,
                v_dtype=shape.v_dtype,
            )
        )
    return Estimate(
        model=spec,
        workload=w,
        kv_dtype=k_dtype,
        v_dtype=v_dtype if v_dtype != k_dtype else None,
        groups=tuple(groups),
        engine=engine.name,
        notes=tuple(dict.fromkeys(notes)),
        per_gpu_bytes=per_gpu,
        per_gpu_token_bytes=per_gpu_token,
    )
