"""``kvcalc probe --engine vllm``'s prober: light, read before vLLM's probe module loads
(kvcalc.engines.probing.Prober)."""

from kvcalc.engines.probing import Prober

PROBER = Prober(
    engine="vllm",
    refusal="the real vLLM probe (it starts vLLM on the config's geometry)",
    named_as="--engine vllm (the real vLLM probe)",
    runs="probe_vllm",
    flags=("--tokens", "--kv-budget", "--block-size", "--max-batched-tokens", "--engine-python", "--timeout"),
    params=(("--tokens", "max_model_len"), ("--kv-budget", "kv_budget"), ("--block-size", "block_size"),
            ("--max-batched-tokens", "max_batched_tokens"), ("--engine-python", "python"), ("--timeout", "timeout")),
    always=("--tokens", "--timeout"),
)  # fmt: skip
