"""Sequences: what a call caches, as one object (the short forms ``tokens=``, ``batch=``... are
the common case)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc import checks
from kvcalc.errors import UsageError


@dataclass(frozen=True)
class Sequences:
    """The sequences a call sizes: ``batch`` sequences of ``tokens`` tokens each (or ``prompt`` +
    ``output``; None: the command's default), the first ``shared_prefix`` tokens shared by all of
    them (prefix caching), an encoder-decoder model's ``encoder_tokens``, and ``images`` per
    sequence of ``image_tokens`` tokens each (Llama 3.2 Vision; None: the model's own tiling).

    >>> estimate("llama-3.2-11b-vision", sequences=Sequences(tokens=2048, images=1))  # doctest: +SKIP
    """

    tokens: int | None = None
    prompt: int | None = None
    output: int | None = None
    batch: int = 1
    shared_prefix: int = 0
    encoder_tokens: int | None = None
    images: int | None = None
    image_tokens: int | None = None


def as_sequences(
    sequences: Sequences | None,
    *,
    tokens: int | None = None,
    prompt: int | None = None,
    output: int | None = None,
    batch: int = 1,
    takes: tuple[str, ...] = ("prompt", "output", "shared_prefix", "encoder_tokens", "images", "image_tokens"),
    what: str = "an estimate",
) -> Sequences:
    """The Sequences a call asks for: ``sequences``, or the short forms, not both. A field the call
    does not ``take`` (beside tokens and batch) is refused unless it is left at its default."""
    checks.instance(sequences, "sequences", Sequences, "a kvcalc.Sequences or None")
    if sequences is None:
        return Sequences(tokens=tokens, prompt=prompt, output=output, batch=batch)
    short = {
        "tokens": tokens,
        "prompt": prompt,
        "output": output,
        "batch": None if type(batch) is int and batch == 1 else batch,
    }
    given = next((name for name, value in short.items() if value is not None), None)
    if given is not None:
        raise UsageError(f"{given} is part of sequences: give sequences or {given}, not both",
                         param=("sequences", given))  # fmt: skip
    for name, default in (("prompt", None), ("output", None), ("shared_prefix", 0), ("encoder_tokens", None),
                          ("images", None), ("image_tokens", None)):  # fmt: skip
        if name not in takes and getattr(sequences, name) != default:
            raise UsageError(f"{name} changes nothing in {what}", param=name)
    return sequences
