"""A real ``mlx_lm.server`` (mlx-lm 0.32.2) on 127.0.0.1 for ``kvcalc check``: a tiny random-weight
Llama with a word-level tokenizer written in plain Python (no numpy, no transformers in the test's
own environment), served from mlx-lm's Python ($KVCALC_MLX_PYTHON or ./.venv-mlx/bin/python) at a
free port, waited for through GET /health, and stopped by its PID however the test ends.

The model: mlx_lm/models/llama.py's weight names (one layer, hidden 64, 2 query heads and 1 KV head
of 32, MLP 128, 16 words, tied embeddings), float32, in a single model.safetensors written by
hand from the format's spec (an 8-byte little-endian header length, the JSON header, the raw
tensors). The tokenizer: a ``tokenizers`` WordLevel model in tokenizer.json, loaded through
PreTrainedTokenizerFast as mlx_lm.utils.load_tokenizer does, offline.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.fake_server import free_port

ROOT = Path(__file__).resolve().parents[2]
ENV_PYTHON = "KVCALC_MLX_PYTHON"
START_TIMEOUT_S = 60.0

WORDS = ["<unk>", "<s>", "</s>", "hello", "world", "the", "a", "cache", "of", "keys", "and", "values", "is", "in",
         "memory", "."]  # fmt: skip
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
    "vocab_size": len(WORDS),
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def mlx_python() -> str | None:
    """mlx-lm's Python, found as tests/engines/mlx/ find it: $KVCALC_MLX_PYTHON, then ./.venv-mlx."""
    local = ROOT / ".venv-mlx" / "bin" / "python"
    for candidate in (os.environ.get(ENV_PYTHON), str(local) if local.is_file() else None):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _tensors(config: dict[str, int]) -> dict[str, tuple[int, ...]]:
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, mlp = config["head_dim"], config["intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config["vocab_size"], hidden),
                                          "model.norm.weight": (hidden,)}  # fmt: skip
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        shapes |= {
            prefix + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            prefix + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            prefix + "mlp.gate_proj.weight": (mlp, hidden),
            prefix + "mlp.up_proj.weight": (mlp, hidden),
            prefix + "mlp.down_proj.weight": (hidden, mlp),
            prefix + "input_layernorm.weight": (hidden,),
            prefix + "post_attention_layernorm.weight": (hidden,),
        }
    return shapes


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> None:
    """Random float32 tensors (uniform in +-0.05) in the safetensors format."""
    rng = random.Random(seed)
    header: dict[str, object] = {"__metadata__": {"format": "mlx"}}
    blobs: list[bytes] = []
    offset = 0
    for name, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        blob = struct.pack(f"<{count}f", *(rng.uniform(-0.05, 0.05) for _ in range(count)))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)  # the spec lets the header be padded with spaces
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def _special(index: int, word: str) -> dict[str, object]:
    flags = dict.fromkeys(("single_word", "lstrip", "rstrip", "normalized"), False)
    return {"id": index, "content": word, **flags, "special": True}


def write_tiny_model(folder: Path) -> Path:
    """config.json, model.safetensors and a word-level tokenizer in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=1))
    write_safetensors(folder / "model.safetensors", _tensors(CONFIG))  # type: ignore[arg-type]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_special(i, word) for i, word in enumerate(WORDS[:3])],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(WORDS)}, "unk_token": "<unk>"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 2048,
    }))  # fmt: skip
    return folder


@dataclass(frozen=True)
class MlxServer:
    url: str
    model: Path
    pid: int
    log: Path


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def mlx_server(
    python: str, folder: Path, *, hub_cache: bool = True, timeout_s: float = START_TIMEOUT_S
) -> Iterator[MlxServer]:
    """``mlx_lm.server --model DIR --host 127.0.0.1 --port P`` (mlx-lm's console entry point, run as
    ``python -m mlx_lm server``) on a tiny model written in ``folder``; ready once /health answers
    200 (its generation thread loaded the model), stopped by its PID on leaving. Its Hugging Face
    cache is an empty one in ``folder`` (``hub_cache``) or none at all: /v1/models scans it
    (server.py handle_models_request, scan_cache_dir), and with no cache folder it answers 200 with
    an empty body, the scan raising after the headers went out."""
    model = write_tiny_model(folder / "tiny-llama")
    if hub_cache:
        (folder / "hf-home" / "hub").mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / "mlx_lm.server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(folder / "hf-home"), "TOKENIZERS_PARALLELISM": "false"}
    command = [python, "-m", "mlx_lm", "server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url):
            if process.poll() is not None:
                raise RuntimeError(f"mlx_lm.server exited with {process.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"mlx_lm.server not ready in {timeout_s:.0f} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield MlxServer(url, model, process.pid, log)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
