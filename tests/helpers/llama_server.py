"""The real llama-server for the tests: tiny runnable GGUFs and a server bound to 127.0.0.1.

The binary is built from the llama.cpp that llama-cpp-python 0.3.36 vendors (0c1e570, the copy
kvcalc's probe reads; tests/fixtures/servers/llama-server-0c1e570/README.md says how). Tests find it
through ``KVCALC_LLAMA_SERVER`` or at ``.build/llama-server/bin/llama-server`` and are skipped
without it (``needs_llama_server``).

llama-server loads every tensor from the file (the probe's ``llama_model_init_from_user`` is not
open to it), so the models here carry zero-filled f32 tensors of the shapes each architecture's
loader asks for (src/models/<arch>.cpp ``load_arch_tensors`` at 0c1e570), with a tiny vocabulary
and MLP: none of those shapes any cache.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.fake_server import free_port
from tests.helpers.gguf_files import F32, U32, Keys, general, tokenizer, typed_gguf_file
from tests.helpers.paths import ROOT

SERVER_ENV = "KVCALC_LLAMA_SERVER"
DEFAULT_BINARY = ROOT / ".build" / "llama-server" / "bin" / "llama-server"


def llama_server_binary() -> Path | None:
    """The llama-server binary named by ``KVCALC_LLAMA_SERVER``, else the CI build's, else None."""
    named = os.environ.get(SERVER_ENV)
    path = Path(named) if named else DEFAULT_BINARY
    return path if path.is_file() and os.access(path, os.X_OK) else None


needs_llama_server = pytest.mark.skipif(
    llama_server_binary() is None, reason=f"no llama-server binary ({SERVER_ENV} or {DEFAULT_BINARY})"
)

VOCAB = 6  # tokenizer()'s six tokens: token_embd is (n_embd, 6)
FF = 64  # a feed-forward too small to matter
Shapes = dict[str, tuple[int, ...]]


def _attention_block(i: int, embd: int, heads: int, kv: int, dim: int) -> Shapes:
    """create_tensor_qkv's separate Q, K, V (src/llama-model.cpp) and the output projection of block ``i``."""
    return {
        f"blk.{i}.attn_q.weight": (embd, heads * dim), f"blk.{i}.attn_k.weight": (embd, kv * dim),
        f"blk.{i}.attn_v.weight": (embd, kv * dim), f"blk.{i}.attn_output.weight": (heads * dim, embd),
    }  # fmt: skip


def _mlp_block(i: int, embd: int) -> Shapes:
    return {
        f"blk.{i}.ffn_norm.weight": (embd,), f"blk.{i}.ffn_gate.weight": (embd, FF),
        f"blk.{i}.ffn_down.weight": (FF, embd), f"blk.{i}.ffn_up.weight": (embd, FF),
    }  # fmt: skip


def _trunk(embd: int) -> Shapes:
    return {"token_embd.weight": (embd, VOCAB), "output_norm.weight": (embd,)}


def llama_gguf(path: Path, layers: int = 2, heads: int = 4, kv: int = 2, dim: int = 64) -> Path:
    """A llama (src/models/llama.cpp): ``layers`` blocks of ``heads`` query heads and ``kv`` KV
    heads of ``dim``; n_embd = heads x dim; output tied to token_embd."""
    embd = heads * dim
    keys: Keys = {
        **general("tiny llama"), "context_length": (U32, 8192), "embedding_length": (U32, embd),
        "feed_forward_length": (U32, FF), "block_count": (U32, layers), "attention.head_count": (U32, heads),
        "attention.head_count_kv": (U32, kv), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "rope.dimension_count": (U32, dim),
        **tokenizer(),
    }  # fmt: skip
    tensors = _trunk(embd)
    for i in range(layers):
        tensors |= {f"blk.{i}.attn_norm.weight": (embd,), **_attention_block(i, embd, heads, kv, dim)}
        tensors |= _mlp_block(i, embd)
    return typed_gguf_file(path, "llama", keys, tensors)


def gemma2_gguf(path: Path, layers: int = 4, heads: int = 4, kv: int = 2, dim: int = 64, window: int = 256) -> Path:
    """A gemma2 (src/models/gemma2.cpp): sliding-window pattern 2 (load_swa_pattern(ml, 2): even
    layers SWA, odd layers full), a window of ``window`` tokens; output tied to token_embd."""
    embd = heads * dim
    keys: Keys = {
        **general("tiny gemma2"), "context_length": (U32, 8192), "embedding_length": (U32, embd),
        "feed_forward_length": (U32, FF), "block_count": (U32, layers), "attention.head_count": (U32, heads),
        "attention.head_count_kv": (U32, kv), "attention.key_length": (U32, dim),
        "attention.value_length": (U32, dim), "attention.layer_norm_rms_epsilon": (F32, 1e-6),
        "attention.sliding_window": (U32, window), "attn_logit_softcapping": (F32, 50.0),
        "final_logit_softcapping": (F32, 30.0), **tokenizer(),
    }  # fmt: skip
    tensors = _trunk(embd)
    for i in range(layers):
        tensors |= {f"blk.{i}.attn_norm.weight": (embd,), **_attention_block(i, embd, heads, kv, dim)}
        tensors |= {f"blk.{i}.post_attention_norm.weight": (embd,), f"blk.{i}.post_ffw_norm.weight": (embd,)}
        tensors |= _mlp_block(i, embd)
    return typed_gguf_file(path, "gemma2", keys, tensors)


