"""mlx_lm.server's scheduling (mlx-lm 0.32.2: mlx_lm/server.py ``_generate`` and ``_serve_single``,
mlx_lm/generate.py ``BatchGenerator`` and ``generate_step``), for ``kvcalc simulate``.

mlx_lm.server batches a request when its model's caches can merge (every cache class but
QuantizedKVCache, ConcatenateKVCache and ChunkedKVCache has ``merge``), no draft model, no seed and
no ``--kv-bits`` (``_is_batchable``); otherwise it serves one request at a time, in arrival order.

Batched (``BatchGenerator._next``, one call a step):

- the generation batch decodes first, one token a sequence;
- if it holds ``--decode-concurrency`` (32) sequences, that is the step; otherwise up to
  ``--prompt-concurrency`` (8) sequences in prompt processing, taking waiting requests in arrival
  order while decode-concurrency less the generation batch allows;
- a sequence with only its prompt's last token left moves to the generation batch (``split``), whose
  first pass reads that token at once; the generation batch runs one step ahead (``_step`` returns
  the token the previous pass sampled), so the first token is answered with the next step's decode:
  simulated as a pass that feeds nothing in the split step (a 0-token entry: the sequence's cache
  is read) and the last prompt token fed, and the first token sampled, in the next decode step;
- every other sequence in prompt processing reads up to ``--prefill-step-size`` (2048) tokens of its
  prompt but the last.

One at a time (``generate_step``): the prompt but its last token in passes of prefill-step-size,
then the last token, which samples the first, then a token a step.

Nothing is refused and nothing preempted: each request's cache grows as it goes (buffers in steps
of 256 tokens), with no pool to bound it. Not modelled: the prompt cache (prompts are taken as
unshared), the right padding of a prompt batch's shorter prompts, and how often the server looks
at its queue between steps (``TimeBudget``).
"""

from __future__ import annotations

from collections import deque

from kvcalc.calc.simulate import Batch, Live, Request

# server.py's arguments: --decode-concurrency 32, --prompt-concurrency 8, --prefill-step-size 2048.
DECODE_CONCURRENCY = 32
PROMPT_CONCURRENCY = 8
PREFILL_STEP_SIZE = 2048


class MlxScheduler:
    """mlx_lm.server's BatchGenerator (``batched``) or its one-at-a-time path; ``memory_tokens``:
    the tokens the memory holds, reported as the pool though nothing bounds the caches."""

    def __init__(self, memory_tokens: int, *, batched: bool = True, decode_concurrency: int = DECODE_CONCURRENCY,
                 prompt_concurrency: int = PROMPT_CONCURRENCY,
                 prefill_step_size: int = PREFILL_STEP_SIZE) -> None:  # fmt: skip
        self.pool_units = memory_tokens
        self.unit_tokens = 1
        self.preemptions = 0
        self._batched = batched
        # BatchGenerator.__init__: completion_batch_size = max(completion, prefill).
        self._decode_cap = max(decode_concurrency, prompt_concurrency) if batched else 1
        self._prompt_cap = prompt_concurrency if batched else 1
        self._step = prefill_step_size
        self._generation: list[Live] = []
        self._prompts: list[Live] = []
        self._waiting: deque[Live] = deque()

    def refused(self, request: Request) -> str | None:
        return None

    def admit(self, live: Live) -> None:
        self._waiting.append(live)

    def running(self) -> int:
        return len(self._generation) + len(self._prompts)

    def waiting(self) -> int:
        return len(self._waiting)

    def used_units(self) -> int:
        return sum(live.computed for live in (*self._generation, *self._prompts))

    def release(self, live: Live) -> None:
        self._generation.remove(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch: Batch = [(live, 1) for live in self._generation]
        if len(self._generation) >= self._decode_cap:
            return batch, "seqs" if self._waiting else None
        room = min(self._prompt_cap - len(self._prompts), self._decode_cap - len(self._generation))
        while room > 0 and self._waiting:
            self._prompts.append(self._waiting.popleft())
            room -= 1
        if not self._batched:  # generate_step: the last prompt token is read at once, no split step
            for live in self._prompts:
                left = live.request.prompt - 1 - live.computed
                batch.append((live, min(left, self._step) if left > 0 else 1))
                if left <= 0:
                    self._generation.append(live)
            self._prompts = [p for p in self._prompts if p not in self._generation]
            return batch, "seqs" if self._waiting else None
        last = [p for p in self._prompts if p.computed >= p.request.prompt - 1]
        self._generation += last
        self._prompts = [p for p in self._prompts if p not in last]
        # split: GenerationBatch's first pass reads each one's last prompt token now, but the token it
        # samples is answered with the next step's decode: a pass that feeds the simulator nothing
        # (it reads the sequence's cache), the next decode step feeds and samples.
        batch += [(live, 0) for live in last]
        for live in self._prompts:
            batch.append((live, min(live.request.prompt - 1 - live.computed, self._step)))
        return batch, "seqs" if self._waiting else None
