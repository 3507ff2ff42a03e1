"""The theoretical engine: what attention must keep, with no engine's allocation on top."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engines.base import ALL_STATE_FAMILIES, Engine, EngineOptions, Target

if TYPE_CHECKING:
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead
    from kvcalc.dtypes import DType
from kvcalc.engines.knobs import EnginePlugin, knob


class TheoreticalOptions(EngineOptions):
    """The ideal batcher's one knob, for ``simulate``: a token budget a step (None: none)."""

    max_num_tokens: int | None = knob(
        flag="--max-num-tokens", engine_flag="--max_num_tokens", default="none", simulate_only=True,
        help="simulate's ideal batcher: at most N tokens a step, prompts chunked to fit (TensorRT-LLM's "
        "max_num_tokens, 8192 by default in trtllm-build); default no budget.",
    )  # fmt: skip


class Theoretical(Engine):
    """Exactly what attention must keep: the base's storage rules, unchanged. A sliding layer
    keeps W tokens (the query at t reads t-W+1..t, Mistral's rolling buffer of W); a chunked layer
    at most one chunk; every other attention layer every token; one latent per token for MLA, a
    fixed state for linear attention and Mamba; for DeepSeek-V4 one K = V row per window token,
    one entry (and indexer key) per ``ratio`` tokens, the T mod ratio tokens not yet pooled (in the
    KV format) and CSA's overlap state (a state, in the run dtype)."""

    options_type = TheoreticalOptions
    max_num_tokens: int | None = None  # the batcher's token budget a step (--max-num-tokens), simulate's only

    # Engine's dataclass methods serve it, with this __init__ for its default name: an @dataclass of
    # its own would generate them again at every start-up (~0.4 ms).
    def __init__(self, name: str = "theoretical", max_num_tokens: int | None = None) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "max_num_tokens", max_num_tokens)

    # Not a dataclass field (see above), so equality and hashing name it here: engines with other
    # budgets are other engines (caches keyed by an engine must not share their schedulers).
    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and self.name == other.name
                and self.max_num_tokens == other.max_num_tokens)  # fmt: skip

    def __hash__(self) -> int:
        return hash((type(self), self.name, self.max_num_tokens))

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        tokens = options.max_num_tokens if isinstance(options, TheoreticalOptions) else None
        if tokens is None:
            return cls(), []
        return cls(max_num_tokens=tokens), [f"--max-num-tokens {tokens:,} is a step's token budget for simulate's "
                                            "batcher alone: the cache and its pool do not depend on it"]  # fmt: skip

    def check_dtype(self, dtype: DType) -> None:
        """Any format: the theoretical figure stores whatever is asked."""

    @property
    def state_families(self) -> frozenset[str]:
        return ALL_STATE_FAMILIES

    def check_model_type(self, model_type: str) -> None:
        """Any format: the theoretical figure needs no engine to load it."""

    def step_overhead(self) -> StepOverhead:
        """The theoretical engine stands for a C++ server that captures CUDA graphs and runs each
        batch's prompts in one pass (TensorRT-LLM's gptSessionBenchmark, NIM): its times are
        fitted on those engines' published measurements (benchmarks/speed.py)."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=0.26e-3, layer_graphs_s=4e-6, layer_eager_s=28e-6, request_s=1.1e-3,
                            cuda_graphs=True, prefill_chunk=None,
                            source="a CUDA-graph C++ server like TensorRT-LLM, fitted on its measurements (--engine "
                            "vllm, sglang or llama.cpp for theirs)")  # fmt: skip

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """The ideal continuous batcher (calc/simulate.py IdealBatcher) over the tokens the budget
        holds: the theoretical engine is that batcher, with no engine's limits."""
        from kvcalc.calc.simulate import IdealBatcher

        tokens = fit.max_tokens if fit.max_tokens is not None else fit.kv_budget
        budget = self.max_num_tokens
        joins = ("joins the next step whole, every running one decodes, no token budget" if budget is None else
                 f"joins while the step's {budget:,}-token budget lasts (--max-num-tokens), its prompt in chunks "
                 "of what the running requests' decodes leave")  # fmt: skip
        note = (f"the theoretical engine is the ideal continuous batcher over a pool of {tokens:,} tokens: every "
                f"waiting request that fits {joins}, no cap on requests; the latest admitted is preempted "
                "(recomputed) when one cannot grow")  # fmt: skip
        return IdealBatcher(tokens, token_budget=budget), [note]


THEORETICAL = Theoretical()

# The default engine: the figure every other engine is set beside.
PLUGIN = EnginePlugin(
    name="theoretical",
    summary="what attention must keep (the default)",
    rules="kvcalc.engines.theoretical:Theoretical",
    options=TheoreticalOptions,
    panel="Theoretical (--engine theoretical)",
)
