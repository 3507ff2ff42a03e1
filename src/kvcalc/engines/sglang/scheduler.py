"""SGLang's scheduler (sglang 0.5.23: srt/managers/scheduler.py, schedule_policy.py PrefillAdder,
schedule_batch.py, mem_cache/prefill_budget.py, managers/scheduler_components/
new_token_ratio_tracker.py; the plain path: one GPU rank, fcfs, no speculative decoding, no
overlap), over the token pool ``kvcalc fit`` finds (the SGLang plan's max_total_num_tokens in pages
of page_size), for ``kvcalc simulate``.

Each step (``get_next_batch_to_run``) is a prefill batch when one can be built, else a decode step
of every running request. With ``enable_mixed_chunk`` off (the default) prefill and decode never
share a step; on (and chunked prefill on), the running requests decode inside the prefill batch
(``mix_with_running``), each taking one token of the chunk and input budgets and of the admission
offsets (``PrefillAdder(num_mixed_decode_tokens=running_bs)``), when the pool still holds their
tokens after the prefill (``check_decode_mem``; else they sit the step out, unretracted).

- A prefill batch (``_get_new_batch_prefill_raw``): none while ``batch_is_full`` (set when a request
  did not fit or the running requests reach ``max_running_requests``; cleared when a request leaves
  the running batch, or it is empty) unless a chunked request is half done. The chunked request's
  next chunk first (``add_chunked_req``: at most the chunk budget), then waiting requests in queue
  order while the chunk budget (``chunked_prefill_size``) and ``max_prefill_tokens`` last. A request
  is admitted only if ``prompt + min(max_new_tokens, 4096) + page_size`` is below the pool's free
  tokens less what the running requests are expected to still write: each running request's
  ``min(max_new - generated, 4096) x new_token_ratio`` (1 for ``ignore_eos``), and each request
  admitted in this batch ``pad(chunk, page) + page_size + its clipped max_new`` (its max_new 0 while
  it is still being chunked) (``PrefillBudget.check_prefill``/``reserve``). A prompt longer than
  what the chunk budget leaves is cut there (page-aligned) and goes on next step; only one
  request is chunked at a time. A request that does not fit stops admission and sets
  ``batch_is_full`` (head of line).
- A decode step (``update_running_batch``): every running request writes one token; a request
  needs a new page when its tokens fill its pages (``kv_committed_len % page_size == 0``). When
  the free tokens do not hold the step (``check_decode_mem``), requests are retracted
  (``retract_decode``): the one with the fewest output tokens (then the longest prompt) first,
  at least one, until the step fits, always keeping one; each loses its cache and goes to the
  BACK of the waiting queue (``_add_request_to_queue``), to be prefilled again, prompt and outputs;
  new_token_ratio becomes ``min(1, (outputs so far + 20 x running) / (their max_new + 1))`` of the
  requests kept. A decode step with no retraction decays the ratio by ``(init - min) / 600`` down
  to ``min``; it returns to ``init`` (0.7 x schedule_conservativeness 1.0; min 0.14 x init) when the
  server is idle (``on_idle``).

The radix cache (``prefix_caching``, SGLang's default; ``--disable-radix-cache`` turns it off;
mem_cache/radix_cache.py RadixCache, mem_cache/common.py): a tree of a group's shared prefix
(Request.prefix, its ``prefix_len`` tokens in whole pages) and under it each request's own tokens.
A waiting request taken up for admission matches the tree (``match_prefix``): its group's prefix
and, for a retracted request, its own prompt, in whole pages and at most ``input_len - 1``
(schedule_batch.py ``_compute_max_prefix_len``); the matched tokens are neither computed nor
allocated again, and its admission counts only the tokens past them. What a prefill batch computed
is inserted after the step (``checkpoint_kv_cache``, its prompt in whole pages), so two requests
of one new group admitted in the same step both compute the prefix (the second's copy is freed
when its insert finds the first's); a finished request's whole sequence is inserted
(``release_kv_cache(checkpoint=True)``). Nodes a running request uses are locked (``lock``:
the node and its ancestors); the others are evictable and count as free, for admission
(prefill_budget.py ``remaining_total``: available + ``evictable_size``), for the decode check and
in the pool's usage (pool_stats_observer.py: ``max_total - available - evictable``). An allocation
the free tokens do not hold evicts whole leaves, least recently used first (``evict``, LRU: a
group's prefix goes only after every request's tokens under it). A retracted request frees its own
tokens but not its prompt in the tree (``release_kv_cache(checkpoint=False)`` frees from
``cache_protected_len``), then the tree is evicted until the free tokens hold 20 decode steps of
the requests kept (schedule_batch.py ``release_req``): its prompt, if still there, is not
recomputed when it is back.

The receive interval (``--scheduler-recv-interval N``, default 1; managers/scheduler_components/
recv_skipper.py SchedulerRecvSkipper, called from request_receiver.py ``recv_requests`` at the top of
each ``event_loop_normal`` iteration): at N > 1 the scheduler reads new requests only when a counter,
raised each iteration by the weight of the batch the last iteration ran (environ.py
SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_*: a decode step 1, no batch 1, any other batch, a prefill or
mixed one, 1000), reaches N, and then resets it: after a prefill the next step polls; after a decode,
every N decode steps. A request that arrives meanwhile waits (counted as waiting) for that poll. An
idle iteration (no batch) takes no time here, so an idle scheduler polls at once.
``--num-continuous-decode-steps`` is declared in 0.5.23 (arg_groups/fields/schedule.py) and read by no
code of the release (srt/ has no other use of it): it changes nothing.

A hybrid sliding-window model (SWATokenToKVPoolAllocator, mem_cache/allocator/swa.py: a full-attention
pool of ``max_total_tokens`` and a sliding-window pool of ``swa_tokens``, the plan's
swa_full_tokens_ratio of it), with the radix cache off (the hybrid trees are not modelled, so kvcalc
takes ``--disable-radix-cache``; SGLang then builds a UnifiedRadixCache with ``disable`` set, whose
``supports_prefix_sharing`` is False): each allocation takes its pages from both pools; a waiting
request is admitted only when, beside the full pool's check, its SWA estimate
(prefill_budget.py ``estimate_swa_kv_tokens``: ``max(min(extend, chunk budget) - window, 0) +
min(extend + max_new, window) + page``, extend page-aligned) is under the SWA pool's free tokens less
``swa_offset``, which each request admitted in this batch grows by its own estimate
(``SWAPrefillBudget.check_prefill``/``reserve``; the running requests reserve nothing there); one
whose estimate the empty SWA pool could not hold (``swa_never_fits``) is cut to a chunk of what is
left beside its decode headroom (``_chunk_cap``), and without chunked prefill it is refused. A
chunked request's next chunk is at most the SWA pool's free tokens less a page, and none while that
is nothing (``available_chunk_tokens``). ``budget_state`` also stops on no SWA tokens left;
``batch_is_full`` is cleared before every prefill attempt (scheduler.py ``is_hybrid_swa``). Out-of-
window tokens go back to the SWA pool (schedule_batch.py ``maybe_evict_swa``, mem_cache/common.py
``free_swa_out_of_window_slots`` with no prefix sharing: the tokens below ``pre_len - window``, in
whole pages): before each chunk of a chunked prompt (pre_len its tokens computed so far), and in a
decode step from a request's second one (``decode_batch_idx >= 1``) once
``SGLANG_SWA_EVICTION_INTERVAL`` (128, environ.py) tokens have left the window since the last free;
not for the running requests of a mixed step (``maybe_evict_swa`` runs on the extend batch before
``mix_with_running``). A decode step needs its new pages in both pools (allocator ``available_size``
is the smaller, ``check_decode_mem``), else retraction. ``used_units`` is SGLang's
``num_used_tokens`` (pool_stats_observer.py ``get_kv_token_stats``: the larger of the two pools'
used tokens, which with no tree is the full pool's); ``swa_used`` the SWA pool's. The window is the
model's ``sliding_window_size`` (the plan's; for models whose ``is_prefill_aware_swa`` sets
``swa_evict_floor``, only models/unlimited_ocr.py in 0.5.23, that floor is not modelled).

Not modelled: the radix cache's other policies (``--schedule-policy lpm`` orders the queue by
longest match; fcfs is the default, arg_groups/fields/schedule.py), a group's prefix inserted
part way (a chunk ending inside it inserts nothing here), the overlap scheduler's one-step lag,
the hybrid pools' radix trees (SWARadixCache, MambaRadixCache), and the per-request SWA ring
(``swa_req_ring``) of some models. A Mamba hybrid's state pool binds through
``max_running_requests`` (the plan's slots // 3: SGLang's HybridReqToTokenPool has that many
request rows), which this cap applies.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from kvcalc.calc.pages import pad
from kvcalc.calc.simulate import Batch, Live, Request
from kvcalc.engines.sglang.releases import CURRENT
from kvcalc.engines.sglang.runtime import sglang_defaults

# schedule_policy.py CLIP_MAX_NEW_TOKENS (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096).
CLIP_MAX_NEW_TOKENS = 4096
# environ.py: SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600, SGLANG_RETRACT_DECODE_STEPS 20.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
# arg_groups/fields/schedule.py: max_prefill_tokens 16384.
MAX_PREFILL_TOKENS = 16384
# environ.py SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE 1, _NONE 1 (no batch), _DEFAULT 1000 (the rest).
RECV_WEIGHT_DECODE = 1
RECV_WEIGHT_IDLE = 1
RECV_WEIGHT_OTHER = 1000
# environ.py SGLANG_SWA_EVICTION_INTERVAL 128: a decoding request's out-of-window tokens are freed once that
# many have slid out of its window.
SWA_EVICTION_INTERVAL = 128


@dataclass(eq=False, slots=True)
class _Node:
    """A radix tree node: a group's shared prefix (key -(group + 1)) or a request's own tokens (key
    its id), under its group's node or the root (parent None)."""

    key: int
    parent: _Node | None
    tokens: int = 0
    lock: int = 0  # lock_ref: running requests whose path holds it
    children: int = 0
    time: int = 0  # last_access_time, as a running count of touches


