"""vLLM's capacity plan (kvcalc.engines.vllm.capacity)."""

from __future__ import annotations


def test_vllm_fit_uses_the_downcast_dtype(run_cli) -> None:
    # One vLLM page of gemma-2-9b in bf16: 16 tokens x 8 heads x (256 + 256) x 2 B = 131,072 B; 42
    # layers in two kinds of 21 share each block index, so a block is 21 x 131,072 B.
    data = run_cli("fit", "gemma-2-9b", "--engine", "vllm", "--kv-budget", "10GiB", "--json").json()
    assert data["vllm"]["page_bytes"] == 131_072
    assert data["vllm"]["num_blocks"] == 10 * 2**30 // 131_072 // 21
