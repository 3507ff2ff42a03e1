"""``kvcalc probe --engine sglang``'s prober: light, read before SGLang's probe module loads
(kvcalc.engines.probing.Prober)."""

from kvcalc.engines.probing import Prober

PROBER = Prober(
    engine="sglang",
    refusal="the SGLang probe (it builds SGLang's pools)",
    named_as="--engine sglang (the SGLang probe)",
    runs="probe_sglang",
    flags=("--tokens", "--kv-budget", "--block-size", "--kv-dtype", "--engine-python", "--timeout"),
    # --tokens is the context length only when given: else the model's own
    params=(("--tokens", "context_length"), ("--kv-budget", "kv_budget"), ("--block-size", "block_size"),
            ("--kv-dtype", "kv_dtype"), ("--engine-python", "python"), ("--timeout", "timeout")),
    always=("--timeout",),
)  # fmt: skip
