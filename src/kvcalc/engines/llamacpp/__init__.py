"""llama.cpp's KV cache: its plugin (here: the name, releases and knobs the registry and the CLI
read, light) and its rules (rules.py), loaded on first use (``from kvcalc.engines.llamacpp import LlamaServer``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob

# The llama-cpp-python release whose vendored llama.cpp (0c1e570) the rules were read from; the
# tests pin it (.ci/run).
RULES_VERSION = "0.3.36"
# The builds whose rules were read (releases.py; oldest first; default: 0c1e570's build, 11312).
# Kept literal here so the registry reads them without loading the rules.
BUILDS = ("b4905", "b5331", "b11312")


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
    summary="cells padded to 256, SWA cells; llama.cpp@b4905 etc. for a build (default b11312)",
    rules="kvcalc.engines.llamacpp.rules:LlamaCpp",
    options=LlamaCppOptions,
    aliases=("llamacpp", "llama-cpp"),
    versions=BUILDS,
    default_version=BUILDS[-1],
    version_scheme="build",
    panel="llama.cpp (--engine llama.cpp, llama-server)",
)
SERVER_PLUGIN = EnginePlugin(
    name="llama-server",
    summary="a plain llama-server -c N: 4 slots, unified",
    rules="kvcalc.engines.llamacpp.rules:LlamaServer",
    options=LlamaServerOptions,
    versions=BUILDS,
    default_version=BUILDS[-1],
    version_scheme="build",
    panel=PLUGIN.panel,
)


if TYPE_CHECKING:
    from kvcalc.engines.llamacpp.rules import LlamaCpp, LlamaServer

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "LlamaCpp",
    "LlamaServer",
)

__all__ = [
    "BUILDS",
    "PLUGIN",
    "RULES_VERSION",
    "SERVER_PLUGIN",
    "LlamaCpp",
    "LlamaCppOptions",
    "LlamaServer",
    "LlamaServerOptions",
]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
