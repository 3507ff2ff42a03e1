"""llama-server's slots (tools/server/server-context.cpp and server-queue.cpp at llama.cpp 0c1e570,
the source kvcalc reads: vendored in llama-cpp-python 0.3.36), for ``kvcalc simulate``. The prompt
cache and the slot choice below were read in a later copy of server-context.cpp and common.h of the
same structure (``slot.prompt.tokens``, ``prompt_cache``), not at 0c1e570 itself (whose C++ source
is not on this machine); the slots' order and timings were checked against the 0c1e570 binary's
replies and -lv 4 log, with the cache off.

- ``-np`` slots; a request takes an idle slot when it is dequeued (``get_available_slot``), else it
  is deferred (``queue_tasks.defer``) and the first deferred task goes back to the front of the
  queue when a slot is released: first come, first served. The slot: the idle one whose cached
  tokens share the longest prefix with the prompt, if that prefix over the prompt's length is over
  ``slot_prompt_similarity`` (common/common.h: 0.1, ``--slot-prompt-similarity``; the first slot of
  equals: ``sim_cur > sim_best``), else the least recently used idle slot, the last of equals
  (``t_last_used <=``; a slot never used has -1). It chooses so whether the prompt cache is on or
  off: a slot keeps its tokens either way.
- The prompt cache (``cache_prompt``, true by default, tools/server/README.md; ``prefix_caching``
  here): a slot's cells keep its last request's prompt and output tokens, and a new task reads
  only what follows the common prefix of those and its prompt (``update_slots``: ``n_past =
  slot.prompt.tokens.get_common_prefix(input_tokens)``), less one where that is the whole prompt
  ("need to evaluate at least 1 token"). Requests share only their group's prefix (their suffixes
  and outputs differ): a request of group g on a slot whose last request was of group g reuses
  min(both prefix lengths) tokens (``hit_tokens`` counts them), any other reuses none. Off
  (``cache_prompt`` false): ``n_past`` 0, every prompt read whole.
- Each step (``update_slots``): every generating slot adds its sampled token (1 each), then the
  slots still reading a prompt, in slot order, add prompt tokens while the batch holds fewer than
  n_batch (continuous batching, ``cont_batching`` true by default). A slot whose prompt is read
  whole samples its first token in that step.
- The batch runs as one llama_decode of up to n_batch tokens, which llama.cpp splits into ubatches
  of n_ubatch run back to back; the step's time is the cost of all its tokens, so the split adds
  only its per-pass overhead, which is not modelled.
- A slot's context is ``n_ctx_seq``: ``pad(n_ctx / np, 256)`` cells of its own stream, or all n_ctx
  with ``--kv-unified`` (src/llama-context.cpp). A prompt of n_ctx_seq tokens or more is refused
  ("request exceeds the available context size"); with context shift off (common.h ``ctx_shift``
  false) generation stops when the slot's tokens reach n_ctx_seq - 1, so a request of prompt +
  output over n_ctx_seq would be cut: refused here. Never a preemption: a slot keeps its cells.
- A unified cache shared by slots that together outgrow it makes llama-server fail every slot
  ("Context size has been exceeded", ``decode``): simulated as an error.

Not modelled: the RAM prompt cache (``--cache-ram``, 8192 MiB by default, ``get_available_slot``'s
``prompt_save`` / ``prompt_load``), which can restore into a slot another slot's saved prompt (so the
real server may hit more) and takes time to copy states; an idle slot's cached cells in a unified
cache (not counted as used; ``try_clear_idle_slots`` purges them when it is full); speculative
decoding; and the HTTP server's threads: a non-streamed request holds one of max(np + 2, cores - 1)
(tools/server/server.cpp ``n_threads_http``) until its reply, and requests past them wait in
cpp-httplib's pool, which may hand adjacent ones to the task queue out of order (seen on a real -np
4 replay: tests/fixtures/servers/llama-server-0c1e570/README.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvcalc.calc.simulate import Batch, Live, Request
from kvcalc.errors import UsageError


@dataclass(eq=False)
class _Slot:
    id: int
    live: Live | None = None
    t_last_used: int = -1
    group: int = -1  # the shared prefix group of the request its cells last held (-1: none)
    prefix_len: int = 0  # and that group's prefix length


class LlamaServerScheduler:
    """llama-server's ``slots`` slots of ``slot_context`` tokens, batches of ``n_batch`` tokens; a
    unified cache of ``unified_cells`` cells (None: one stream per slot); the prompt cache on
    (``prefix_caching``, cache_prompt) and slots chosen by ``similarity`` (slot_prompt_similarity,
    0: least recently used only)."""

    def __init__(self, slots: int, slot_context: int, n_batch: int, *, unified_cells: int | None = None,
                 prefix_caching: bool = True, similarity: float = 0.1) -> None:  # fmt: skip
        self._slots = [_Slot(i) for i in range(slots)]
        self._context = slot_context
        self._n_batch = n_batch
        self._unified = unified_cells
        self.pool_units = unified_cells if unified_cells is not None else slots * slot_context
        self.unit_tokens = 1
        self.preemptions = 0
        self._waiting: deque[Live] = deque()
        self._releases = 0  # t_last_used's clock: only its order matters
        # Read by kvcalc's API: the prompt cache on, and the prompt tokens it spared.
        self.prefix_caching = prefix_caching
        self.similarity = similarity
        self.hit_tokens = 0

    def refused(self, request: Request) -> str | None:
        if request.prompt >= self._context:
            return (f"request ({request.prompt:,} tokens) exceeds the available context size ({self._context:,} "
                    "tokens)")  # fmt: skip
        if request.prompt + request.output > self._context:
            return (f"prompt + output {request.prompt + request.output:,} tokens is over the slot's context "
                    f"{self._context:,}: llama-server (context shift off) would cut its output")  # fmt: skip
        return None

    def admit(self, live: Live) -> None:
        self._waiting.append(live)

    def running(self) -> int:
        return sum(1 for s in self._slots if s.live is not None)

    def waiting(self) -> int:
        return len(self._waiting)

    def used_units(self) -> int:
        return sum(s.live.held for s in self._slots if s.live is not None)

    def release(self, live: Live) -> None:
        for slot in self._slots:
            if slot.live is live:
                slot.live = None
                slot.t_last_used = self._releases
                slot.group, slot.prefix_len = live.request.prefix, live.request.prefix_len
                self._releases += 1
        live.held = 0

    @staticmethod
    def _common(slot: _Slot, request: Request) -> int:
        """get_common_prefix of the slot's cached tokens and the prompt: the group's prefix, if the
        slot's last request was of the same group, else none."""
        if request.prefix < 0 or slot.group != request.prefix:
            return 0
        return min(slot.prefix_len, request.prefix_len)

    def _idle_slot(self, request: Request) -> _Slot | None:
        """get_available_slot: the idle slot of the longest common prefix, if its share of the
        prompt is over the similarity threshold (the first of equals), else by LRU (the last of
        equals)."""
        best, sim_best = None, 0.0
        if self.similarity != 0 and request.prompt:
            for slot in self._slots:
                sim = self._common(slot, request) / request.prompt
                if slot.live is None and sim > sim_best and sim > self.similarity:
                    best, sim_best = slot, sim
        if best is not None:
            return best
        for slot in self._slots:
            if slot.live is None and (best is None or slot.t_last_used <= best.t_last_used):
                best = slot
        return best

    def _start(self, slot: _Slot, live: Live) -> None:
        """The slot takes the task: with the prompt cache on, its cached common prefix is kept
        (n_past), less one if that is the whole prompt; off, n_past 0."""
        slot.live = live
        if not self.prefix_caching:
            return
        n_past = self._common(slot, live.request)
        if n_past == live.request.prompt and n_past > 0:
            n_past -= 1
        live.computed = live.held = n_past
        self.hit_tokens += n_past

    def schedule(self) -> tuple[Batch, str | None]:
        while self._waiting:
            slot = self._idle_slot(self._waiting[0].request)
            if slot is None:
                break
            self._start(slot, self._waiting.popleft())
        batch: Batch = []
        for slot in self._slots:  # the sampled tokens of the generating slots
            if slot.live is not None and slot.live.computed >= slot.live.request.prompt:
                batch.append((slot.live, 1))
        size = len(batch)
        for slot in self._slots:  # then prompts, in slot order, while the batch has room
            live = slot.live
            if live is None or live.computed >= live.request.prompt or size >= self._n_batch:
                continue
            n = min(live.request.prompt - live.computed, self._n_batch - size)
            batch.append((live, n))
            size += n
        for live, n in batch:
            live.held += n
        if self._unified is not None and self.used_units() > self._unified:
            raise UsageError(f"llama-server's unified KV cache of {self._unified:,} cells is full: it fails every slot "
                             "(\"Context size has been exceeded\"); give it a larger context (-c)")  # fmt: skip
        return batch, "seqs" if self._waiting else None
