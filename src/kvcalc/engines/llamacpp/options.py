"""llama.cpp's plugins (``--engine llama.cpp``, and ``llama-server``: a plain server's defaults):
their names and knobs, light enough for the CLI to read without loading the rules (rules.py)."""

from __future__ import annotations

from typing import Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob

# The llama-cpp-python release whose vendored llama.cpp (0c1e570) the rules were read from; the
# tests pin it (.ci/run).
RULES_VERSION = "0.3.36"


def _ubatch() -> Any:
    return knob(flag="--ubatch", engine_flag="-ub, --ubatch-size", default="512",
                help="llama.cpp n_ubatch (default 512).")  # fmt: skip


def _n_batch() -> Any:
    return knob(flag="--n-batch", engine_flag="-b, --batch-size", default="2048",
                help="llama.cpp n_batch (-b, default 2048): sliding layers are sized by min(n_ctx, n_batch, "
                "--ubatch).")  # fmt: skip


def _swa_full() -> Any:
    return knob(flag="--swa-full", engine_flag="--swa-full", kind="flag", default="off",
                help="llama.cpp: full-size caches for sliding layers (--swa-full). Off by default as in "
                "llama-server and llama-cli; llama_context_default_params() and llama-cpp-python turn it on, "
                "so model those with it.")  # fmt: skip


class LlamaCppOptions(EngineOptions):
    """llama.cpp's knobs: ``-ub`` (``ubatch``), ``-b`` (``n_batch``), ``-kvu`` (``kv_unified``) and
    ``--swa-full`` (None: the command-line tools' default, off)."""

    ubatch: int | None = _ubatch()
    n_batch: int | None = _n_batch()
    kv_unified: bool = knob(flag="--kv-unified", engine_flag="-kvu, --kv-unified", kind="flag", default="off",
                            help="llama.cpp: one KV stream shared by all slots (-kvu).")  # fmt: skip
    swa_full: bool | None = _swa_full()


class LlamaServerOptions(EngineOptions):
    """llama-server's knobs: those of llama.cpp but ``kv_unified``, which a plain server already is."""

    ubatch: int | None = _ubatch()
    n_batch: int | None = _n_batch()
    swa_full: bool | None = _swa_full()


PLUGIN = EnginePlugin(
    name="llama.cpp",
    summary="cells padded to 256, SWA cells",
    rules="kvcalc.engines.llamacpp.rules:LlamaCpp",
    options=LlamaCppOptions,
    aliases=("llamacpp", "llama-cpp"),
    panel="llama.cpp (--engine llama.cpp, llama-server)",
)
SERVER_PLUGIN = EnginePlugin(
    name="llama-server",
    summary="a plain llama-server -c N: 4 slots, unified",
    rules="kvcalc.engines.llamacpp.rules:LlamaServer",
    options=LlamaServerOptions,
    panel=PLUGIN.panel,
)
