"""``kvcalc probe --engine mlx``'s prober: light, read before mlx-lm's probe module loads
(kvcalc.engines.probing.Prober)."""

from kvcalc.engines.probing import Prober

_KNOBS = ("kv_bits", "kv_group_size", "quantized_kv_start", "max_kv_size", "prefill_step_size")

PROBER = Prober(
    engine="mlx",
    refusal="the mlx-lm probe (one sequence, its own formats)",
    named_as="--engine mlx (the mlx-lm probe)",
    runs="probe_mlx",
    flags=("--tokens", "--decode", *(f"--{k.replace('_', '-')}" for k in _KNOBS), "--window", "--engine-python",
           "--timeout"),
    params=(("--tokens", "tokens"), ("--decode", "decode"), *((f"--{k.replace('_', '-')}", f"options.{k}")
            for k in _KNOBS), ("--window", "window"), ("--engine-python", "python"), ("--timeout", "timeout")),
    always=("--tokens", "--decode", "--timeout"),
)  # fmt: skip
