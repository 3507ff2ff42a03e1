"""What the Falcon-H1 and Zamba2 test modules share: bytes under an engine, and a probe run.

The sources, as the module these tests were split from gave them:

Falcon-H1 (attention and a Mamba-2 mixer side by side in every layer) and Zamba2 (a Mamba-2 mixer in
every layer, plus K/V of a shared transformer block in its hybrid layers), each number derived by hand
next to it.

Sources:
- transformers 5.24 models/falcon_h1/configuration_falcon_h1.py (FalconH1Config: num_key_value_heads 8
  when absent, mamba_d_ssm 1024 when absent and mamba_expand x hidden_size when null, mamba_d_head
  "auto" = d_ssm // n_heads, validate_architecture: n_heads x d_head = d_ssm; layers_block_type is
  "hybrid" for every layer) and modeling_falcon_h1.py (FalconH1Attention: head_dim from the config else
  hidden // heads; FalconH1Mixer: conv_dim = d_ssm + 2 x n_groups x d_state, SSM state (n_heads, d_head,
  d_state)); models/zamba2/configuration_zamba2.py (Zamba2Config.__post_init__: attention_head_dim
  = 2 x hidden // heads, mamba_headdim = mamba_expand x hidden // n_mamba_heads, hybrid_layer_ids, the
  54-layer default, values in the file kept over the derived ones) and modeling_zamba2.py (the shared
  block's K/V are cached under each hybrid layer's own index); cache_utils.py ("hybrid" ->
  LinearAttentionAndFullAttentionLayer: K/V plus the conv state for the whole kernel and the SSM state).
- vLLM vllm/model_executor/models/falcon_h1.py @ 59e45989 (FalconH1ParallelHybrid: an Attention and a
  MambaMixer2 per layer; get_mamba_state_shape_from_config: mamba2_state_shape of d_ssm, n_heads,
  d_head, d_state, conv kernel - 1) and zamba2.py @ 0527cbc7 (one Attention per hybrid layer, "KV cache
  is unique for every attention layer", head_dim = attention_head_dim, K/V heads = num_attention_heads;
  a MambaMixer2 in every layer).
- SGLang python/sglang/srt/configs/falcon_h1.py @ 0464817a (attention and mamba on every layer; conv
  (conv_dim, d_conv - 1), temporal (d_state, d_head, n_heads)); no zamba2 model.
- llama.cpp 0c1e570 src/llama-model.cpp create_memory (LLM_ARCH_FALCON_H1: filter_attn and filter_recr
  true for every layer, recurrent states GGML_TYPE_F32), src/llama-hparams.cpp (n_embd_r = (d_conv - 1)
  x (d_inner + 2 x n_group x d_state), n_embd_s = d_state x d_inner); no zamba2 architecture.
Real configs: tests/fixtures/Falcon-H1-7B.json and zyphra-Zamba2/config.json (see fixtures/SOURCES.md)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.engines import make_engine
from kvcalc.spec import ModelSpec


def _bytes(spec: ModelSpec, engine: str, tokens: int = 4096) -> tuple[int, int]:
    est = estimate(spec, Workload(tokens=tokens), engine=make_engine(engine)[0])
    return est.per_token_bytes, est.fixed_bytes_per_sequence


def _probe(run_cli: Any, model: str) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", model, "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    return data
