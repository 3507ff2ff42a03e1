"""The vLLM engine's own choices (kvcalc.engines.vllm): the batch defaults it takes for a GPU."""

from __future__ import annotations

import pytest

from kvcalc import api


def _defaults_note(notes: tuple[str, ...] | list[str]) -> list[str]:
    return [n for n in notes if n.startswith("vllm serve defaults")]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        # vllm serve on a GPU of 70 GiB or more (not an A100): 8,192 batched tokens, 1,024 sequences
        # (engine/arg_utils.py get_batch_defaults). Only what was not asked is a default.
        ({}, "max_num_batched_tokens 8,192, max_num_seqs 1,024 "),
        ({"max_num_seqs": 5}, "max_num_batched_tokens 8,192 "),
        ({"max_batched_tokens": 512}, "max_num_seqs 1,024 "),
        ({"max_num_seqs": 5, "max_batched_tokens": 512}, None),
    ],
)
def test_the_defaults_note_names_only_the_defaults_applied(options: dict[str, int], named: str | None) -> None:
    """A --max-num-seqs given was printed as one of 'vllm serve defaults', and with
    --max-batched-tokens given the max_num_seqs default went unnoted."""
    notes = _defaults_note(
        api.fit("llama-3.1-8b", gpu="h100-sxm", serving=api.Serving(engine="vllm", options=options)).notes
    )
    if named is None:
        assert notes == []
    else:
        assert len(notes) == 1 and f"not an A100): {named}(engine/arg_utils.py" in notes[0]
