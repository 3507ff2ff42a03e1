"""The model probe's prober (``kvcalc probe``'s default, and every engine's under ``--raw``): light,
read before anything heavy loads (kvcalc.engines.probing.Prober)."""

from kvcalc.engines.probing import Prober

PROBER = Prober(
    engine="transformers",
    refusal="the model probe (transformers, or the estimated tensors under --raw)",
    named_as="the model probe (--engine transformers, or --raw)",
    runs="probe",
    flags=(
        "--tokens",
        "--batch",
        "--decode",
        "--kv-dtype",
        "--device",
        "--raw",
        "--tolerance",
        "--print-request",
        "--from-result",
        "--images",
        "--image-tokens",
        "--encoder-tokens",
    ),
    real=False,
)
