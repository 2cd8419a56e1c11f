"""vLLM's CPU offload tier, with a wakman core policy choosing which chunks it keeps.

vLLM's ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``) owns the chunk pool, the
reference counts and the events; it asks a ``CachePolicy`` which chunk to evict. The classes here
are such policies, loaded by vLLM's own ``CachePolicyFactory`` from ``kv_connector_extra_config``:
``{"eviction_policy": "WakmanS3FIFO", "cache_policy_module_path": "wakman.vllm_plugin.offload"}``
(``docs/vllm.md`` has the full command line). One class per policy name: ``WakmanLRU``,
``WakmanFIFO``, ``WakmanS3FIFO``, ``WakmanSieve``, ``WakmanARC``, ``WakmanChainLRU``,
``WakmanAdaptive`` (the ``wakman`` preset) and ``WakmanPlus`` (``wakman-plus``); ``WakmanPolicy``
reads the name from the environment variable ``WAKMAN_OFFLOAD_POLICY`` (``lru`` when unset or
empty). The factory passes a policy nothing but its capacity, and it resolves
vLLM's own names (``lru``, ``arc``) before the module path: ``"eviction_policy": "lru"`` builds
vLLM's LRU even with this module's path. Any other name this module lacks fails with the list of
its classes (module ``__getattr__``). This module is the only one of wakman that imports vLLM's
offload code; it works with vLLM 0.32, 0.33 and 0.34 (whose manager no longer calls ``touch``: a
request's reuse reaches the policy at its finish). The first policy built in a process checks the
installed vLLM (``compat.check_offload_vllm_version``: the version, and the code of each manager
method that calls the policy) and raises ``UnsupportedVllmVersion`` naming the supported releases or
the changed methods, also where the tier is built through vLLM's Python API.

State: the core policy (capacity = the tier's chunks) holds one 64-bit key per resident chunk,
``policy_key(offload_key)`` (the GPU pool's rule: an ``OffloadKey`` is a ``BlockHash`` and a group
id); ``chunks`` maps each resident ``OffloadKey`` to its ``ChunkStatus`` (``get`` is that dict's own
``get``, as in vLLM's policies: the manager's lookups run no wakman code) and ``key_of`` maps the
core key back to the ``OffloadKey``. Outside ``lru`` a chunk is pinned in
the core iff its ``ref_cnt != 0`` (-1: its store is in flight; > 0: loads read it), so the core
never offers it as a victim; ``lru`` is below.

What each vLLM call does to the core policy ``P`` (outside ``lru``):

- ``get``: a dict read, no event (vLLM's ``lookup`` is not an access).
- ``insert(key, chunk[, req_context])`` (0.32 passes two arguments, 0.33 and 0.34 three):
  ``P.inserting_for(root)``, the request's own root (0.32: the root of the request that reported
  the key's store miss), then ``P.insert(k, pinned=chunk.ref_cnt != 0)``; the manager always
  inserts ``ref_cnt == -1``, i.e. pinned.
- ``mark_non_evictable`` / ``mark_evictable`` (``ref_cnt`` leaves / reaches 0): ``P.pin`` /
  ``P.unpin``. By the core's pinning rule a released chunk re-enters at the newest position of its
  segment, as a freed block does in vLLM's GPU free queue: a load (pinned while it reads) or an
  offer that protects a chunk re-ranks it as recency does, also under ``fifo``, ``sieve`` and
  ``s3fifo``, whose own hit does not move a key (vLLM's ``arc`` leaves a pinned chunk in place).
  The adaptive classes' shadows replay each request's chunks as accesses and do not model that
  re-ranking.
- ``on_store_miss(keys)``: ``P.inserting_for(root)``, the request's root (below: the chunks the
  manager inserts next are the request's), then ``P.miss(k)`` for each key, last key first, before
  the manager evicts and inserts: the ghost hits of S3-FIFO and ARC are seen at the miss, as the
  core protocol wants. The manager reports a request's misses once, so each missed key keeps its
  request's root until it is inserted or the request finishes: on 0.32, whose ``insert`` carries
  no request, a store retried after a refused offer is filed under its own request's root too.
- ``touch(keys)`` (0.32, 0.33): ``P.hit(k)`` for each resident key, last key first (the head of a prefix ends
  newest).
- ``on_request_access`` (0.33, 0.34): no event; a request's accesses are committed once, when it finishes.
- ``on_request_finished``: for the request's keys in prefix order, last key first: a resident
  chunk the request reused gets one ``P.hit``; a chunk it only stored gets none (a store is not a
  reuse; vLLM's ARC does the same). (Under ``lru`` every key of the request is re-ranked, head
  newest, as vLLM's LRU does: below.)
  Then the request hint ``P.on_request(keys, len(keys), [], clock())``: the tier knows a request's
  chunks only when it finishes, so chain-lru's statistics count an end from the finish of the
  request that made it (the GPU pool and the simulator: from its arrival).
- A request's root (chain-lru's insert context) is the first chunk of the first call that names
  the request (``touch``, ``on_store_miss``, ``on_request_access``, ``insert``): the head of its
  prefix when it hits, its first stored chunk otherwise; forgotten at its finish.
- ``evict(n, protected)``: atomic. If fewer than ``n`` unpinned chunks lie outside ``protected`` it
  returns None and changes nothing; otherwise the unpinned protected chunks are pinned for the call,
  ``P.evict_many(n)`` takes the victims, and those chunks are released again, oldest first, to
  their segments' newest positions. Oldest first is by when each last took its segment's newest
  position (a stamp per chunk): their relative order exactly, except in S3-FIFO's main queue, which
  reorders itself as it evicts. The cost is O(n + |protected|): nothing walks the tier's order.
- ``remove``: ``P.remove(k)`` (O(1), no ghost); ``clear``: ``P.reset()`` (ghosts, adaptive state and,
  for the adaptive classes, the request log and shadows too).

``lru`` is vLLM's ``lru.py``, decision for decision, on the core's LRU: ``offload_lru.py`` keeps
vLLM's ranks for the chunks above the core's order (``VllmLruOrder``), and every event under ``lru``
(the policy's, or an adaptive class's while its live policy is lru) goes to it.

``WakmanAdaptive`` / ``WakmanPlus`` log, at each ``on_request_finished``, the request's keys (as the
tier saw them: the chunks it loaded or offered, in prefix order) and the time; every
``interval_s`` the manager replays them through its shadow policies at the tier's capacity (one
block = one chunk, scored by the first-miss rule over the chunks) and a switch moves the live
policy's chunks to the new policy with ``handover`` (pinned chunks stay pinned). The
``on_request_finished`` call that finds a decision due snapshots its window; the replay runs in a
background thread (``WAKMAN_REPLAY=thread``, the default: the manager's calls do not wait for it;
the core's replay loops run without the GIL) or inline in that call (``inline``: reproducible), and
its outcome is applied (the switch, on the manager's thread, the only one that touches the live
policy) by the first ``on_request_finished`` after it ends. One replay at a time: a decision due
while one runs waits for it. ``clear`` drops a running replay's outcome. While their live policy
is ``lru`` it is ``lru``'s, vLLM's ranks (``VllmLruOrder``): a switch to it ranks the chunks being
stored at the switch and leaves the chunks being loaded in place (``VllmLruOrder.taking_over``); a
switch from it hands the chunks over in vLLM's LRU order.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from wakman.adaptive.config import ADAPTIVE_PRESETS
from wakman.adaptive.manager import KEPT_DECISIONS, AdaptiveManager, PendingDecision
from wakman.adaptive.replays import DecisionReplays
from wakman.policies import SERVABLE_POLICIES, EvictionPolicy, handover, make_policy, take_over
from wakman.vllm_plugin.compat import check_offload_vllm_version, offload_import_failed
from wakman.vllm_plugin.free_queue import policy_key
from wakman.vllm_plugin.offload_lru import VllmLruOrder
from wakman.vllm_plugin.settings import OFFLOAD_VAR, offload_policy_from_env, replay_mode_from_env

try:
    from vllm.v1.kv_offload.base import OffloadKey, ReqContext
    from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys
except ImportError as exc:  # a vLLM whose offload modules moved: the version check's message
    raise offload_import_failed(exc) from exc

log = logging.getLogger(__name__)

STATIC = SERVABLE_POLICIES
ADAPTIVE = tuple(ADAPTIVE_PRESETS)  # "wakman", "wakman-plus"
ENV_VAR = OFFLOAD_VAR
# Policies whose hit moves an unpinned key to its segment's newest position.
_HIT_MOVES = frozenset({"lru", "arc", "chain-lru"})


@functools.cache
def checked_vllm() -> str:
    """``check_offload_vllm_version`` once per process (a refusal is not kept: it raises again)."""
    return check_offload_vllm_version()


class WakmanCachePolicy(CachePolicy):
    """A vLLM offload ``CachePolicy`` whose eviction order is a wakman core policy.

    Invariants: a key is resident iff it is in ``chunks``, iff its core key is in ``key_of`` (and
    in the core); ``evict`` returns only chunks with ``ref_cnt == 0`` outside ``protected``, exactly
    ``n`` of them, or None with no change. Outside ``lru`` the core pins exactly the chunks with
    ``ref_cnt != 0``; under ``lru`` (also an adaptive class's live lru) the order is ``lru``'s
    (``VllmLruOrder``: vLLM's ranks)."""

    policy_name: str = "lru"

    def __init__(self, cache_capacity: int, policy: str | None = None) -> None:
        checked_vllm()
        super().__init__(cache_capacity)
        self.policy_name = policy or self.policy_name
        if self.policy_name not in STATIC + ADAPTIVE:
            raise ValueError(
                f"wakman offload policy {self.policy_name!r}: choose one of {', '.join(STATIC + ADAPTIVE)}"
            )
        self.clock: Callable[[], float] = time.monotonic  # seconds; tests replace it
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self.key_of: dict[int, OffloadKey] = {}  # core key -> its resident OffloadKey
        self.get = self.chunks.get  # vLLM's lookups read the dict directly (no Python frame)
        self._roots: dict[str, int] = {}  # request id -> the core key of its root (chain-lru's context)
        # a key a request reported as a store miss -> (that request's id, its root), until the key is
        # inserted or the request finishes: 0.32's insert names no request, so a store retried after
        # a refused offer (whose miss vLLM reports once) is filed under its own request's root
        self._miss_roots: dict[int, tuple[str, int]] = {}
        self._misses: dict[str, list[int]] = {}  # request id -> the keys it reported as store misses
        self._t0: float | None = None  # clock() at the first logged request
        # when each key in the core's order last took its segment's newest position
        self._stamps: dict[int, int] = {}
        self._tick = 0
        # the adaptive classes' replays: one at a time, in a background thread (WAKMAN_REPLAY=thread)
        self._replays = DecisionReplays(
            self.policy_name in ADAPTIVE and replay_mode_from_env() == "thread", "wakman-offload-replay"
        )
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
        self._replays.drop()  # a replay still running for a manager ``clear`` replaced ends unread
        if self.policy_name in ADAPTIVE:
            self.manager = AdaptiveManager(
                ADAPTIVE_PRESETS[self.policy_name], capacity, kept_decisions=KEPT_DECISIONS
            )
            self.policy: EvictionPolicy = self.manager.initial_policy()
        else:
            self.policy = make_policy(self.policy_name, capacity)
        self.policy.reserve()  # no table grows while the tier serves
        self._hit_moves = self.policy.name in _HIT_MOVES
        # lru (also an adaptive class's live lru): vLLM's ranks for the chunks above the core's
        # order (offload_lru.py)
        self.lru = VllmLruOrder(self.policy, self.chunks, self.key_of) if self.policy.name == "lru" else None

    @property
    def live_policy(self) -> str:
        """The core policy now ordering the tier (the adaptive classes switch it)."""
        return self.policy.name

    # ------------------------------------------------------------------ lookups
    def _resident(self, key: OffloadKey) -> int | None:
        """The core key of a resident chunk's key, else None."""
        return policy_key(key) if key in self.chunks else None

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        """The chunk's status if resident (each instance shadows this with ``chunks.get``)."""
        return self.chunks.get(key)

    # ------------------------------------------------------------------ the core's order
    def _stamp(self, k: int) -> None:
        if self.lru is not None:  # lru orders by ranks, not stamps
            return
        self._tick += 1
        self._stamps[k] = self._tick

    def _unpin(self, k: int) -> None:
        self.policy.unpin(k)
        self._stamp(k)

    def _hit(self, k: int) -> None:
        self.policy.hit(k)
        if self._hit_moves:
            self._stamp(k)

    # ------------------------------------------------------------------ chunk life
    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext | None = None) -> None:
        k = policy_key(key)
        if k in self.key_of:  # two keys with one 64-bit hash: ~n^2 / 2^65 for n chunks
            raise RuntimeError(f"offload key {key!r} collides with a resident chunk's 64-bit key")
        filed = self._miss_roots.pop(k, None)
        if req_context is not None:  # 0.33, 0.34: file it under its own request's root
            root = self._roots.get(req_context.req_id)
            if root is None:
                root = self._roots[req_context.req_id] = k
            self.policy.inserting_for(root)
        elif filed is not None:  # 0.32: the root of the request that reported the key's miss
            self.policy.inserting_for(filed[1])
        self.chunks[key] = chunk
        self.key_of[k] = key
        if self.lru is not None:
            self.lru.inserted(k, key, chunk, req_context)
            return
        self.policy.insert(k, chunk.ref_cnt != 0)
        if chunk.ref_cnt == 0:
            self._stamp(k)

    def remove(self, key: OffloadKey) -> None:
        if self.chunks.pop(key, None) is not None:
            k = policy_key(key)
            del self.key_of[k]
            self._forget(k)
            self.policy.remove(k)

    def _forget(self, k: int) -> None:
        self._stamps.pop(k, None)
        if self.lru is not None:
            self.lru.forget(k)

    def mark_evictable(self, key: OffloadKey) -> None:
        k = policy_key(key)
        if self.lru is not None:
            self.lru.evictable(k, key)
        else:
            self._unpin(k)

    def mark_non_evictable(self, key: OffloadKey) -> None:
        k = policy_key(key)
        if self.lru is not None:
            self.lru.non_evictable(k, key)
        else:
            self.policy.pin(k)

    def clear(self) -> None:
        self.chunks.clear()
        self.key_of.clear()
        self._roots.clear()
        self._miss_roots.clear()
        self._misses.clear()
        self._stamps.clear()
        self.policy.reset()
        if self.manager is not None:
            self._t0 = None
            self._start()
        elif self.lru is not None:
            self.lru.clear()

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
        rid = req_context.req_id
        filed = self._misses.setdefault(rid, []) if root is not None else None
        for key in reversed(keys):
            k = policy_key(key)
            miss(k)
            if filed is not None:
                self._miss_roots[k] = (rid, root)
                filed.append(k)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        keys = list(keys)
        self._root(keys, req_context)
        if self.lru is not None:
            self.lru.rank_fresh(reversed(keys))
            return
        for key in reversed(keys):
            k = self._resident(key)
            if k is not None:
                self._hit(k)

    def on_request_access(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        keys = list(keys)
        self._root(keys, req_context)
        if self.lru is not None:
            self.lru.accessed(keys, req_context)

    def on_request_finished(
        self,
        key_groups: Sequence[Sequence[OffloadKey]],
        insertion_only_keys: set[OffloadKey],
        reused_keys: set[OffloadKey],
        req_context: ReqContext,
    ) -> None:
        keys = order_request_keys(key_groups, req_context)
        self._roots.pop(req_context.req_id, None)
        for k in self._misses.pop(req_context.req_id, ()):
            if (filed := self._miss_roots.get(k)) is not None and filed[0] == req_context.req_id:
                del self._miss_roots[k]
        if self.lru is not None:  # every key of the request re-ranked, tail first: the head ends newest
            self.lru.finished(keys, req_context)
        else:
            for key in reversed(keys):
                if key not in reused_keys:
                    continue
                k = self._resident(key)
                if k is not None:
                    self._hit(k)
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
        """The first ``n`` evictable chunks outside ``protected``, in the policy's order (lru: the
        front's, the core's, then the held ones by rank, which is vLLM's LRU order). Costs
        O(n + |protected|), plus the in-use chunks lru leaves in place; never a pass over the tier."""
        if n <= 0:
            return []
        victims = self._evict_core(n, protected) if self.lru is None else self.lru.evict(n, protected)
        if victims is None:
            return None
        out = []
        for k in victims:
            key = self.key_of.pop(k)
            out.append((key, self.chunks.pop(key)))
            self._forget(k)
        assert all(chunk.ref_cnt == 0 for _, chunk in out)
        return out

    def _evict_core(self, n: int, protected: set[OffloadKey]) -> list[int] | None:
        """Pin the protected chunks in the core's order for the call; the core picks the victims;
        the protected chunks go back oldest first (keeping their relative order: exactly where the
        core's order is the order its keys last took their segment's newest position, as in lru,
        fifo, arc and chain-lru), to their segments' newest positions."""
        policy, chunks = self.policy, self.chunks
        aside = []
        for key in protected:
            chunk = chunks.get(key)
            if chunk is not None and chunk.ref_cnt == 0:
                aside.append(policy_key(key))
        if policy.num_evictable - len(aside) < n:
            return None
        for k in aside:
            policy.pin(k)
        try:
            return policy.evict_many(n)
        finally:
            aside.sort(key=lambda k: self._stamps.get(k, 0))
            for k in aside:
                self._unpin(k)

    # ------------------------------------------------------------------ the adaptive manager
    def _log_and_decide(self, keys: list[int]) -> None:
        """Log one finished request (time in seconds since the policy started); apply the outcome
        of a replay that has ended; open the decision if one is due and none runs (its replay in
        the background, or inline)."""
        manager = self.manager
        assert manager is not None
        t = self.clock()
        if self._t0 is None:
            self._t0 = t
        now = t - self._t0
        manager.estimator.record(now, keys, 1, len(keys) + 1)
        if (outcome := self._replays.ended()) is not None:
            self._apply(*outcome)
        if self._replays.running or now < manager.next_decision:
            return
        pending = manager.open_decision(now, shadow_capacity=self.policy.capacity, latest=True)
        if pending is None:
            return
        outcome = self._replays.start(pending, manager.replay_hook or manager.replay)
        if outcome is not None:  # inline
            self._apply(*outcome)

    def drain(self) -> None:
        """Apply the running replay's outcome, waiting for it if needed (tests; an engine applies
        it at the first request finished after it ends)."""
        if (outcome := self._replays.ended(wait=True)) is not None:
            self._apply(*outcome)

    def _apply(self, pending: PendingDecision, rates: dict | None, error: str | None, wall_s: float) -> None:
        """Log the decision; a switch hands the live policy's chunks to the new one."""
        manager = self.manager
        assert manager is not None
        switch_to = manager.close_decision(pending, rates, error, wall_s)
        if switch_to is not None:
            log.info("wakman: offload tier's live policy is now %s (shadow hit rates %s)", switch_to, rates)
            new = manager.make_policy(switch_to, self.policy.capacity)
            new.reserve()
            if self.lru is not None:  # from lru: its chunks in vLLM's LRU order, the in-use ones pinned
                self.policy = take_over(new, *self.lru.release())
            else:
                self.policy = handover(self.policy, new)
            self.lru = None
            if switch_to == "lru":
                self.lru = VllmLruOrder.taking_over(self.policy, self.chunks, self.key_of)
            self._hit_moves = self.policy.name in _HIT_MOVES
            self._stamps.clear()
            for k in self.policy.eviction_order():  # O(chunks), once per switch
                self._stamp(k)


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
    """The policy named by ``WAKMAN_OFFLOAD_POLICY`` (``lru`` when unset), read when vLLM builds it."""

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity, offload_policy_from_env())


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

# policy name -> the class vLLM's factory loads for it (``eviction_policy``)
CLASS_OF = {
    cls.policy_name: cls.__name__
    for cls in (
        WakmanLRU,
        WakmanFIFO,
        WakmanS3FIFO,
        WakmanSieve,
        WakmanARC,
        WakmanChainLRU,
        WakmanAdaptive,
        WakmanPlus,
    )
}


def __getattr__(name: str):
    """vLLM's factory looks the ``eviction_policy`` class up here: name the valid ones on a miss."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    hint = CLASS_OF.get(name.strip().lower())
    if hint is None:
        hint = next(
            (c for c in (*CLASS_OF.values(), "WakmanPolicy") if c.lower() == name.strip().lower()), None
        )
    raise AttributeError(
        f"{__name__} has no policy class {name!r}"
        + (f" (did you mean {hint!r}?)" if hint else "")
        + f": eviction_policy is one of {', '.join((*CLASS_OF.values(), 'WakmanPolicy'))}"
        + f" (WakmanPolicy reads {ENV_VAR})"
    )
