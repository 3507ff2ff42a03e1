"""Ollama's KV cache: llama.cpp's cache as each Ollama release runs it (github.com/ollama/ollama:
llm/server.go, llm/llama_server.go, llama/llama.go, envconfig/config.go, fs/ggml/ggml.go, the
vendored llama/llama.cpp; each rule names its tag), with llama.cpp's own rules (engines.llamacpp)
for everything Ollama does not change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvcalc.dtypes import DType
from kvcalc.engines.base import Engine, Target
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.llamacpp import releases as rel
from kvcalc.engines.llamacpp.architectures import converted
from kvcalc.engines.llamacpp.rules import LlamaCpp
from kvcalc.engines.ollama import DEFAULT_VERSION, OllamaOptions
from kvcalc.engines.ollama import releases as R
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.spec import ModelSpec

# OLLAMA_KV_CACHE_TYPE's values (docs/faq.md "How can I set the quantization type for the K/V cache?").
_KV_TYPES = ("fp16", "q8_0", "q4_0")
_MAJOR, _MINOR = (int(p) for p in DEFAULT_VERSION.split("."))
_DEFAULT: tuple[int, int, int] = (_MAJOR, _MINOR, 0)


def _tag(release: tuple[int, int, int]) -> str:
    return "v" + ".".join(map(str, release))


@dataclass(frozen=True)
class Ollama(LlamaCpp):
    """num_ctx x OLLAMA_NUM_PARALLEL cells: ``--tokens`` num_ctx, ``--batch`` the parallel slots.

    From v0.30.0 Ollama launches its bundled ``llama-server -c NumCtx*numParallel -np numParallel``
    with no ``-kvu`` (llm/llama_server.go), so llama.cpp's per-slot streams of pad(n_ctx / B, 256)
    cells, sliding layers sized by n_ubatch as llama-server does. Before, its cgo runner
    (runner/llamarunner) made a context from ``llama_context_default_params()`` with n_ctx =
    NumCtx x numParallel and n_seq_max numParallel (llm/server.go ``KvSize``, llama/llama.go
    NewContextParams, v0.24.0): swa_full true (sliding layers get every cell), one unified cache
    before the v0.11 vendored build had streams, and cells padded to 32 without flash attention
    before v0.13. Models on Ollama's own Go engine (runner/ollamarunner, kvcache.Causal) before
    v0.30 are not modelled apart: their cache is laid out the same way per slot but padded by the
    backend's CachePadding, which this engine does not read (a note says so).

    OLLAMA_KV_CACHE_TYPE (``--kv-dtype``: f16, q8_0, q4_0) is honoured only with flash attention
    before v0.30 (llm/server.go v0.24.0: "OLLAMA_FLASH_ATTENTION must be enabled to use a quantized
    OLLAMA_KV_CACHE_TYPE", then f16); llama-server refuses a quantized V without it."""

    name: str = "ollama"
    release: tuple[int, int, int] = _DEFAULT
    flash_attention: int | None = None
    options_type: ClassVar[type[EngineOptions]] = OllamaOptions

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, OllamaOptions)
        release = target.version or _DEFAULT
        fa = options.flash_attention
        server = release >= R.LLAMA_SERVER
        build = R.bundled_llama_cpp(release) or "unknown"
        tag = _tag(release)
        number = rel.CURRENT
        if server:
            # From v0.30 a llama.cpp release tag (bNNNN): llama.cpp's own rules at that build
            # (engines/llamacpp/releases.py), with Ollama's launch line's streams.
            number = int(build.removeprefix("b"))
            _, build_notes = LlamaCpp.at_build(number, uses_mla=target.uses_mla)  # its checks and notes
        elif target.uses_mla:
            # Before v0.30 a vendored commit, not a numbered build: llama.cpp's MLA cache changed
            # three times in the span those commits cover (per-head K and V, a V beside the latent,
            # the latent alone: engines/llamacpp/releases.py), and which one a commit has is not known.
            raise UsageError(f"Ollama {tag} bundles llama.cpp {build[:9]}, a commit from before Ollama ran numbered "
                             "llama.cpp builds; which MLA cache it keeps (per-head K and V, a V beside the latent, "
                             "or the latent alone) is not known: use ollama@0.30 or later", param="engine")  # fmt: skip
        engine = cls(
            release=release,
            flash_attention=fa,
            unified=not server and release < R.STREAMS,
            swa_full=not server,  # llama_context_default_params(): swa_full = true
            cell_padding=256 if server or release >= R.PAD_256 or fa == 1 else 32,
            mla=target.uses_mla,
            build=number if server else rel.CURRENT,
        )
        runner = (f"llama-server (llama.cpp {build}) -c num_ctx x OLLAMA_NUM_PARALLEL -np OLLAMA_NUM_PARALLEL"
                  if server else f"its llama.cpp runner (vendored llama.cpp {build[:9]}) with n_ctx num_ctx x "
                  "OLLAMA_NUM_PARALLEL")  # fmt: skip
        notes = [f"Ollama {tag} runs {runner}: --tokens is num_ctx, --batch OLLAMA_NUM_PARALLEL"]
        if server:
            notes += build_notes
        else:
            notes.append(f"Ollama {tag} runs some architectures on its own Go engine (ollamarunner, kvcache.Causal); "
                         "kvcalc sizes its llama.cpp runner's cache")  # fmt: skip
            notes.append(f"kvcalc applies llama.cpp b{rel.CURRENT}'s cache rules to the llama.cpp {build[:9]} Ollama "
                         f"{tag} bundles, with Ollama's streams and padding")  # fmt: skip
        return engine, notes

    def default_tokens(self, spec: ModelSpec, gpu_memory: int | None) -> tuple[int, str] | None:
        """num_ctx when neither a request, a Modelfile nor OLLAMA_CONTEXT_LENGTH names one: by
        release, from v0.15.5 by the GPUs' total memory (releases.default_num_ctx), per slot: the
        tier is not divided by OLLAMA_NUM_PARALLEL (ollama/ollama PR #14120, which would have, was
        closed unmerged). From v0.9.3 capped at the model's trained context (llm/server.go
        NewLlamaServer, v0.9.3 .. v0.32.15: ``opts.NumCtx = int(trainCtx)``)."""
        tokens, note = R.default_num_ctx(self.release, gpu_memory)
        if tokens is None:
            return None
        trained = spec.max_context
        if self.release >= R.CAP_TRAINED and trained is not None and tokens > trained:
            return trained, f"{note}, capped at the model's trained context ({spec.max_context_key}; llm/server.go)"
        return tokens, f"{note}, per slot (--batch slots of it)"

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """f16 unless OLLAMA_KV_CACHE_TYPE says otherwise (docs/faq.md; llama.cpp's default type)."""
        dtype, note = super().auto_kv_dtype(config_dtype, model_type)
        return dtype, note and "Ollama caches K and V as f16 unless OLLAMA_KV_CACHE_TYPE says otherwise"

    def _flash(self, model_type: str) -> bool:
        """Whether flash attention is on for this model: the knob, else the release's default."""
        if self.flash_attention is not None:
            return self.flash_attention == 1
        if self.release >= R.LLAMA_SERVER:
            return True  # llm/llama_server.go LlamaServerFlashAttention: "auto", on for CUDA GPUs
        if self.release < R.FA_BY_MODEL:
            return False
        arch = converted(model_type)
        models = R.FA_MODELS_0_12 if self.release < R.PAD_256 else R.FA_MODELS_0_24
        return arch is not None and arch.name in models

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _KV_TYPES:
            raise UsageError(f"Ollama's OLLAMA_KV_CACHE_TYPE is f16, q8_0 or q4_0; not {dtype.name}", param="kv_dtype")

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        flash = self._flash(spec.model_type)
        tag = _tag(self.release)
        quantized = next((d.name for d in (k_dtype, v_dtype) if not d.is_plain), None)
        if quantized is not None and not flash:
            if self.release >= R.LLAMA_SERVER:
                raise UsageError(f"Ollama {tag}'s llama-server refuses a {quantized} V cache without flash attention "
                                 "(OLLAMA_FLASH_ATTENTION=0): give --kv-dtype f16 or --flash-attention 1",
                                 param="kv_dtype")  # fmt: skip
            raise UsageError(f"Ollama {tag} ignores OLLAMA_KV_CACHE_TYPE={quantized} without flash attention and "
                             "caches f16 (llm/server.go): give --kv-dtype f16 or --flash-attention 1",
                             param="kv_dtype")  # fmt: skip
        if flash and self.cell_padding != 256:
            # v0.12.5 .. v0.12.x: flash attention on by default for this model, so cells pad to 256.
            raise UsageError(f"Ollama {tag} turns flash attention on for {spec.model_type}, padding cells to 256: "
                             "give --flash-attention 1 (or 0) to say so", param="flash_attention")  # fmt: skip
        spec, notes = super().prepare(spec, k_dtype, v_dtype)
        fa = "on" if flash else "off"
        notes.append(f"Ollama {tag}: flash attention {fa} for {spec.model_type} (OLLAMA_FLASH_ATTENTION), cells "
                     f"padded to {self.cell_padding}")  # fmt: skip
        arch = converted(spec.model_type)
        if arch is not None and R.one_slot(self.release, arch.name):
            # server/sched.go: numParallel = 1 for these architectures whatever OLLAMA_NUM_PARALLEL says.
            # prepare does not see the batch, and no engine hook sees the model with it, so a --batch
            # above 1 is sized as asked: the note says Ollama would run one.
            notes.append(f"Ollama {tag} runs {arch.name} models ({spec.model_type}) with one slot whatever "
                         "OLLAMA_NUM_PARALLEL says (server/sched.go): a --batch above 1 is not what it "
                         "runs")  # fmt: skip
        return spec, notes
