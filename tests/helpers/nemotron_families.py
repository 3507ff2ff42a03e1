"""What the Nemotron-H and NAS (block_configs) test modules share.

The sources, as the module these tests were split from gave them:

Layouts with layers that cache nothing: Nemotron-H's hybrid pattern (Mamba-2, attention, MLP/MoE)
and NAS ``block_configs`` (Llama-3.3-Nemotron-Super-49B), each number derived by hand next to it.

Sources: transformers 5.24 models/nemotron_h/configuration_nemotron_h.py and modeling_nemotron_h.py
(NemotronHConfig._pattern_to_list, NemotronHMamba2Mixer, NemotronHAttention) and cache_utils.py
(get_layer_types_and_kwargs gives "mlp"/"moe" layers a dummy cache layer); vLLM's
vllm/model_executor/models/nemotron_nas.py @ 00bd1493 (DeciLMDecoderLayer: no attention for a no_op
block, num_attention_heads // n_heads_in_group KV heads otherwise). Real configs: tests/fixtures
(see fixtures/SOURCES.md)."""

from __future__ import annotations

from kvcalc.spec import Kind

SUPER_49B = "Llama-3_3-Nemotron-Super-49B-v1.json"


def _count(kinds: list[Kind]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind in kinds:
        out[str(kind)] = out.get(str(kind), 0) + 1
    return out
