"""mlx-lm's buffer growth, worked by hand from mlx_lm 0.32.2's cache.py and generate.py.

generate_step feeds a prompt of N tokens as chunks of min(prefill_step_size, remaining - 1) while
more than one token remains, then the last one alone, then each generated token alone.
KVCache.update_and_fetch: when a feed of S does not fit, cut the buffer to the tokens held if
that count is not a multiple of 256, then add ceil(S / 256) x 256 slots.
RotatingKVCache: a chunk is appended to at most max_size - 1 kept tokens; a single token grows a
full buffer by min(256, max_size - offset) and trims one larger than max_size to max_size.
Every figure below was also seen in the real mlx-lm (test_mlx_conformance.py).
"""

from __future__ import annotations

import pytest

from kvcalc.engines.mlx import growth


def test_prompt_feeds_leave_the_last_token_alone() -> None:
    assert list(growth.prompt_feeds(1, 2048)) == [1]
    assert list(growth.prompt_feeds(2, 2048)) == [1, 1]
    assert list(growth.prompt_feeds(3000, 1000)) == [1000, 1000, 999, 1]
    assert list(growth.prompt_feeds(4097, 2048)) == [2048, 2048, 1]


@pytest.mark.parametrize(
    ("prompt", "decode", "step", "slots"),
    [
        (1, 0, 2048, 256),  # one feed of 1: ceil(1/256) x 256
        (256, 0, 2048, 256),  # 255 -> 256 slots, then the 256th fits
        (257, 0, 2048, 512),  # 256 -> 256 slots full; the last token: 256 % 256 = 0, + 256
        (2049, 0, 2048, 2304),  # 2048 -> 2048; + 1 -> + 256
        (300, 300, 2048, 768),  # 299 -> 512; 1 fits; 300 more reach 600: + ceil(88/256) x 256
        # 1000 -> 1024; 1000 more: 1000 % 256 != 0, cut to 1000, + 1024 = 2024; 999 more: cut to
        # 2000, + 1024 = 3024; the last token fits.
        (3000, 0, 1000, 3024),
    ],
)
def test_kv_slots(prompt: int, decode: int, step: int, slots: int) -> None:
    assert growth.kv_slots(prompt, decode, step) == slots


def test_kv_slots_are_256_steps_whenever_the_prefill_step_is_a_multiple_of_256() -> None:
    # Every feed then lands on a 256 boundary, so the split of T into prompt and generated tokens
    # does not matter: ceil(T / 256) x 256.
    for total in (1, 255, 256, 257, 511, 2048, 2049, 5000):
        for decode in (0, 1, total // 2):
            if decode < total:
                assert growth.kv_slots(total - decode, decode, 2048) == -(-total // 256) * 256


@pytest.mark.parametrize(
    ("prompt", "decode", "window", "keep", "slots"),
    [
        (600, 0, 1024, 0, 855),  # chunk of 599 -> 599; the last token grows it by min(256, 425)
        (100, 500, 1024, 0, 611),  # 99 -> 355 at the 100th token; 600 tokens need one more 256
        (300, 2, 200, 0, 200),  # 299 (kept as is) -> cut to 200 at the first single token
        (150, 0, 200, 0, 200),  # 149 -> grows by min(256, 51) = 51
        (5000, 0, 1024, 4, 1024),  # chunks keep 1023 + the chunk; the last token cuts to 1024
    ],
)
def test_rotating_slots(prompt: int, decode: int, window: int, keep: int, slots: int) -> None:
    assert growth.rotating_slots(prompt, decode, 2048, window, keep) == slots


def test_chunked_slots_cut_to_the_chunk_then_grow() -> None:
    # Llama 4's chunk 256: 299 -> 512 slots; the next forward cuts to the newest 256, which a
    # token then overflows: 256 % 256 = 0, + 256 = 512, and so on every step.
    assert growth.chunked_slots(300, 20, 2048, 256) == 512
    # Below the chunk it is a KVCache.
    assert growth.chunked_slots(100, 0, 2048, 8192) == 256
