"""vLLM's CPU offload tier, with a wakman core policy choosing which chunks it keeps.

vLLM's ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``) owns the chunk pool, the
reference counts and the events; it asks a ``CachePolicy`` which chunk to evict. The classes here
are such policies, loaded by vLLM's own ``CachePolicyFactory`` from ``kv_connector_extra_config``:
``{"eviction_policy": "WakmanS3FIFO", "cache_policy_module_path": "wakman.vllm_plugin.offload"}``
(``docs/vllm.md`` has the full command line). One class per policy name: ``WakmanLRU``,
``WakmanFIFO``, ``WakmanS3FIFO``, ``WakmanSieve``, ``WakmanARC``, ``WakmanChainLRU``,
``WakmanAdaptive`` (the ``wakman`` preset) and ``WakmanPlus`` (``wakman-plus``); ``WakmanPolicy``
reads the name from the environment variable ``WAKMAN_OFFLOAD_POLICY`` (the factory passes a
policy nothing but its capacity). This
module is the only one of wakman that imports vLLM's offload code; it works with vLLM 0.32, 0.33 and
0.34 (whose manager no longer calls ``touch``: a request's reuse reaches the policy at its finish).

State: the core policy (capacity = the tier's chunks) holds one 64-bit key per resident chunk,
``policy_key(offload_key)`` (the GPU pool's rule: an ``OffloadKey`` is a ``BlockHash`` and a group
id); a dict maps that key to ``(OffloadKey, ChunkStatus)``. A chunk is pinned in the core iff its
``ref_cnt != 0`` (-1: its store is in flight; > 0: loads read it), so the core never offers it as a
victim.

What each vLLM call does to the core policy ``P``:

- ``get``: a dict read, no event (vLLM's ``lookup`` is not an access).
- ``insert(key, chunk[, req_context])`` (0.32 passes two arguments, 0.33 and 0.34 three): ``P.insert(k,
  pinned=chunk.ref_cnt != 0)``; the manager always inserts ``ref_cnt == -1``, i.e. pinned.
- ``mark_non_evictable`` / ``mark_evictable`` (``ref_cnt`` leaves / reaches 0): ``P.pin`` /
  ``P.unpin``. By the core's pinning rule a released chunk re-enters at the newest position of its
  segment.
- ``on_store_miss(keys)``: ``P.inserting_for(root)``, the request's root (below: the chunks the
  manager inserts next are the request's), then ``P.miss(k)`` for each key, last key first, before
  the manager evicts and inserts: the ghost hits of S3-FIFO and ARC are seen at the miss, as the
  core protocol wants.
- ``touch(keys)`` (0.32, 0.33): ``P.hit(k)`` for each resident key, last key first (the head of a prefix ends
  newest).
- ``on_request_access`` (0.33, 0.34): no event; a request's accesses are committed once, when it finishes.
- ``on_request_finished``: for the request's keys in prefix order, last key first: a resident
  chunk the request reused gets one ``P.hit``; a chunk it only stored gets none (a store is not a
  reuse; vLLM's ARC does the same), except under ``lru``, whose hit is pure recency: there it
  gets the hit too, which is vLLM's LRU order (every key of the request re-ranked, head newest).
  Then the request hint ``P.on_request(keys, len(keys), [], clock())``: the tier knows a request's
  chunks only when it finishes, so chain-lru's statistics count an end from the finish of the
  request that made it (the GPU pool and the simulator: from its arrival).
- A request's root (chain-lru's insert context) is the first chunk of the first call that names
  the request (``touch``, ``on_store_miss``, ``on_request_access``): the head of its prefix when it
  hits, its first stored chunk otherwise; forgotten at its finish.
- ``evict(n, protected)``: atomic. If fewer than ``n`` unpinned chunks lie outside ``protected`` it
  returns None and changes nothing; otherwise the unpinned protected chunks are pinned for the call,
  ``P.evict_many(n)`` takes the victims, and those chunks are released again, oldest first (they
  keep their relative order and move to their segments' newest positions).
- ``remove``: ``P.remove(k)`` (O(1), no ghost); ``clear``: ``P.reset()`` (ghosts, adaptive state and,
  for the adaptive classes, the request log and shadows too).

``WakmanAdaptive`` / ``WakmanPlus`` log, at each ``on_request_finished``, the request's keys (as the
tier saw them: the chunks it loaded or offered, in prefix order) and the time; every
``interval_s`` the manager replays them through its shadow policies at the tier's capacity (one
block = one chunk, scored by the first-miss rule over the chunks) and a switch moves the live
policy's chunks to the new policy with ``handover`` (pinned chunks stay pinned). The replay runs
inline, in the ``on_request_finished`` call that finds a decision due.

Where vLLM's own ``lru`` orders differently: its rank is a chunk's last insert or access, kept
through pinning (a chunk whose load or store ends keeps that rank; here it becomes newest), 0.33
and 0.34 rank a request's chunks together at its first access (here: at its finish), and its protected
chunks keep their ranks during an eviction. Request by request (each one looked up, loaded,
stored and finished before the next), the decisions are the same; ``tests/test_vllm_offload.py``
checks both.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence

from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys

from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.adaptive.manager import AdaptiveManager, timed_replay
from wakman.policies import EvictionPolicy, handover, make_policy
from wakman.vllm_plugin.free_queue import policy_key

log = logging.getLogger(__name__)

STATIC = ("lru", "fifo", "s3fifo", "sieve", "arc", "chain-lru")
ADAPTIVE = tuple(ADAPTIVE_PRESETS)  # "wakman", "wakman-plus"
ENV_VAR = "WAKMAN_OFFLOAD_POLICY"
# Policies whose hit is recency only (fifo's hit does nothing): a chunk a request only stored is
# still hit at its finish, as vLLM's LRU re-ranks it. Elsewhere a hit counts as a reuse.
_HIT_STORED = frozenset({"lru", "fifo"})


class WakmanCachePolicy(CachePolicy):
    """A vLLM offload ``CachePolicy`` whose eviction order is a wakman core policy.

    Invariants: a key is resident iff its chunk is in ``entries``; the core pins exactly the
    chunks with ``ref_cnt != 0``; ``evict`` returns only chunks with ``ref_cnt == 0`` outside
    ``protected``, exactly ``n`` of them, or None with no change."""

    policy_name: str = "lru"

    def __init__(self, cache_capacity: int, policy: str | None = None) -> None:
        super().__init__(cache_capacity)
        self.policy_name = policy or self.policy_name
        if self.policy_name not in STATIC + ADAPTIVE:
            raise ValueError(
                f"wakman offload policy {self.policy_name!r}: choose one of {', '.join(STATIC + ADAPTIVE)}"
            )
        self.clock: Callable[[], float] = time.monotonic  # seconds; tests replace it
        self.entries: dict[int, tuple[OffloadKey, ChunkStatus]] = {}
        self._roots: dict[str, int] = {}  # request id -> the core key of its root (chain-lru's context)
        self._t0: float | None = None  # clock() at the first logged request
        self._start()
        log.info(
            "wakman: %s chooses what vLLM's CPU offload tier keeps (%d chunks, %s)",
            self.policy_name,
            self.cache_capacity,
            type(self).__name__,
        )

    def _start(self) -> None:
        capacity = max(1, self.cache_capacity)  # vLLM may size an unused tier at 0 chunks
        self.manager: AdaptiveManager | None = None
        if self.policy_name in ADAPTIVE:
            self.manager = AdaptiveManager(ADAPTIVE_PRESETS[self.policy_name], capacity)
            self.policy: EvictionPolicy = self.manager.initial_policy()
        else:
            self.policy = make_policy(self.policy_name, capacity)

    @property
    def live_policy(self) -> str:
        """The core policy now ordering the tier (the adaptive classes switch it)."""
        return self.policy.name

    # ------------------------------------------------------------------ lookups
    def _resident(self, key: OffloadKey) -> int | None:
        k = policy_key(key)
        entry = self.entries.get(k)
        return k if entry is not None and entry[0] == key else None

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        entry = self.entries.get(policy_key(key))
        return entry[1] if entry is not None and entry[0] == key else None

    # ------------------------------------------------------------------ chunk life
    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext | None = None) -> None:
        k = policy_key(key)
        if k in self.entries:  # two keys with one 64-bit hash: ~n^2 / 2^65 for n chunks
            raise RuntimeError(f"offload key {key!r} collides with a resident chunk's 64-bit key")
        self.entries[k] = (key, chunk)
        self.policy.insert(k, chunk.ref_cnt != 0)

    def remove(self, key: OffloadKey) -> None:
        k = self._resident(key)
        if k is not None:
            del self.entries[k]
            self.policy.remove(k)

    def mark_evictable(self, key: OffloadKey) -> None:
        self.policy.unpin(policy_key(key))

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self.policy.pin(policy_key(key))

    def clear(self) -> None:
        self.entries.clear()
        self._roots.clear()
        self.policy.reset()
        if self.manager is not None:
            self._t0 = None
            self._start()

    # ------------------------------------------------------------------ accesses
    def _root(self, keys: list[OffloadKey], req_context: ReqContext) -> int | None:
        """The request's root key, set by the first call that names the request with a chunk."""
        root = self._roots.get(req_context.req_id)
        if root is None and keys:
            root = self._roots[req_context.req_id] = policy_key(keys[0])
        return root

    def on_store_miss(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        keys = list(keys)
        root = self._root(keys, req_context)
        if root is not None:
            self.policy.inserting_for(root)
        miss = self.policy.miss
        for key in reversed(keys):
            miss(policy_key(key))

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        keys = list(keys)
        self._root(keys, req_context)
        for key in reversed(keys):
            k = self._resident(key)
            if k is not None:
                self.policy.hit(k)

    def on_request_access(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self._root(list(keys), req_context)

    def on_request_finished(
        self,
        key_groups: Sequence[Sequence[OffloadKey]],
        insertion_only_keys: set[OffloadKey],
        reused_keys: set[OffloadKey],
        req_context: ReqContext,
    ) -> None:
        keys = order_request_keys(key_groups, req_context)
        self._roots.pop(req_context.req_id, None)
        hit_stored = self.policy.name in _HIT_STORED
        for key in reversed(keys):
            if not hit_stored and key not in reused_keys:
                continue
            k = self._resident(key)
            if k is not None:
                self.policy.hit(k)
        if not keys:
            return
        if self.manager is None and not self.policy.learns_from_requests:
            return
        core_keys = [policy_key(key) for key in keys]
        if self.policy.learns_from_requests:
            self.policy.on_request(core_keys, len(core_keys), [], self.clock())
        if self.manager is not None:
            self._log_and_decide(core_keys)

    # ------------------------------------------------------------------ eviction
    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        if n <= 0:
            return []
        policy = self.policy
        held = []
        for key in protected:
            k = self._resident(key)
            if k is not None and not policy.is_pinned(k):
                held.append(k)
        if policy.num_evictable - len(held) < n:
            return None
        if len(held) > 1:  # released oldest first below, so they keep their relative order
            rank = {k: i for i, k in enumerate(policy.eviction_order())}
            held.sort(key=rank.__getitem__)
        for k in held:
            policy.pin(k)
        try:
            victims = policy.evict_many(n)
        finally:
            for k in held:
                policy.unpin(k)
        pop = self.entries.pop
        out = [pop(k) for k in victims]
        assert all(chunk.ref_cnt == 0 for _, chunk in out)
        return out

    # ------------------------------------------------------------------ the adaptive manager
    def _log_and_decide(self, keys: list[int]) -> None:
        """Log one finished request (time in seconds since the policy started) and take the
        decision if one is due; a switch hands the live policy's chunks to the new one."""
        manager = self.manager
        assert manager is not None
        t = self.clock()
        if self._t0 is None:
            self._t0 = t
        now = t - self._t0
        manager.estimator.record(now, keys, 1, len(keys) + 1)
        if now < manager.next_decision:
            return
        pending = manager.open_decision(now, shadow_capacity=self.policy.capacity)
        if pending is None:
            return
        replay = manager.replay_hook or manager.replay
        switch_to = manager.close_decision(pending, *timed_replay(replay, pending))
        if switch_to is not None:
            self.policy = handover(self.policy, manager.make_policy(switch_to, self.policy.capacity))


class WakmanLRU(WakmanCachePolicy):
    policy_name = "lru"


class WakmanFIFO(WakmanCachePolicy):
    policy_name = "fifo"


class WakmanS3FIFO(WakmanCachePolicy):
    policy_name = "s3fifo"


class WakmanSieve(WakmanCachePolicy):
    policy_name = "sieve"


class WakmanARC(WakmanCachePolicy):
    policy_name = "arc"


class WakmanChainLRU(WakmanCachePolicy):
    policy_name = "chain-lru"


class WakmanAdaptive(WakmanCachePolicy):
    """The ``wakman`` preset: fresh LRU and S3-FIFO shadows every 15 minutes."""

    policy_name = "wakman"


class WakmanPlus(WakmanCachePolicy):
    """The ``wakman-plus`` preset: long-lived shadows scored every 30 s."""

    policy_name = "wakman-plus"


class WakmanPolicy(WakmanCachePolicy):
    """The policy named by ``WAKMAN_OFFLOAD_POLICY`` (default ``lru``), read when vLLM builds it."""

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity, os.environ.get(ENV_VAR, "lru").strip().lower())


__all__ = [
    "WakmanARC",
    "WakmanAdaptive",
    "WakmanCachePolicy",
    "WakmanChainLRU",
    "WakmanFIFO",
    "WakmanLRU",
    "WakmanPlus",
    "WakmanPolicy",
    "WakmanS3FIFO",
    "WakmanSieve",
]
