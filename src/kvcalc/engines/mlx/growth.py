"""How mlx-lm's cache buffers grow, replayed in integers (mlx-lm 0.32.2, mlx_lm/models/cache.py and
mlx_lm/generate.py; every branch below names the code it follows).

``generate_step`` feeds a prompt of N tokens as chunks of ``min(prefill_step_size, remaining - 1)``
while more than one token remains, then the last prompt token alone, then each generated token
alone. Each cache class sizes its buffer from those feeds:

- ``KVCache`` (and ``QuantizedKVCache``, which ``to_quantized`` makes with the same buffer) grows
  by ``ceil(S / 256) x 256`` slots when a feed of S tokens does not fit, first cutting the buffer
  back to the tokens it holds when that count is not a multiple of 256;
- ``RotatingKVCache`` (sliding layers, and every layer under ``max_kv_size``) appends a prompt
  chunk to at most ``max_size - 1`` kept tokens, and in single-token steps grows 256 slots at a time
  up to ``max_size``, trimming a longer buffer to ``max_size``;
- ``ChunkedKVCache`` (Llama 4's chunked layers) grows as ``KVCache`` and, before each forward,
  cuts itself to the newest ``chunk_size`` tokens.

The buffer is what ``nbytes`` counts, spare slots included.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

# cache.py: KVCache.step, RotatingKVCache.step, QuantizedKVCache.step, ChunkedKVCache.step.
STEP = 256


def _grow(size: int) -> int:
    return -(-size // STEP) * STEP


def prompt_feeds(prompt: int, prefill_step: int) -> Iterator[int]:
    """The lengths generate_step feeds a prompt in (generate.py: the ``while total_prompt_tokens -
    prompt_processed_tokens > 1`` loop, then ``_step(input_tokens=prompt)`` on what is left)."""
    remaining = prompt
    while remaining > 1:
        n = min(prefill_step, remaining - 1)
        yield n
        remaining -= n
    yield remaining


@lru_cache(maxsize=4096)
def _kv_after_prompt(prompt: int, prefill_step: int) -> tuple[int, int]:
    """(buffer slots, tokens held) of a KVCache after the prompt (KVCache.update_and_fetch),
    without a step per chunk: a million-token prompt is a few hundred chunks, and fit asks often."""
    if prompt == 1:
        return STEP, 1
    if prefill_step % STEP == 0:
        # Every chunk but the last ends on a 256 boundary: the buffer is the prompt, in steps of 256.
        return _grow(prompt), prompt
    full, rest = divmod(prompt - 1, prefill_step)
    # Over full chunks the spare slots (size - held) depend only on the spare before and on
    # held mod 256, which repeats: skip whole cycles of that state.
    spare, chunk = 0, 0
    seen: dict[tuple[int, int], int] = {}
    while chunk < full:
        state = (spare, chunk * prefill_step % STEP)
        if state in seen:
            cycle = chunk - seen[state]
            chunk += (full - chunk) // cycle * cycle
            seen = {}
            if chunk >= full:
                break
        seen[state] = chunk
        spare = _kv_feed(spare, chunk * prefill_step, prefill_step)
        chunk += 1
    held = full * prefill_step
    for s in (rest, 1) if rest else (1,):
        spare = _kv_feed(spare, held, s)
        held += s
    return held + spare, held


def _kv_feed(spare: int, held: int, s: int) -> int:
    """The spare slots after a feed of ``s`` tokens into a buffer holding ``held`` with ``spare``
    more: grown by ceil(s / 256) x 256 when it does not fit, cut back to ``held`` first when that is
    off a 256 boundary (self.keys = self.keys[..., :prev, :])."""
    if s <= spare:
        return spare - s
    return (0 if held % STEP else spare) + _grow(s) - s


def kv_slots(prompt: int, decode: int, prefill_step: int) -> int:
    """Slots a KVCache (or a QuantizedKVCache made from it) holds after a prompt of ``prompt``
    tokens and ``decode`` generated ones. Single-token steps add 256 slots when the buffer is full."""
    size, held = _kv_after_prompt(prompt, prefill_step)
    if held + decode > size:
        size += _grow(held + decode - size)
    return size


@lru_cache(maxsize=4096)
def _rotating_after_prompt(prompt: int, prefill_step: int, max_size: int, keep: int) -> tuple[int, int]:
    """(buffer slots, tokens seen) of a RotatingKVCache after the prompt."""
    size = idx = offset = 0
    feeds = list(_compact_feeds(prompt, prefill_step))
    for s, times in feeds:
        for done in range(times):
            before = size
            if s > 1:
                # _update_concat: put the buffer in temporal order (cutting unused slots past _idx),
                # keep at most max_size - 1 of it (the first ``keep`` and the newest), append.
                if offset:
                    if idx != size and idx >= offset:
                        size = idx
                    trim = size - max_size + 1
                    if trim > 0:
                        size -= trim
                    size += s
                else:
                    size = s
                offset += s
                idx = size
            else:
                size, idx = _rotating_step(size, idx, offset, max_size, keep)
                offset += 1
            if s > 1 and size == before and done:
                # A buffer past max_size - 1 no longer changes from chunk to chunk: skip the rest.
                offset += s * (times - done - 1)
                break
    return size, offset


def _compact_feeds(prompt: int, prefill_step: int) -> list[tuple[int, int]]:
    """prompt_feeds as (length, how many times in a row)."""
    if prompt == 1:
        return [(1, 1)]
    full, rest = divmod(prompt - 1, prefill_step)
    feeds = [(prefill_step, full)] if full else []
    return [*feeds, *([(rest, 1)] if rest else []), (1, 1)]


def _rotating_step(size: int, idx: int, offset: int, max_size: int, keep: int) -> tuple[int, int]:
    """(slots, write index) after one single-token step (RotatingKVCache._update_in_place)."""
    if size == 0 or (offset >= size and size < max_size):
        size += min(STEP, max_size - offset)
        idx = offset
    if size > max_size:
        size = max_size
        idx = max_size
    if idx == max_size:
        idx = keep
    return size, idx + 1


def rotating_slots(prompt: int, decode: int, prefill_step: int, max_size: int, keep: int = 0) -> int:
    """Slots a RotatingKVCache of ``max_size`` holds after the prompt and ``decode`` generated
    tokens: a buffer at max_size or more is cut to max_size at the first single-token step; a
    smaller one grows by min(256, max_size - offset) whenever it is full."""
    size, offset = _rotating_after_prompt(prompt, prefill_step, max_size, keep)
    if not decode:
        return size
    if size >= max_size:
        return max_size
    # Below max_size the buffer holds exactly ``offset`` tokens when it is full (every slot written).
    end = offset + decode
    if end > size:
        size += _grow(end - size)
    return min(size, max_size)


@lru_cache(maxsize=4096)
def chunked_slots(prompt: int, decode: int, prefill_step: int, chunk: int) -> int:
    """Slots a ChunkedKVCache holds after the prompt and ``decode`` generated tokens: each forward
    first cuts it to the newest ``chunk`` tokens (maybe_trim_front, called by llama4.py's model),
    then grows it as a KVCache."""
    size = offset = start = 0

    def feed(s: int) -> None:
        nonlocal size, offset, start
        if size:
            valid = offset - start
            if valid > chunk:
                start += valid - chunk
                size = chunk  # self.keys[..., trim:valid, :]
        held = offset - start
        if not size or held + s > size:
            if size and held % STEP:
                size = held
            size += _grow(s)
        offset += s

    for s, times in [*_compact_feeds(prompt, prefill_step), (1, decode)]:
        for _ in range(times):
            before = size, offset - start
            feed(s)
            if (size, offset - start) == before:
                break  # past the chunk each feed cuts and grows back the same: nothing changes more
    return size
