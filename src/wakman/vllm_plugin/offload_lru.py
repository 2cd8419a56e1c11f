"""vLLM's ``lru.py`` order for the offload tier's ``lru``, decision for decision, on the core's LRU.

vLLM ranks a chunk at its insert, at a request's access (0.33, 0.34: ``(request rank,
-position)``, the request's rank given at its first access, so a request's chunks rank together,
tail first) and at a request's finish (every key of the request, tail first: the head ends newest),
and keeps the rank while the chunk is in use; it evicts the lowest rank. The core's LRU orders by
release instead, so ``VllmLruOrder`` keeps vLLM's rank (``ranks``) for every chunk ranked above
what the core holds: such a chunk stays pinned in the core (``held`` when it is evictable) and goes
to the core's newest end, in rank order, once no later rank can fall below it (every request that
started before has finished; no in-use chunk ranks below it). A chunk whose load begins keeps its
place in the core's order (``in_place``) until vLLM would re-rank it. ``evict`` takes the ``front``
first (chunks an earlier eviction had to skip, which keep their place below the core's order),
then the core's order (a chunk it must skip moves to the front), then the held chunks by rank.
Request by request in the connector's order, the held chunks reach the core when the request's
last store completes; with requests in flight together they wait in a heap (O(log n) per event)
until the oldest request finishes. The decisions equal vLLM's in any order of the manager's calls
in which a request offers nothing after its finish (the connector's order);
``tests/test_vllm_offload.py`` checks them call by call on 0.32, 0.33 and 0.34.

The tier's policy (``offload.WakmanCachePolicy``) owns the chunk maps and calls this class for
every event under ``lru``; this class owns the rank state and pins and releases the core's keys.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Iterable

from wakman.policies import EvictionPolicy
from wakman.vllm_plugin.free_queue import policy_key

try:
    from vllm.v1.kv_offload.base import OffloadKey, ReqContext
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
except ImportError as exc:  # a vLLM whose offload modules moved: the version check's message
    from wakman.vllm_plugin.compat import offload_import_failed

    raise offload_import_failed(exc) from exc

Rank = int | float  # vLLM's LRU rank (request rank, -position), or (fresh rank, 0), as one number
_POSITIONS = 1 << 32  # positions (a chunk's end token in its request) lie in [0, 2**32)


def _rank(request_rank: int, position: int = 0) -> int:
    """vLLM's rank ``(request_rank, -position)`` as one integer, in the same order (an int compares
    faster than a tuple, and the held and busy heaps compare ranks at every push and pop); a
    position past 2**32 tokens would fall among the previous request's ranks: refused."""
    if not 0 <= position < _POSITIONS:
        raise ValueError(f"offload lru: a chunk position of {position} tokens is past 2**32")
    return request_rank * _POSITIONS - position


_TOP: Rank = math.inf


class _RequestRank:
    """A request's rank in one policy (vLLM's ``lru.py`` keeps the same on the request's context)."""

    __slots__ = ("generation", "rank")

    def __init__(self, generation: int, rank: int) -> None:
        self.generation, self.rank = generation, rank


class _RequestRanks(dict):
    """Kept on a request's context: its rank in each wakman order that ranked it, by the order's
    token (a context may reach several tiers)."""


Entry = tuple[Rank, "OffloadKey", int]  # (rank, chunk key, core key): the tie-break is the chunk key's


class _HeldQueue:
    """The held chunks' entries in rank order: ``run``, a deque of entries pushed in rising order
    (a fresh rank is above every rank given before it, so nearly every push lands here, O(1)), and
    a heap for the others (O(log n)). Lazy: an entry whose chunk was re-ranked or is no longer held
    is dropped where ``first`` meets it; ``compact`` rebuilds from the live entries once the stale
    ones outnumber them."""

    __slots__ = ("heap", "run", "size")

    def __init__(self) -> None:
        self.run: deque[Entry] = deque()
        self.heap: list[Entry] = []
        self.size = 0  # entries in run and heap, stale ones included

    def clear(self) -> None:
        self.run.clear()
        self.heap.clear()
        self.size = 0

    def push(self, entry: Entry) -> None:
        run = self.run
        if not run or run[-1] < entry:
            run.append(entry)
        else:
            heapq.heappush(self.heap, entry)
        self.size += 1

    def compact(self, live: Iterable[Entry]) -> None:
        self.run = deque(sorted(live))
        self.heap.clear()
        self.size = len(self.run)

    def first(self, held: set[int], ranks: dict[int, Rank]) -> Entry | None:
        """The lowest entry of a held chunk at its rank, left in place, or None; the stale entries
        before it are dropped."""
        run, heap = self.run, self.heap
        while run:
            entry = run[0]
            k = entry[2]
            if k in held and ranks[k] == entry[0]:
                break
            run.popleft()
            self.size -= 1
        while heap:
            entry = heap[0]
            k = entry[2]
            if k in held and ranks[k] == entry[0]:
                break
            heapq.heappop(heap)
            self.size -= 1
        if run and (not heap or run[0] < heap[0]):
            return run[0]
        return heap[0] if heap else None

    def pop_first(self) -> Entry:
        """Remove and return the entry ``first`` returned (call it right after ``first``)."""
        run, heap = self.run, self.heap
        self.size -= 1
        if run and (not heap or run[0] < heap[0]):
            return run.popleft()
        return heapq.heappop(heap)


