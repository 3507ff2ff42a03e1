"""What a step really costs (kvcalc speed's estimate): the bound's bytes and FLOPs at the share of
peak real kernels reach, plus the time no share of peak explains.

kvcalc.calc.speed bounds each step by max(bytes / bandwidth, FLOPs / peak). A served step also
pays, per GPU:

- kernels below peak: weights and KV stream at a share of the memory bandwidth that depends on the
  GPU generation; matmuls reach a share of the dense peak that depends on the generation and the
  compute dtype, and in prefill falls for short passes (``tokens / (tokens + gemm_half_tokens)``
  of it); attention its own share of the 16-bit peak;
- communication: tensor parallelism all-reduces the hidden state twice a layer (after attention
  and after the MLP), ring-wise: ``2 (tp - 1) / tp`` of its bytes over the link, plus the link's
  latency; pipeline stages hand the hidden state on; expert parallelism sends each token to its
  experts and back (two all-to-alls per MoE layer); attention-DP gathers the groups' tokens before
  the MLP and scatters them after;
- the engine's own time (``StepOverhead``, from each engine's module): per step (scheduling,
  sampling, input preparation) and per layer (kernel launches: a few microseconds under CUDA
  graphs, tens without); a prompt longer than the engine's prefill chunk is several passes;
- MoE routing: the router, top-k and the permutation kernels, per MoE layer.

The shares and times are one small table (``COSTS``), fitted in benchmarks/speed.py on half of
the published measurements in benchmarks/data/speed_measurements.yaml and reported on the other
half; ``RANGE`` is the spread of the fit half's residuals. An estimate is never below its bound:
the low end is clamped to it.

Pure: the bound's steps and a few widths in, seconds out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvcalc.calc.speed import Speed, Step, floor_sum
from kvcalc.kinds.base import Kind

MIB = 2**20


@dataclass(frozen=True)
class StepOverhead:
    """An engine's own time (kvcalc.engines.*.step_overhead): ``step_s`` per forward pass,
    ``layer_graphs_s`` / ``layer_eager_s`` per decoder layer with and without CUDA graphs,
    ``request_s`` once per request before its first token (tokenizing, the API round trip),
    ``prefill_chunk`` the most prompt tokens one pass takes (None: the whole batch's prompts)."""

    engine: str
    step_s: float
    layer_graphs_s: float
    layer_eager_s: float
    request_s: float
    cuda_graphs: bool
    prefill_chunk: int | None
    source: str

    def per_step(self, layers: int, *, graphs: bool) -> float:
        return self.step_s + layers * (self.layer_graphs_s if graphs else self.layer_eager_s)


@dataclass(frozen=True)
class Coverage:
    """What the measurements the table is fitted on hold (benchmarks/data/speed_measurements.yaml,
    both halves; tests/calc/test_step_cost.py holds this to the file): an estimate for anything
    else is extrapolated from them, and says where (``extrapolated``)."""

    archs: tuple[str, ...] = ()  # GPU generations
    kinds: frozenset[str] = frozenset()  # layer kinds (kvcalc.kinds.Kind values) of the measured models
    moe: bool = False  # a mixture-of-experts model among them
    max_tp: int = 1
    pp: bool = False  # a pipeline-parallel point
    ep: bool = False  # an expert-parallel point
    dp_attention: bool = False  # an attention-DP point


@dataclass(frozen=True)
class Costs:
    """The shares of peak kernels reach and the fixed times of communication and routing."""

    memory: dict[str, float]  # share of peak bandwidth by GPU generation ("": any other)
    gemm: dict[str, float]  # share of the dense peak a large GEMM reaches, by "generation/dtype", else dtype
    gemm_half_tokens: int  # tokens per GPU at which a GEMM reaches half of that share
    attention: float  # share of the 16-bit peak attention kernels reach
    link_latency_s: dict[str, float]  # one collective's fixed time, by link kind
    link_share: float  # share of the link's bandwidth a collective reaches
    route_s: float  # MoE routing per MoE layer per step
    source: str
    coverage: Coverage = field(default=Coverage())  # what the benchmark's measurements hold


# Fitted by benchmarks/speed.py on the fit half of its measurements, each entry pulled toward a
# prior (benchmarks/speed.py PRIOR) so that a few points cannot drag it far: streaming kernels at
# 60-80% of peak bandwidth, large BF16 GEMMs at ~70% of the dense peak and FP8 ones lower,
# attention at ~50% of the 16-bit peak (FlashAttention-3 reports up to 75% on H100), a small
# all-reduce over NVLink in 4-10 us (SGLang PR #2904's H100 table: 3.7-5.9 us for its custom
# all-reduce, 8.5-10.1 us for vLLM's, at 512 B to 32 KB, TP 2-8). The memory shares are lower than
# a copy kernel reaches: they also carry what the decode step's many small kernels lose.
COSTS = Costs(
    memory={"ampere": 0.67, "ada": 0.78, "hopper": 0.61, "blackwell": 0.49, "cdna3": 0.40, "apple": 0.75, "": 0.75},
    gemm={
        "bf16": 0.77,
        "fp16": 0.77,
        "fp8": 0.48,
        "fp4": 0.50,
        "int8": 0.50,
        "ada/bf16": 0.54,
        "ada/fp8": 0.59,
        "ada/int8": 0.20,
        "cdna3/fp8": 0.35,
        "cdna3/bf16": 0.50,
    },
    gemm_half_tokens=152,
    attention=0.57,
    link_latency_s={"nvlink": 7.4e-6, "infinity-fabric": 16.7e-6, "pcie": 25e-6, "": 25e-6},
    link_share=0.67,
    route_s=24e-6,
    source="fitted in benchmarks/speed.py on the fit half of benchmarks/data/speed_measurements.yaml",
    coverage=Coverage(
        archs=("ampere", "ada", "hopper", "blackwell", "cdna3"),
        kinds=frozenset({"full_attention", "sliding_attention", "no_cache"}),  # Llama 2/3, Nemotron-Super, gpt-oss
        moe=True,  # gpt-oss-20b at tp 1, gpt-oss-120b at tp 8 (no expert parallelism)
        max_tp=8,
    ),
)
# ln(measured / estimate) at the fit half's 10th and 90th percentiles, by phase.
RANGE = {"ttft": (-0.09, 0.24), "tpot": (-0.16, 0.30)}


@dataclass(frozen=True)
class Layout:
    """Where a step's work goes: ``tp`` GPUs share every layer; ``pp`` pipeline stages hand the
    hidden state on; ``ep`` of the tp GPUs hold the routed experts apart (expert parallelism);
    ``dp_attention`` groups of tp / dp_attention GPUs run attention on their own requests."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1


@dataclass(frozen=True)
class Model:
    """The widths the extra terms need."""

    layers: int
    hidden: int
    moe_layers: int
    top_k: int
    activation_bytes: int = 2  # the hidden state as collectives send it (bf16)
    experts: int = 0
    expert_flops_share: float = 0.0  # of a token's matmul FLOPs, those in its routed experts
    kinds: frozenset[str] = frozenset()  # its layer kinds (kvcalc.kinds.Kind values)


@dataclass(frozen=True)
class Device:
    """What the estimate reads of a GPU: its peaks at the estimate's compute dtype and at 16 bits,
    its generation (``arch``, which picks its shares of peak), its link."""

    bandwidth: int
    flops: int  # dense peak at ``compute_dtype``
    flops_16bit: int
    compute_dtype: str
    arch: str
    link_kind: str
    link_bandwidth: int  # one direction, bytes/s (0: none known)


@dataclass(frozen=True)
class Terms:
    """One step's estimate, term by term (seconds, per GPU)."""

    memory_s: float
    gemm_s: float
    attention_s: float
    communication_s: float
    routing_s: float
    overhead_s: float
    tokens: int

    @property
    def kernels_s(self) -> float:
        return max(self.memory_s, self.gemm_s + self.attention_s)

    @property
    def seconds(self) -> float:
        return self.kernels_s + self.communication_s + self.routing_s + self.overhead_s


@dataclass(frozen=True)
class Phase:
    """One workload's estimates (seconds; tokens/s for ``output_tokens_per_s``) and their ranges."""

    batch: int
    ttft_s: float
    ttft_mean_s: float
    tpot_mean_s: float
    e2e_s: float
    low: dict[str, float]
    high: dict[str, float]

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch / self.tpot_mean_s


ChunkWeights = Callable[[int], int]  # tokens in one pass -> weight bytes it reads per GPU


@dataclass(frozen=True)
class Setting:
    """What an estimate is made for besides the bound: the device, the widths, the layout, whether
    decode replays CUDA graphs, and the weight bytes a prefill pass of n tokens reads per GPU."""

    device: Device
    model: Model
    layout: Layout
    graphs: bool
    chunk_weights: ChunkWeights


@dataclass(frozen=True)
class SpeedEstimate:
    """The estimate at the asked batch with its terms (the prefill's first pass, the first decode
    step), and one per batch of the sweep."""

    at: Phase
    prefill: Terms
    prefill_passes: int
    decode: Terms
    overhead: StepOverhead
    setting: Setting
    sweep: tuple[Phase, ...]
    costs: Costs = field(default=COSTS)


def extrapolated(arch: str, model: Model, layout: Layout, coverage: Coverage = COSTS.coverage) -> tuple[str, ...]:
    """What an estimate for ``model`` on ``arch`` GPUs in ``layout`` holds that no measurement of
    the fit does, in words ("apple GPU", "MLA", "expert-parallel"): its terms there are
    extrapolated from the measured ones. Empty: inside what was measured."""
    gaps = [] if arch in coverage.archs else [f"{arch or 'unknown'} GPU"]
    gaps += ["MLA" if k == Kind.MLA else Kind(k).short for k in sorted(model.kinds - coverage.kinds)]
    if model.moe_layers and not coverage.moe:
        gaps.append("MoE")
    if layout.tp > coverage.max_tp:
        gaps.append(f"tp {layout.tp}")
    for asked, covered, words in ((layout.pp > 1, coverage.pp, "pipeline-parallel"),
                                  (layout.ep > 1, coverage.ep, "expert-parallel"),
                                  (layout.dp_attention > 1, coverage.dp_attention, "attention-DP")):  # fmt: skip
        if asked and not covered:
            gaps.append(words)
    return tuple(gaps)


def _collective(device: Device, nbytes: int, ranks: int, costs: Costs) -> float:
    """A ring all-reduce (or all-gather + reduce-scatter) of ``nbytes`` over ``ranks`` GPUs."""
    if ranks <= 1:
        return 0.0
    latency = costs.link_latency_s.get(device.link_kind, costs.link_latency_s[""])
    if device.link_bandwidth <= 0:
        return latency
    return latency + 2 * (ranks - 1) / ranks * nbytes / (device.link_bandwidth * costs.link_share)


def communication(device: Device, model: Model, layout: Layout, tokens: int, costs: Costs = COSTS) -> float:
    """TP all-reduces (two a layer), attention-DP's gathers, EP's all-to-alls and PP's hand-offs
    of one step over ``tokens`` tokens (all of the step's sequences)."""
    hidden_bytes = tokens * model.hidden * model.activation_bytes
    dense_layers = model.layers - model.moe_layers
    attention_ranks = layout.tp // layout.dp_attention
    # Attention: an all-reduce within each attention group over its own tokens.
    total = model.layers * _collective(device, hidden_bytes // layout.dp_attention, attention_ranks, costs)
    # MLP: an all-reduce over the tp GPUs (attention-DP: a gather and a scatter of the same bytes).
    total += dense_layers * _collective(device, hidden_bytes, layout.tp, costs)
    if layout.ep > 1:  # dispatch and combine: each token to top_k experts, 1 - 1/ep of them remote
        latency = costs.link_latency_s.get(device.link_kind, costs.link_latency_s[""])
        sent = hidden_bytes * model.top_k * (layout.ep - 1) / layout.ep / layout.ep
        rate = max(device.link_bandwidth, 1) * costs.link_share
        total += model.moe_layers * 2 * (latency + sent / rate)
        total += model.moe_layers * _collective(device, hidden_bytes, layout.tp // layout.ep, costs)
    else:
        total += model.moe_layers * _collective(device, hidden_bytes, layout.tp, costs)
    if layout.pp > 1:
        latency = costs.link_latency_s.get(device.link_kind, costs.link_latency_s[""])
        total += (layout.pp - 1) * (latency + hidden_bytes / max(device.link_bandwidth * costs.link_share, 1))
    return total


def step_terms(
    step: Step, device: Device, model: Model, layout: Layout, overhead: StepOverhead, *, tokens: int,
    graphs: bool, costs: Costs = COSTS, prefill: bool = False,
) -> Terms:  # fmt: skip
    """One step's estimate from the bound's bytes and FLOPs (per GPU) and ``tokens`` in the step.
    A prefill pass's GEMMs lose share when they are short (``tokens / (tokens + half)``); a decode
    step's small GEMMs are weight-streaming kernels (GEMV-like at small batches) whose time the
    memory term already holds, so they keep the full share."""
    bandwidth = device.bandwidth * costs.memory.get(device.arch, costs.memory[""])
    per_gpu = max(1, math.ceil(tokens / max(layout.dp_attention, 1)))
    top = costs.gemm.get(
        f"{device.arch}/{device.compute_dtype}", costs.gemm.get(device.compute_dtype, costs.gemm["bf16"])
    )
    share = top * per_gpu / (per_gpu + costs.gemm_half_tokens) if prefill else top
    dense = step.flops - step.attention_flops
    # Routed experts: each expert's GEMM sees only the tokens routed to it (tokens x k / E), so in
    # prefill its pass is shorter than the step's.
    expert = dense * model.expert_flops_share
    expert_share = share
    if prefill and model.experts:
        routed = max(1.0, per_gpu * model.top_k / model.experts)
        expert_share = top * routed / (routed + costs.gemm_half_tokens)
    return Terms(
        memory_s=step.bytes / bandwidth,
        gemm_s=(dense - expert) / (device.flops * share) + expert / (device.flops * expert_share),
        attention_s=step.attention_flops / (device.flops_16bit * costs.attention),
        communication_s=communication(device, model, layout, tokens, costs),
        routing_s=model.moe_layers * costs.route_s,
        overhead_s=overhead.per_step(model.layers, graphs=graphs),
        tokens=tokens,
    )


def spread(seconds: float, phase: str, bound: float) -> tuple[float, float]:
    """The estimate's range: the fit's residual spread around it, never below the bound."""
    low, high = RANGE[phase]
    return max(bound, seconds * math.exp(low)), max(bound, seconds * math.exp(high))


def prefill_passes(prompt_tokens: int, overhead: StepOverhead) -> int:
    """Passes an engine takes over ``prompt_tokens`` (all of the batch's prompts)."""
    chunk = overhead.prefill_chunk
    return 1 if chunk is None or prompt_tokens <= chunk else math.ceil(prompt_tokens / chunk)


def phase(
    prefill: Step, evaluated: Sequence[Step], bound: tuple[float, float, float], device: Device, model: Model,
    layout: Layout, overhead: StepOverhead, chunk_weights: ChunkWeights, *, batch: int, prompt: int, output: int,
    graphs: bool, costs: Costs = COSTS,
) -> tuple[Phase, Terms, int, Terms]:  # fmt: skip
    """The estimates of ``batch`` sequences from the bound's prefill step (every prompt in one
    pass) and its evaluated decode steps; ``bound`` the bound's (TTFT, TTFT mean, TPOT mean).
    Also the first prefill pass's and first decode step's terms, and the passes."""
    total = batch * prompt
    passes = prefill_passes(total, overhead) if prompt else 0
    first = Terms(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    ttft = ttft_mean = 0.0
    if passes:
        tokens = math.ceil(total / passes)
        one = Step(chunk_weights(tokens), prefill.kv_bytes // passes, prefill.flops // passes, 0.0, 0.0,
                   prefill.attention_flops // passes)  # fmt: skip
        first = step_terms(one, device, model, layout, overhead, tokens=tokens, graphs=False, costs=costs,
                           prefill=True)  # fmt: skip
        ttft = passes * first.seconds + overhead.request_s
        # The i-th request's prompt is done with the pass that holds its last token, ceil(i x
        # prompt / tokens) (never past the last pass: tokens x passes >= batch x prompt); their sum
        # over i = 1..batch in closed form, floor((i x prompt + tokens - 1) / tokens) summed.
        done = floor_sum(batch + 1, tokens, prompt, tokens - 1)
        ttft_mean = done / batch * first.seconds + overhead.request_s
    decode = [step_terms(s, device, model, layout, overhead, tokens=batch, graphs=graphs, costs=costs)
              for s in evaluated]  # fmt: skip
    tpot = sum(t.seconds for t in decode) / len(decode)
    # A real step is never faster than its bound (a share of peak above the bound's own, e.g. a
    # faster compute dtype given to the bound than the engine runs, cannot make it so).
    ttft, ttft_mean, tpot = max(ttft, bound[0]), max(ttft_mean, bound[1]), max(tpot, bound[2])
    ttft_low, ttft_high = spread(ttft, "ttft", bound[0]) if passes else (0.0, 0.0)
    mean_low, mean_high = spread(ttft_mean, "ttft", bound[1]) if passes else (0.0, 0.0)
    tpot_low, tpot_high = spread(tpot, "tpot", bound[2])
    steps = output if prompt == 0 else output - 1  # with no prompt, every output token is a decode step
    low = {"ttft_seconds": ttft_low, "ttft_mean_seconds": mean_low, "tpot_mean_seconds": tpot_low,
           "e2e_seconds": ttft_low + steps * tpot_low, "output_tokens_per_s": batch / tpot_high}  # fmt: skip
    high = {"ttft_seconds": ttft_high, "ttft_mean_seconds": mean_high, "tpot_mean_seconds": tpot_high,
            "e2e_seconds": ttft_high + steps * tpot_high, "output_tokens_per_s": batch / tpot_low}  # fmt: skip
    result = Phase(batch, ttft, ttft_mean, tpot, ttft + steps * tpot, low, high)
    return result, first, passes, decode[0]


def estimate(bound: Speed, setting: Setting, overhead: StepOverhead, costs: Costs = COSTS) -> SpeedEstimate:
    """The estimate of every batch of the bound's sweep; its terms at the bound's batch."""
    rows = []
    at = None
    for row in bound.sweep:
        result = phase(
            row.prefill, row.decode.evaluated, (row.prefill.seconds, row.ttft_mean_s, row.decode.mean_s),
            setting.device, setting.model, setting.layout, overhead, setting.chunk_weights, batch=row.batch,
            prompt=bound.prompt, output=bound.output, graphs=setting.graphs, costs=costs,
        )  # fmt: skip
        rows.append(result[0])
        if row.batch == bound.batch:
            at = result
    assert at is not None, "the sweep holds the asked batch"
    return SpeedEstimate(at[0], at[1], at[2], at[3], overhead, setting, tuple(rows), costs)
