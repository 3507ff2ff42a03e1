"""``kvcalc probe --engine llama.cpp`` (or llama-server)'s prober: light, read before the llama.cpp
probe module loads (kvcalc.engines.probing.Prober)."""

from kvcalc.engines.probing import Prober

_KNOBS = ("ubatch", "n_batch", "kv_unified", "swa_full")

PROBER = Prober(
    engine="llama.cpp",
    refusal="the real llama.cpp probe (it runs here, exactly)",
    named_as="--engine llama.cpp without --raw (the real llama.cpp probe)",
    runs="probe_llamacpp",
    flags=("--tokens", "--batch", "--kv-dtype", "--k-dtype", "--v-dtype", *(f"--{k.replace('_', '-')}" for k in _KNOBS),
           "--timeout"),
    # --engine: llama.cpp or llama-server, whose settings differ
    params=(("--engine", "engine"), ("--tokens", "tokens"), ("--batch", "batch"), ("--kv-dtype", "kv_dtype"),
            ("--k-dtype", "k_dtype"), ("--v-dtype", "v_dtype"), *((f"--{k.replace('_', '-')}", f"options.{k}")
            for k in _KNOBS), ("--timeout", "timeout")),
    always=("--engine", "--tokens", "--batch", "--timeout"),
)  # fmt: skip