class SglangScheduler:
    """SGLang's scheduling over a pool of ``max_total_tokens`` tokens in pages of ``page_size``."""

    def __init__(self, max_total_tokens: int, page_size: int, *, max_running_requests: int, context_len: int,
                 chunked_prefill_size: int | None, max_prefill_tokens: int = MAX_PREFILL_TOKENS,
                 schedule_conservativeness: float = 1.0, ignore_eos: bool = False,
                 mixed_chunk: bool = False, prefix_caching: bool = False, recv_interval: int = 1,
                 swa_tokens: int | None = None, window: int | None = None,
                 swa_eviction_interval: int = SWA_EVICTION_INTERVAL) -> None:  # fmt: skip
        if swa_tokens is not None and prefix_caching:
            raise ValueError("the radix cache is modelled on the plain token pool only, not beside an SWA pool")
        self.pool_units = max_total_tokens
        self.unit_tokens = 1
        self.preemptions = 0
        self._page = page_size
        self._free = max_total_tokens
        self._max_running = max_running_requests
        self._context_len = context_len
        self._chunk = chunked_prefill_size
        self._max_prefill = max_prefill_tokens
        self._ignore_eos = ignore_eos
        # scheduler.py: is_mixed_chunk = chunked_prefill_size is not None and enable_mixed_chunk.
        self._mixed = mixed_chunk and chunked_prefill_size is not None
        # NewTokenRatioTracker.from_config
        self.ratio_init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.ratio_min = min(self.ratio_init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self._decay = (self.ratio_init - self.ratio_min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.ratio_init
        self._running: list[Live] = []
        self._fresh: list[Live] = []  # the last prefill batch's requests, merged into running next step
        self._chunked: Live | None = None
        self._waiting: deque[Live] = deque()
        # SchedulerRecvSkipper (None at an interval of 1: every iteration polls): arrivals not yet read,
        # the counter, and the weight of the batch the last iteration ran (no batch at start).
        self._recv_interval = recv_interval
        self._inbox: list[Live] = []
        self._recv_counter = 0
        self._last_weight = RECV_WEIGHT_IDLE
        self._prefilled = False
        self._full: str | None = None  # batch_is_full, and why it was set
        # The radix cache: read by kvcalc's API to take a shared prefix (or refuse one where it is off).
        self.prefix_caching = prefix_caching
        self.cache_tokens = page_size  # the tree matches whole pages
        self.hit_tokens = 0  # tokens taken from the tree, not computed
        self._nodes: dict[int, _Node] = {}
        self._evictable = 0  # tokens of nodes no running request locks
        self._heap: list[tuple[int, int]] = []  # (time, key) of evictable leaves, stale ones skipped
        self._clock = 0
        self._part: dict[int, int] = {}  # request id: its leading tokens the tree owns (cache_protected_len)
        self._locked: dict[int, list[_Node]] = {}  # request id: the path it locks
        self._pending: list[Live] = []  # the last prefill batch's requests, inserted before the next step
        # The hybrid SWA pool (SWATokenToKVPoolAllocator; None: the plain token pool): its size, free tokens,
        # the window (sliding_window_size; None: the model's chunk, no eviction), each request's front tokens
        # freed from it (its evicted seqlen), and the requests past their first decode step (decode_batch_idx).
        self.swa_units = swa_tokens
        self._swa_free = swa_tokens or 0
        self._window = window
        self._swa_interval = swa_eviction_interval
        self._slid: dict[int, int] = {}
        self._decoded: set[int] = set()

    # --- the Scheduler protocol -----------------------------------------------------------------

    def refused(self, request: Request) -> str | None:
        """tokenizer_manager.py: prompt + max_new_tokens over the context length is an error;
        scheduler.py: a prompt of max_req_input_len (max_req_len - 5) or more is aborted, and
        init_req_max_new_tokens cuts max_new_tokens to what the empty pool holds
        (allocator max_new_tokens_for_memory): a request it would cut is refused here."""
        prompt, output = request.prompt, request.output
        if prompt + output > self._context_len:
            return f"prompt + output {prompt + output:,} tokens is over the context length {self._context_len:,}"
        max_req_len = min(self._context_len - 1, self.pool_units - 1)
        if prompt >= max_req_len - 5:
            return f"a prompt of {prompt:,} tokens is at least max_req_input_len {max_req_len - 5:,}"
        cap = min(max_req_len - prompt - 1, self.pool_units - pad(prompt, self._page) - self._page - 1)
        if output > cap:
            return f"SGLang would cut its {output:,} output tokens to {max(cap, 0):,} (what the pool holds beside it)"
        if self.swa_units is not None and self._chunk is None:
            need = self._swa_need(pad(prompt, self._page), min(output, CLIP_MAX_NEW_TOKENS), None)
            if need >= self.swa_units:  # swa_never_fits, and no chunk to cut it to (check_prefill)
                return f"it needs {need:,} tokens of the {self.swa_units:,}-token sliding-window pool at once"
        return None

    def admit(self, live: Live) -> None:
        if self._recv_interval <= 1:
            self._waiting.append(live)
        else:
            self._inbox.append(live)  # read at the next poll (_poll)

    def running(self) -> int:
        return len(self._running) + len(self._fresh) + (self._chunked is not None)

    def waiting(self) -> int:
        return len(self._waiting) + len(self._inbox)

    def used_units(self) -> int:
        """pool_stats_observer.py get_kv_token_stats: the full pool's used tokens, and for a hybrid SWA pool
        the larger of that and the SWA pool's (SGLang's num_used_tokens)."""
        full = self.pool_units - self._free - self._evictable
        return full if self.swa_units is None else max(full, self.swa_used())

    def swa_used(self) -> int:
        """The SWA pool's used tokens (0 without one)."""
        return 0 if self.swa_units is None else self.swa_units - self._swa_free

    def release(self, live: Live) -> None:
        self._checkpoint(live)  # release_kv_cache(checkpoint=True): the whole sequence into the tree
        self._drop(live)
        (self._running if live in self._running else self._fresh).remove(live)
        self._full = None  # a request left the batch (filter_batch)
        if not self._running and not self._fresh and self._chunked is None and not self._waiting:
            self.new_token_ratio = self.ratio_init  # on_idle: new_token_ratio_tracker.reset()

    def schedule(self) -> tuple[Batch, str | None]:
        for live in self._pending:  # checkpoint_kv_cache after the prefill batch's forward
            if live.held:
                self._checkpoint(live)
        self._pending = []
        self._running += self._fresh  # merge_batch: the last prefill batch joins the running batch
        self._fresh = []
        self._poll(self._last_weight)
        batch, stall = self._step()
        while not batch and self._inbox:
            # idle iterations (no batch, weight 1 each) until the poll, taken as no time
            self._poll(max(RECV_WEIGHT_IDLE, self._recv_interval - self._recv_counter))
            batch, stall = self._step()
        weight = RECV_WEIGHT_OTHER if self._prefilled else RECV_WEIGHT_DECODE
        self._last_weight = weight if batch else RECV_WEIGHT_IDLE
        return batch, stall

    def _poll(self, weight: int) -> None:
        """SchedulerRecvSkipper.handle: the counter raised by the last iteration's batch's weight; at the
        interval it resets and the requests that arrived are read into the waiting queue."""
        if not self._inbox and self._recv_interval <= 1:
            return
        self._recv_counter += weight
        if self._recv_counter >= self._recv_interval:
            self._recv_counter = 0
            self._waiting.extend(self._inbox)
            self._inbox = []

    def _step(self) -> tuple[Batch, str | None]:
        """get_next_batch_to_run: a prefill batch when one can be built, else a decode step."""
        batch, stall = self._prefill()
        self._prefilled = bool(batch)
        if batch:
            return batch, stall
        if self._running:
            return self._decode(), stall
        return [], stall

    # --- prefill ------------------------------------------------------------------------------------

    def _max_new(self, live: Live) -> int:
        return min(max(live.request.output - live.generated, 0), CLIP_MAX_NEW_TOKENS)

    def _prefill(self) -> tuple[Batch, str | None]:
        if not self._running or self.swa_units is not None:  # is_hybrid_swa: reset to try again each step
            self._full = None
        if (self._full or not self._waiting) and self._chunked is None:
            return [], self._full if self._waiting else None
        if self._chunked is None and len(self._running) >= self._max_running:
            self._full = "seqs"
            return [], "seqs"
        ratio = 1.0 if self._ignore_eos else self.new_token_ratio
        # Mixed chunk: PrefillAdder(num_mixed_decode_tokens=running_bs) takes one token a running
        # request off the chunk and input budgets, and starts PrefillBudget's offsets at it.
        mixed = len(self._running) if self._mixed else 0
        total = current = float(mixed)  # PrefillBudget's total_offset and current_offset
        total += sum(self._max_new(r) * ratio for r in self._running)
        rem_input = self._max_prefill - mixed
        rem_chunk = None if self._chunk is None else self._chunk - mixed
        batch: Batch = []
        # SWAPrefillBudget: the SWA pool's free tokens before this batch (remaining_swa = that - swa_offset).
        swa = self.swa_units is not None
        swa0, swa_off = self._swa_free, 0

        def reserve(n: int, max_new: int) -> None:
            nonlocal total, current, rem_input, rem_chunk, swa_off
            paged = pad(n, self._page)
            total += paged + self._page + max_new
            current += paged + self._page
            if swa:  # swa_offset grows by the request's estimate, at the chunk budget before it
                swa_off += self._swa_need(paged, max_new, rem_chunk)
            rem_input -= paged
            if rem_chunk is not None:
                rem_chunk -= paged

        # PrefillAdder allocates nothing (prepare_for_extend does, after it): its available_size is the
        # pool's free tokens before this batch's, which the offsets above already count.
        spent = 0
        chunked = self._chunked
        if chunked is not None and rem_chunk is not None and rem_chunk <= 0:
            # The running requests' decode tokens fill the mixed chunk (SGLang would cut a chunk of
            # no tokens): taken as no prefill this step, every running request decoding.
            return [], "budget"
        if chunked is not None:  # add_chunked_req
            assert rem_chunk is not None  # only chunked prefill leaves a request half done
            left = chunked.tokens - chunked.computed
            # available_chunk_tokens: what the pool has left, or the whole chunk to make progress.
            take = min(rem_chunk, int(self._free + self._evictable - total))  # (nothing spent yet)
            if swa:  # SWAPrefillBudget: remaining_swa - page too, and no chunk when nothing is left
                take = min(take, swa0 - self._page)
            if take > 0 or not swa:
                n = min(left, take if take > 0 else rem_chunk)
                self._slide(chunked, chunked.computed, 1)  # maybe_evict_swa (alloc_for_extend), radix off
                spent += self._allocate(chunked, n)
                batch.append((chunked, n))
                self._pending.append(chunked)
                reserve(n, 0 if n < left else min(chunked.request.output, CLIP_MAX_NEW_TOKENS))
                if n == left:
                    self._fresh.append(chunked)
                    self._chunked = None
        stall = None
        while self._waiting:
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                stall = "budget"
                break
            if len(batch) >= self._max_running - len(self._running):
                self._full = "seqs"
            if self._full:
                stall = self._full
                break
            live = self._waiting[0]
            path, hit = self._match(live)
            left = live.tokens - hit
            need = left + self._max_new(live) + self._page
            # _lock_node: the request's matched path is not evictable while it is weighed.
            room = self._free + self._evictable + spent - sum(node.tokens for node in path if not node.lock)
            if not need < room - total:  # check_prefill: total_tokens < remaining_total
                self._full = "kv" if batch or self._running else None
                stall = "kv"
                break
            limit: int | None = rem_chunk
            if swa:
                fits, limit = self._swa_check(pad(left, self._page), self._max_new(live), rem_chunk, swa0 - swa_off)
                if not fits:
                    self._full = "swa" if batch or self._running else None
                    stall = "swa"
                    break
            n, whole = left, True
            if rem_chunk is None:
                if batch and pad(left, self._page) >= rem_input:
                    stall = "budget"
                    break
            elif limit is not None and pad(left, self._page) > limit:
                n = limit // self._page * self._page
                if n <= 0:
                    stall = "budget"
                    break
                whole = False
            self._waiting.popleft()
            self._adopt(live, path, hit)
            spent += self._allocate(live, n)
            batch.append((live, n))
            self._pending.append(live)
            # _select_prefill_admission reserves the whole clipped max_new_tokens, outputs so far or not.
            reserve(n, min(live.request.output, CLIP_MAX_NEW_TOKENS) if whole else 0)
            if whole:
                self._fresh.append(live)
            else:
                self._chunked = live
            room = self._free + self._evictable + spent
            if not (room - total > 0 and room - current > 0 and (not swa or swa0 - swa_off > 0)):  # NO_TOKEN
                self._full = "kv"
                stall = "kv" if self._waiting else None
                break
        if batch and mixed:
            self._mix(batch)
        return batch, stall

    def _mix(self, batch: Batch) -> None:
        """mix_with_running: every running request decodes in the prefill batch when the pool still
        holds its next token after the prefill (check_decode_mem); else they sit this step out, and
        no request is retracted. The new_token_ratio decays only in a decode step."""
        if self._decode_need(self._running) > self._room():
            return
        for live in self._running:
            self._allocate(live, 1)
            batch.append((live, 1))

    def _allocate(self, live: Live, n: int) -> int:
        """alloc_extend / alloc_decode: the request's tokens in whole pages (in both pools of a hybrid
        SWA pool), evicting from the tree what the free tokens lack."""
        need = pad(live.computed + n, self._page) - live.held
        if need > self._free:
            self._evict(need)
        self._free -= need
        self._swa_free -= need if self.swa_units is not None else 0
        live.held += need
        return need

    def _room(self) -> int:
        """available_size for check_decode_mem: the free (and evictable) tokens; of a hybrid SWA pool, the
        fewer of its two pools' (allocator/swa.py available_size)."""
        if self.swa_units is None:
            return self._free + self._evictable
        return min(self._free, self._swa_free)

    # --- the hybrid SWA pool ------------------------------------------------------------------------

    def _swa_need(self, extend: int, max_new: int, limit: int | None) -> int:
        """prefill_budget.py estimate_swa_kv_tokens: the SWA tokens a request may hold at its peak, its
        chunk's (``extend``, at most ``limit``) tail past the window and the window's worth of its
        extend and outputs, and a page."""
        window, page = self._window, self._page
        if window is None or window <= 0:
            return extend + max_new + page
        allocated = extend if limit is None else min(extend, limit)
        return max(allocated - window, 0) + min(extend + max_new, window) + page

    def _swa_check(self, extend: int, max_new: int, limit: int | None, remaining: int) -> tuple[bool, int | None]:
        """SWAPrefillBudget.check_prefill's SWA half: fits when its estimate is under the SWA pool's
        remaining tokens; one that would not fit even the empty pool (swa_never_fits) is cut to a chunk
        of what is left beside its decode headroom (_chunk_cap), where chunked prefill is on."""
        assert self.swa_units is not None
        need = self._swa_need(extend, max_new, limit)
        if need < remaining:
            return True, limit
        cap = 0
        if need >= self.swa_units:
            cap = max(0, (remaining - self._swa_need(0, max_new, None)) // self._page * self._page)
        if limit is None or cap <= 0:
            return False, None
        return True, min(limit, cap)

    def _slide(self, live: Live, pre_len: int, interval: int) -> None:
        """free_swa_out_of_window_slots (mem_cache/common.py, radix cache off): once ``interval`` tokens
        of the ``pre_len`` the request holds have left the window, its SWA tokens below ``pre_len -
        window`` (whole pages) go back to the SWA pool."""
        if self._window is None or self.swa_units is None:
            return
        gone = self._slid.get(live.request.id, 0)
        if pre_len - self._window < gone + interval:
            return
        upto = (pre_len - self._window) // self._page * self._page
        if upto > gone:
            self._swa_free += upto - gone
            self._slid[live.request.id] = upto

    # --- decode ---------------------------------------------------------------------------------------

    def _decode_need(self, reqs: list[Live]) -> int:
        """new_tokens_required_next_decode: a page for each request whose pages are full."""
        return sum(self._page for r in reqs if r.computed % self._page == 0)

    def _decode(self) -> Batch:
        if self._decode_need(self._running) > self._room():
            self._retract()
        else:
            self.new_token_ratio = max(self.new_token_ratio - self._decay, self.ratio_min)
        batch: Batch = []
        for live in self._running:
            # maybe_evict_swa (alloc_for_decode): from a request's second decode step (decode_batch_idx >= 1).
            if live.request.id in self._decoded:
                self._slide(live, live.computed, self._swa_interval)
            self._decoded.add(live.request.id)
            self._allocate(live, 1)
            batch.append((live, 1))
        return batch

    def _retract(self) -> None:
        """retract_decode: fewest outputs (then longest prompt) out first, until the step fits."""
        keep = sorted(self._running, key=lambda r: (r.generated, -r.request.prompt), reverse=True)
        first = True
        while first or self._decode_need(keep) > self._room():
            if len(keep) == 1:
                break
            first = False
            victim = keep.pop()
            self._drop(victim)  # release_kv_cache(checkpoint=False): its prompt stays in the tree
            self._evict(len(keep) * RETRACT_DECODE_STEPS)  # release_req: room for the kept requests
            victim.computed = 0
            victim.preemptions += 1
            self.preemptions += 1
            self._waiting.append(victim)
        self._running = [r for r in self._running if r in keep]
        outputs = sum(r.generated for r in self._running)
        asked = sum(r.request.output for r in self._running)
        self.new_token_ratio = min(1.0, (outputs + RETRACT_DECODE_STEPS * len(self._running)) / (asked + 1))
        self._full = None

    # --- the radix cache ---------------------------------------------------------------------------

    def _tick(self, node: _Node) -> None:
        """A touch (match or insert): the node's last_access_time now; an evictable leaf (re)queued."""
        self._clock += 1
        node.time = self._clock
        if not node.lock and not node.children:
            self._push(node)

    def _push(self, node: _Node) -> None:
        """An evictable leaf onto the eviction heap; the heap rebuilt when stale entries pile up."""
        heap = self._heap
        heapq.heappush(heap, (node.time, node.key))
        if len(heap) > 2 * len(self._nodes) + 1024:
            heap[:] = [(n.time, n.key) for n in self._nodes.values() if not n.lock and not n.children]
            heapq.heapify(heap)

    def _match(self, live: Live) -> tuple[list[_Node], int]:
        """match_prefix: the tree's nodes on the request's path (its group's prefix, then its own
        prompt if a retraction left it) and the tokens hit, in whole pages within input_len - 1."""
        if not self.prefix_caching or live.held:
            return [], live.computed
        path: list[_Node] = []
        request = live.request
        group = self._nodes.get(-request.prefix - 1) if request.prefix >= 0 else None
        if group is not None:
            path.append(group)
        own = self._nodes.get(request.id)
        if own is not None:
            path.append(own)
        for node in path:
            self._tick(node)
        cap = (live.tokens - 1) // self._page * self._page
        return path, min(sum(node.tokens for node in path), cap)

    def _lock(self, live: Live, path: list[_Node]) -> None:
        """lock(last_node) for the new path, then unlock the request's old one."""
        for node in path:
            if not node.lock:
                self._evictable -= node.tokens
            node.lock += 1
        self._unlock(live)
        self._locked[live.request.id] = path

    def _unlock(self, live: Live) -> None:
        for node in self._locked.pop(live.request.id, []):
            node.lock -= 1
            if not node.lock:
                self._evictable += node.tokens
                if not node.children:
                    self._push(node)

    def _adopt(self, live: Live, path: list[_Node], hit: int) -> None:
        """An admitted request's hit: its first tokens, the tree's, locked; computed from there."""
        if not path:
            return
        self._lock(live, path)
        self._part[live.request.id] = hit
        live.held = live.computed = hit
        self.hit_tokens += hit

    def _checkpoint(self, live: Live) -> None:
        """checkpoint / the finished insert: the request's computed tokens in whole pages into the tree
        (its group's prefix, then its own tokens); what the tree held already is freed from its row."""
        if not self.prefix_caching:
            return
        request, page = live.request, self._page
        done = live.computed // page * page
        prefix = request.prefix_len // page * page if request.prefix >= 0 else 0
        if done < prefix or not done:
            return  # a chunk ending inside the group's prefix: not inserted here
        path: list[_Node] = []
        had = 0
        parent = None
        if prefix:
            parent = self._nodes.get(-request.prefix - 1)
            if parent is None:
                parent = self._nodes[-request.prefix - 1] = _Node(-request.prefix - 1, None, prefix)
                self._evictable += prefix  # (locked below)
            else:
                had = parent.tokens
            path.append(parent)
        if done > prefix:
            own = self._nodes.get(request.id)
            if own is None:
                own = self._nodes[request.id] = _Node(request.id, parent)
                if parent is not None:
                    parent.children += 1
            had += own.tokens
            grow = done - prefix - own.tokens
            if grow > 0:
                own.tokens += grow
                if not own.lock:
                    self._evictable += grow
            path.append(own)
        part = self._part.get(request.id, 0)
        self._free += max(min(done, had) - part, 0)  # its own copy of what the tree held: freed
        self._part[request.id] = done
        for node in path:
            self._tick(node)
        self._lock(live, path)

    def _drop(self, live: Live) -> None:
        """release_kv_cache: the request's own tokens freed, its path unlocked."""
        self._free += live.held - self._part.pop(live.request.id, 0)
        if self.swa_units is not None:  # its SWA tokens still in the window go back too
            self._swa_free += live.held - self._slid.pop(live.request.id, 0)
            self._decoded.discard(live.request.id)
        live.held = 0
        self._unlock(live)

    def _evict(self, tokens: int) -> None:
        """evict: unlocked leaves, least recently used first, until ``tokens`` are free or none is left."""
        heap, nodes = self._heap, self._nodes
        while self._free < tokens and heap:
            time, key = heapq.heappop(heap)
            node = nodes.get(key)
            if node is None or node.lock or node.children or node.time != time:
                continue  # stale
            del nodes[key]
            self._free += node.tokens
            self._evictable -= node.tokens
            parent = node.parent
            if parent is not None:
                parent.children -= 1
                if not parent.children and not parent.lock:
                    heapq.heappush(heap, (parent.time, parent.key))  # (no rebuild inside the pop loop)


def default_chunked_prefill_size(gpu_mib: int | None, version: tuple[int, int, int] = CURRENT) -> tuple[int, str]:
    """SGLang's chunked_prefill_size by the GPU's memory in MiB (arg_groups/memory_hook.py
    _handle_gpu_memory_settings, by release: engines/sglang/runtime.py sglang_defaults; 4096 when the
    memory is unknown), and the tier's words."""
    if gpu_mib is None:
        return 4096, "the GPU's memory unknown"
    size = sglang_defaults(gpu_mib, 1, version)[0]
    for below_gib in (20, 35, 60, 90, 160):
        if gpu_mib < below_gib * 1024:
            return size, f"a GPU under {below_gib} GiB"
    return size, "a GPU of 160 GiB or more"
