"""Drive vLLM's ``CPUOffloadingManager`` (the CPU offload tier's scheduler side, no engine) with a
trace's chunks in the order vLLM's offloading connector calls it (``offloading/scheduler.py``):
look a request's prefix up and load the hits, offer its new chunks for storing in batches as its
blocks fill, finish it while its last store is still in flight, then complete that store.

The tests use it to compare wakman's offload policies with vLLM's own call by call, and the
benchmark to time both on the same calls. A chunk's key is an ``OffloadKey`` (a 32-byte hash and
group id 0); ``offload_keys`` makes them from integer keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

from wakman.vllm_plugin import offload
from wakman.vllm_plugin.pool_driver import hash_bytes

MODULE = offload.__name__
CLASSES = offload.CLASS_OF  # policy name -> wakman's offload class

# what serve_requests returns per request: (hit chunks, [per offer: (stored keys, evicted keys) or None])
ServeLog = list[tuple[int, list[tuple[list, list] | None]]]


def make_manager(policy: str, chunks: int) -> CPUOffloadingManager:
    """vLLM's manager of ``chunks`` chunks with vLLM's own policy (``vllm:lru``, ``vllm:arc``) or
    wakman's by name (``lru``, ``s3fifo``, ``wakman-plus``, ...), loaded by vLLM's factory."""
    if policy.startswith("vllm:"):
        return CPUOffloadingManager(chunks, cache_policy=policy[5:])
    return CPUOffloadingManager(chunks, cache_policy=CLASSES[policy], cache_policy_module_path=MODULE)


def offload_keys(keys: Iterable[int]) -> list[OffloadKey]:
    """Offload keys (group 0) for integer chunk keys (Python ints or a uint64 array)."""
    return [make_offload_key(h, 0) for h in hash_bytes(keys)]


def request_context(i: int, keys: Sequence[OffloadKey], tokens_per_chunk: int = 16) -> ReqContext:
    """Request ``r{i}``'s context, each key at the token position its chunk ends."""
    ctx = ReqContext(req_id=f"r{i}")
    for pos, key in enumerate(keys):
        ctx.set_offload_key_position(key, (pos + 1) * tokens_per_chunk)
    return ctx


def look_up_and_load(m: CPUOffloadingManager, keys: Sequence[OffloadKey], ctx: ReqContext) -> int:
    """A new request's longest run of resident chunks, as the connector looks it up; loads them
    (``prepare_load``; the load completes later). Returns the number of hit chunks."""
    m.on_new_request(ctx)
    hits = 0
    while hits < len(keys) and m.lookup(keys[hits], ctx) == LookupResult.HIT:
        hits += 1
    if hits:
        m.prepare_load(keys[:hits], ctx)
    return hits


def serve_requests(
    m: CPUOffloadingManager,
    requests: Sequence[Sequence[OffloadKey]],
    offer_all: bool = False,
    batch: int = 4,
    overlap: bool = False,
    before: Callable[[int], None] | None = None,
) -> ServeLog:
    """Each request in turn, in the connector's order: look its prefix up and load the hits (the
    load completes before its blocks are computed), then offer its new chunks for storing in
    batches of ``batch`` as its blocks fill, each batch's store completing before the next batch is
    offered; the request finishes (``on_request_finished``, in the step it ends) while its last
    batch is still being stored, and that store completes after. With ``offer_all`` the first offer
    also holds the hit prefix (a request-level tier). With ``overlap`` the request finishes, and its
    last store completes, only after the next request has looked up, loaded and stored.
    ``before(i)`` runs before request ``i`` is looked up (the benchmark sets the policy's clock to
    its arrival there). Returns, per request, (hit chunks, [per offer: (stored keys, evicted keys)
    or None])."""
    log: ServeLog = []
    pending: list[tuple[ReqContext, Sequence[OffloadKey] | None]] = []
    for i, keys in enumerate(requests):
        if before is not None:
            before(i)
        ctx = request_context(i, keys)
        hits = look_up_and_load(m, keys, ctx)
        if hits:
            m.complete_load(keys[:hits], ctx)
        offers: list[tuple[list, list] | None] = []
        last = None
        starts = list(range(hits, len(keys), batch)) or [hits]
        for j, start in enumerate(starts):
            offer = keys[0 if offer_all and j == 0 else start : start + batch]
            if not offer:
                continue
            out = m.prepare_store(offer, ctx)
            offers.append(None if out is None else (list(out.keys_to_store), list(out.evicted_keys)))
            if out is None:
                continue
            if j == len(starts) - 1:
                last = out.keys_to_store
            else:
                m.complete_store(out.keys_to_store, ctx)
        log.append((hits, offers))
        pending.append((ctx, last))
        while len(pending) > int(overlap) or (pending and i == len(requests) - 1):
            c, stored = pending.pop(0)
            m.on_request_finished(c)
            if stored:
                m.complete_store(stored, c)
    return log


def hit_chunks(log: ServeLog) -> int:
    """Chunks the requests found in the tier."""
    return sum(h for h, _ in log)


def stored_chunks(log: ServeLog) -> int:
    """Chunks the tier accepted for storing."""
    return sum(len(out[0]) for _, offers in log for out in offers if out is not None)


def evicted_chunks(log: ServeLog) -> int:
    """Chunks the tier evicted to make room."""
    return sum(len(out[1]) for _, offers in log for out in offers if out is not None)