@dataclass(frozen=True)
class Mamba2Shape:
    """A granitehybrid's Mamba-2 sizes: d_inner = 2 x n_embd (the loader asserts it), ``heads`` SSM
    heads (ssm.time_step_rank), ``groups`` groups of state ``state``, a conv kernel ``conv``."""

    embd: int = 128
    heads: int = 4
    groups: int = 1
    state: int = 16
    conv: int = 4


def granite_hybrid_gguf(path: Path, pattern: str = "MMAM", heads: int = 4, kv: int = 2) -> Path:
    """A granitehybrid (src/models/granite-hybrid.cpp): a Mamba-2 layer per ``M`` and an attention
    layer (``heads`` query heads, ``kv`` KV heads of n_embd / heads) per ``A`` of ``pattern``; a layer
    is recurrent where its head_count_kv is 0. No experts: a dense MLP on every layer."""
    s = Mamba2Shape()
    inner = 2 * s.embd
    dim = s.embd // heads
    keys: Keys = {
        **general("tiny granite hybrid"), "context_length": (U32, 8192), "embedding_length": (U32, s.embd),
        "feed_forward_length": (U32, FF), "block_count": (U32, len(pattern)), "attention.head_count": (U32, heads),
        "attention.head_count_kv": ("array[uint32]", [kv if c == "A" else 0 for c in pattern]),
        "attention.layer_norm_rms_epsilon": (F32, 1e-5), "ssm.conv_kernel": (U32, s.conv),
        "ssm.inner_size": (U32, inner), "ssm.state_size": (U32, s.state), "ssm.time_step_rank": (U32, s.heads),
        "ssm.group_count": (U32, s.groups), "expert_count": (U32, 0), "expert_used_count": (U32, 0),
        "rope.dimension_count": (U32, dim), **tokenizer(),
    }  # fmt: skip
    conv_width = inner + 2 * s.groups * s.state
    tensors = _trunk(s.embd)
    for i, c in enumerate(pattern):
        tensors[f"blk.{i}.attn_norm.weight"] = (s.embd,)
        if c == "A":
            tensors |= _attention_block(i, s.embd, heads, kv, dim)
        else:
            tensors |= {
                f"blk.{i}.ssm_in.weight": (s.embd, 2 * inner + 2 * s.groups * s.state + s.heads),
                f"blk.{i}.ssm_conv1d.weight": (s.conv, conv_width), f"blk.{i}.ssm_conv1d.bias": (conv_width,),
                f"blk.{i}.ssm_dt.bias": (s.heads,), f"blk.{i}.ssm_a": (1, s.heads), f"blk.{i}.ssm_d": (1, s.heads),
                f"blk.{i}.ssm_norm.weight": (inner // s.groups, s.groups), f"blk.{i}.ssm_out.weight": (inner, s.embd),
            }  # fmt: skip
        tensors |= _mlp_block(i, s.embd)
    return typed_gguf_file(path, "granitehybrid", keys, tensors)


def mamba_gguf(path: Path, layers: int = 2, embd: int = 128, state: int = 16, rank: int = 8, conv: int = 4) -> Path:
    """A Mamba-1 (src/models/mamba.cpp): d_inner = 2 x n_embd (the loader allows no other), state
    ``state``, dt rank ``rank``, conv kernel ``conv``; no attention, no KV cache."""
    inner = 2 * embd
    keys: Keys = {
        **general("tiny mamba"), "context_length": (U32, 8192), "embedding_length": (U32, embd),
        "feed_forward_length": (U32, 0), "block_count": (U32, layers), "attention.head_count": (U32, 0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-5), "ssm.conv_kernel": (U32, conv),
        "ssm.inner_size": (U32, inner), "ssm.state_size": (U32, state), "ssm.time_step_rank": (U32, rank),
        **tokenizer(),
    }  # fmt: skip
    tensors = _trunk(embd)
    for i in range(layers):
        tensors |= {
            f"blk.{i}.attn_norm.weight": (embd,), f"blk.{i}.ssm_in.weight": (embd, 2 * inner),
            f"blk.{i}.ssm_conv1d.weight": (conv, inner), f"blk.{i}.ssm_conv1d.bias": (inner,),
            f"blk.{i}.ssm_x.weight": (inner, rank + 2 * state), f"blk.{i}.ssm_dt.weight": (rank, inner),
            f"blk.{i}.ssm_dt.bias": (inner,), f"blk.{i}.ssm_a": (state, inner), f"blk.{i}.ssm_d": (inner,),
            f"blk.{i}.ssm_out.weight": (inner, embd),
        }  # fmt: skip
    return typed_gguf_file(path, "mamba", keys, tensors)


@dataclass(frozen=True)
class Server:
    """A running llama-server: its base URL, its process, and the file its log goes to."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path


def get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """The status and body of a GET of ``url`` (an HTTP error's too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@contextmanager
def llama_server(model: Path, args: list[str], log: Path, timeout: float = 120.0) -> Iterator[Server]:
    """llama-server on ``model`` with ``args``, bound to 127.0.0.1 at a free port, one thread, its
    stdout and stderr in ``log``; yielded once /health answers 200 (within ``timeout`` seconds), then
    stopped by its PID: SIGINT (llama-server's graceful shutdown, which prints the memory breakdown),
    SIGKILL after 30 s."""
    binary = llama_server_binary()
    if binary is None:
        pytest.skip(f"no llama-server binary ({SERVER_ENV} or {DEFAULT_BINARY})")
    port = free_port()
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "1", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {process.returncode}: see {log}")
            try:
                if get(f"{server.url}/health", timeout=2.0)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not healthy within {timeout} s: see {log}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