class VllmLruOrder:
    """vLLM's LRU order of the tier's evictable chunks: the ``front`` (chunks an eviction had to
    skip, pinned in the core, oldest first), the core's order, then the ``held`` chunks
    (``ref_cnt == 0``, pinned in the core) by their rank in ``ranks``.

    Invariants: ``held`` is a subset of ``ranks``; ``ranks`` also holds the busy chunks (in use,
    pinned in the core, ranked); an in-use chunk without a rank is ``in_place``: in the core's
    order or the front, unpinned in the core if in its order. ``chunks`` and ``key_of`` are the
    tier's maps (read here, written by the tier only)."""

    def __init__(
        self,
        policy: EvictionPolicy,
        chunks: dict[OffloadKey, ChunkStatus],
        key_of: dict[int, OffloadKey],
    ) -> None:
        self.policy = policy  # the core's LRU
        self.chunks, self.key_of = chunks, key_of
        self.ranks: dict[int, Rank] = {}  # held and busy chunks -> vLLM's LRU rank
        self.held: set[int] = set()
        self.in_place: set[int] = set()
        self.front: OrderedDict[int, None] = OrderedDict()  # below the core's order, oldest first
        self._in_place_in_core = 0  # in_place chunks in the core's order (not the front): evict's count
        self._held_queue = _HeldQueue()  # the held chunks by rank (lazy: stale entries skipped)
        self._busy_heap: list[tuple[Rank, OffloadKey, int]] = []
        self._open: OrderedDict[_RequestRank, None] = OrderedDict()  # ranked, unfinished requests
        self._next_rank = 0
        self._generation = 0
        # names this order on a request's context (_RequestRanks): a token, not the order itself,
        # so a context that outlives a switch away from lru does not keep the order and its core
        self._token = object()

    @classmethod
    def taking_over(
        cls, policy: EvictionPolicy, chunks: dict[OffloadKey, ChunkStatus], key_of: dict[int, OffloadKey]
    ) -> VllmLruOrder:
        """vLLM's LRU order from now on over a core LRU that already holds the tier's chunks (an
        adaptive class's switch to lru: ``handover`` left the in-use chunks pinned, the others in
        the old policy's order). A chunk being loaded keeps its place (``in_place``, unpinned: it
        becomes newest); one being stored is ranked now, in key order, as vLLM ranks a chunk at its
        insert. From here every event is vLLM's LRU's."""
        order = cls(policy, chunks, key_of)
        for k in sorted(policy.pinned_keys()):
            key = key_of[k]
            if chunks[key].ref_cnt > 0:
                policy.unpin(k)
                order.in_place.add(k)
                order._in_place_in_core += 1
            else:
                order._next_rank += 1
                order.ranks[k] = _rank(order._next_rank)
                order._push_busy(k, key)
        return order

    def release(self) -> tuple[list[int], list[int]]:
        """For a switch away from lru: the evictable chunks in vLLM's LRU order, first victim
        first (the front's, the core's, then the held ones by rank), and the chunks in use."""
        chunks, key_of = self.chunks, self.key_of
        evictable = [k for k in self.front if chunks[key_of[k]].ref_cnt == 0]
        evictable += [k for k in self.policy.eviction_order() if k not in self.in_place]
        evictable += [k for _, _, k in sorted((self.ranks[k], key_of[k], k) for k in self.held)]
        in_use = [k for k, key in key_of.items() if chunks[key].ref_cnt != 0]
        return evictable, in_use

    def clear(self) -> None:
        """Forget every rank (the tier and its core were cleared); requests ranked before get new
        ranks."""
        self.ranks.clear()
        self.held.clear()
        self.in_place.clear()
        self.front.clear()
        self._in_place_in_core = 0
        self._held_queue.clear()
        self._busy_heap.clear()
        self._open.clear()
        self._next_rank = 0
        self._generation += 1

    def _resident(self, key: OffloadKey) -> int | None:
        return policy_key(key) if key in self.chunks else None

    # ------------------------------------------------------------------ ranks
    def request_rank(self, req_context: ReqContext) -> int:
        """The request's rank, given at its first access or insert (vLLM's ``_get_request_rank``)."""
        ranks = req_context.get_state(_RequestRanks)
        if ranks is None:
            ranks = _RequestRanks()
            req_context.set_state(ranks)
        state = ranks.get(self._token)
        if state is None or state.generation != self._generation:
            self._next_rank += 1
            state = ranks[self._token] = _RequestRank(self._generation, self._next_rank)
            self._open[state] = None
        return state.rank

    def _push_held(self, k: int, key: OffloadKey) -> None:
        held, queue = self.held, self._held_queue
        held.add(k)
        queue.push((self.ranks[k], key, k))
        if queue.size > 2 * len(held) + 64:  # drop the stale entries
            queue.compact((self.ranks[k], self.key_of[k], k) for k in held)

    def _push_busy(self, k: int, key: OffloadKey) -> None:
        heap = self._busy_heap
        heapq.heappush(heap, (self.ranks[k], key, k))
        if len(heap) > 2 * (len(self.ranks) - len(self.held)) + 64:  # drop the stale entries
            heap[:] = [(self.ranks[k], self.key_of[k], k) for k in self.ranks.keys() - self.held]
            heapq.heapify(heap)

    def _set_rank(self, k: int, key: OffloadKey, rank: Rank) -> None:
        """Give a resident chunk vLLM's LRU rank ``rank``: a chunk in the core's order (or the
        front) leaves it, pinned in the core, held or busy."""
        ranked = k in self.ranks
        self.ranks[k] = rank
        if k in self.held:
            self._push_held(k, key)
            return
        if not ranked:
            in_front = k in self.front
            if in_front:
                del self.front[k]
            else:
                self.policy.pin(k)
            self._leave_place(k, in_front)
            if self.chunks[key].ref_cnt == 0:
                self._push_held(k, key)
                return
        self._push_busy(k, key)

    def rank_fresh(self, keys: Iterable[OffloadKey]) -> None:
        """New ranks in this order, each above every other (vLLM's ``_update_recency``)."""
        direct = not self.held and self._bound() == _TOP  # ranks go straight to the core's end
        for key in keys:
            k = self._resident(key)
            if k is None:
                continue
            self._next_rank += 1
            if direct:
                if k not in self.ranks and k not in self.in_place and k not in self.front:
                    self.policy.hit(k)
                    continue
                direct = False  # held or busy from here: the next ones lie above it
            self._set_rank(k, key, _rank(self._next_rank))
        self._flush()

    def _bound(self) -> Rank:
        """No rank below this one can be given later: unfinished requests' ranks, in-use chunks'."""
        bound = _TOP
        while self._open:
            state = next(iter(self._open))
            if state.generation == self._generation:
                bound = _rank(state.rank, _POSITIONS - 1)  # at most its chunks' ranks (compared with <)
                break
            del self._open[state]
        heap = self._busy_heap
        while heap:
            rank, _, k = heap[0]
            if self.ranks.get(k) == rank and k not in self.held:
                return min(bound, rank)
            heapq.heappop(heap)
        return bound

    def _flush(self) -> None:
        """Move the held chunks ranked below every later rank to the core's newest end, in rank
        order: from there the core's order is vLLM's LRU order."""
        queue = self._held_queue
        if not queue.size:
            return
        bound = self._bound()
        held, ranks, unpin = self.held, self.ranks, self.policy.unpin
        while (entry := queue.first(held, ranks)) is not None and entry[0] < bound:
            queue.pop_first()
            k = entry[2]
            held.discard(k)
            del ranks[k]
            unpin(k)

    # ------------------------------------------------------------------ the tier's events
    def inserted(self, k: int, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext | None) -> None:
        """A new chunk (already in the tier's maps): ranked at once, pinned in the core."""
        position = None if req_context is None else req_context.get_offload_key_position(key)
        if position is None:
            self._next_rank += 1
            rank: Rank = _rank(self._next_rank)
        else:
            rank = _rank(self.request_rank(req_context), position)
        self.policy.insert(k, True)
        self.ranks[k] = rank
        if chunk.ref_cnt != 0:
            self._push_busy(k, key)
        else:
            self._push_held(k, key)
            self._flush()

    def forget(self, k: int) -> None:
        """The chunk left the tier (removed or evicted)."""
        if self.ranks.pop(k, None) is not None:
            self.held.discard(k)
        self._leave_place(k, in_front=k in self.front)
        self.front.pop(k, None)

    def _leave_place(self, k: int, in_front: bool) -> None:
        """``k`` is no longer in use in place (``in_front``: it is in the front, not the core's order)."""
        if k in self.in_place:
            self.in_place.discard(k)
            self._in_place_in_core -= not in_front

    def evictable(self, k: int, key: OffloadKey) -> None:
        """``ref_cnt`` reached 0."""
        if k in self.in_place:  # its load ended: vLLM's LRU kept its rank, it kept its place
            self._leave_place(k, in_front=k in self.front)  # (in the core's order or the front)
        elif k in self.ranks:  # ranked above the core: held until the ranks below are settled
            self._push_held(k, key)
            self._flush()
        else:
            self.policy.unpin(k)

    def non_evictable(self, k: int, key: OffloadKey) -> None:
        """``ref_cnt`` left 0."""
        if k in self.held:  # it keeps its rank while in use
            self.held.discard(k)
            self._push_busy(k, key)
        elif k not in self.in_place:  # it keeps its place (in the core's order or the front) in use
            self.in_place.add(k)
            self._in_place_in_core += k not in self.front

    def accessed(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """vLLM's ``on_request_access``: the request's chunks rank together,
        ``(request rank, -position)``: tail first."""
        request_rank = self.request_rank(req_context)
        for key in keys:
            position = req_context.get_offload_key_position(key)
            k = None if position is None else self._resident(key)
            if k is None:
                continue
            rank = _rank(request_rank, position)
            old = self.ranks.get(k)
            if old is None or old < rank:
                self._set_rank(k, key, rank)
        self._flush()

    def finished(self, keys: list[OffloadKey], req_context: ReqContext) -> None:
        """Every key of the request re-ranked, tail first: the head ends newest."""
        ranks = req_context.get_state(_RequestRanks)
        if ranks is not None and (state := ranks.pop(self._token, None)) is not None:
            self._open.pop(state, None)
        self.rank_fresh(reversed(keys))

    # ------------------------------------------------------------------ eviction
    def evict(self, n: int, protected: set[OffloadKey]) -> list[int] | None:
        """The first ``n`` chunks of vLLM's LRU order outside ``protected`` and not in use, or None
        with no change where fewer exist. A chunk the core offers that must stay (protected, or in
        use in place) moves to the front, where it keeps its rank (vLLM's LRU skips it and keeps
        its rank)."""
        policy, chunks, key_of, held, front, in_place = (
            self.policy,
            self.chunks,
            self.key_of,
            self.held,
            self.front,
            self.in_place,
        )
        # O(protected) counts: the chunks in use in place are counted as they come and go
        staying = self._in_place_in_core  # chunks in the core's order the core must not give
        in_held = protected_in_front = 0
        for key in protected:
            k = self._resident(key)
            if k is None or k in in_place:
                continue
            if k in held:
                in_held += 1
            elif k in front:
                protected_in_front += 1
            elif chunks[key].ref_cnt == 0:
                staying += 1
        in_front_in_use = len(in_place) - self._in_place_in_core
        front_free = len(front) - in_front_in_use - protected_in_front
        from_core = policy.num_evictable - staying
        if front_free + from_core + len(held) - in_held < n:
            return None
        victims = []
        if front_free:  # the front's oldest evictable chunks, read no further than needed
            for k in front:
                if k not in in_place and key_of[k] not in protected:
                    victims.append(k)
                    if len(victims) == n:
                        break
        for k in victims:
            del front[k]
            policy.remove(k)
        while len(victims) < n and from_core:
            for k in policy.evict_many(min(n - len(victims), from_core)):
                if k in in_place or key_of[k] in protected:
                    policy.insert(k, True)  # LRU: no ghost, no other state
                    front[k] = None
                    self._in_place_in_core -= k in in_place  # it is in the front now
                else:
                    victims.append(k)
                    from_core -= 1
        if len(victims) < n:
            victims += self._evict_held(n - len(victims), protected)
        return victims

    def _evict_held(self, n: int, protected: set[OffloadKey]) -> list[int]:
        """The ``n`` lowest-ranked held chunks outside ``protected`` (enough exist), as vLLM's LRU."""
        queue, out, deferred = self._held_queue, [], []
        while len(out) < n:
            entry = queue.first(self.held, self.ranks)
            assert entry is not None  # enough exist
            queue.pop_first()
            _, key, k = entry
            if key in protected:
                deferred.append(entry)
                continue
            self.held.discard(k)
            self.policy.remove(k)
            out.append(k)
        for entry in deferred:
            queue.push(entry)
        return out
