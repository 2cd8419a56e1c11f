"""wakman's policies behind a real vLLM BlockPool (0.32, and 0.33 and 0.34 in their lanes), operation
by operation (no engine)."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import splitmix64
from vllm_support import need_vllm
from wakman.simulation.pool import BlockPool as SimPool
from wakman.workload.build import build_config, generate_requests

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

import vllm  # noqa: E402
from vllm.v1.core.block_pool import BlockPool  # noqa: E402

from wakman.policies import make_policy  # noqa: E402
from wakman.vllm_plugin.free_queue import policy_key  # noqa: E402
from wakman.vllm_plugin.pool_driver import Prompt, make_pool, serve_one, vllm_keys  # noqa: E402

POLICIES = ("lru", "fifo", "s3fifo", "arc", "sieve")


@pytest.fixture(scope="module")
def stream():
    reqs = generate_requests(build_config(mix=[0.3, 0.3, 0.4], duration_s=600, rate=1.5), seed=3)
    return [(vllm_keys(r.block_keys[: r.full_blocks]), r.max_hit_blocks, r) for r in reqs]


def _sim_hits(items, policy: str, capacity: int, hints: bool = False) -> list[int]:
    """Each request's hit blocks through the simulator's pool, one request at a time (its admission:
    lookup, misses, touch, allocate, cache; then the release), under the keys vLLM's queue gives the
    policy (``policy_key`` of each hash: chain-lru's duel samples blocks by key). With ``hints`` the
    policy hears each request as the serve loop tells it (``on_request`` at arrival, request i at i
    seconds, without outputs as vLLM at arrival; ``inserting_for`` its root before the admission)."""
    chosen = make_policy(policy, capacity)
    pool, out = SimPool(capacity, chosen), []
    for i, (hashes, limit, _) in enumerate(items):
        keys = [policy_key(h) for h in hashes]
        if hints:
            chosen.on_request(keys, len(keys), [], float(i))
            chosen.inserting_for(keys[0])
        out.append(pool.admit(0, keys, limit, len(keys), len(keys)))
        pool.release_run(0)
    return out


@pytest.mark.parametrize("capacity", [300, 1500])
def test_lru_is_stock_vllm_request_by_request(stream, capacity):
    items = [(k, lim) for k, lim, _ in stream if len(k) <= capacity]
    stock, ours = make_pool(capacity, None), make_pool(capacity, "lru")
    for keys, limit in items:
        assert serve_one(ours, keys, limit) == serve_one(stock, keys, limit)
        ours.check()
    assert [b.block_id for b in ours.free_block_queue.get_all_free_blocks()][-50:] == [
        b.block_id for b in stock.free_block_queue.get_all_free_blocks()
    ][-50:]


@pytest.mark.parametrize("policy", POLICIES)
def test_hosted_policy_agrees_with_the_simulator(stream, policy):
    """Same policy, two hosts: vLLM's pool and wakman's simulator pool give the same hits request by
    request. Both see an admission's misses before its evictions, and both keep vLLM's duplicate
    blocks (a recomputed block whose hash is still cached is a second cached copy; the simulator
    took the cached copy over until 2026-12-02, and S3-FIFO's hits here were 1.3 % apart)."""
    capacity = 500
    items = [(k, lim, r) for k, lim, r in stream if len(k) <= capacity]
    pool = make_pool(capacity, policy)
    hosted = [serve_one(pool, k, lim) for k, lim, _ in items]
    pool.check()
    simulated = _sim_hits(items, policy, capacity)
    assert hosted == simulated
    # FIFO re-enters a released block at its newest end, so with every hit pinning and releasing
    # it orders blocks by release time, as stock vLLM does; the others must differ from stock.
    stock = make_pool(capacity, None)
    same_as_stock = hosted == [serve_one(stock, k, lim) for k, lim, _ in items]
    assert same_as_stock == (policy in ("lru", "fifo"))


def test_chain_lru_hears_the_requests_as_in_the_simulator(stream):
    """chain-lru learns from the request stream: vLLM's pool given the scheduler's hints
    (``request_arrived``, ``inserting_for``) and the simulator's pool given the serve loop's give the
    same hits request by request; the hints matter here (without them chain-lru is LRU, i.e. stock)."""
    capacity = 500
    items = [(k, lim, r) for k, lim, r in stream if len(k) <= capacity]
    pool = make_pool(capacity, "chain-lru")
    hosted = [serve_one(pool, k, lim, arrival_s=float(i)) for i, (k, lim, _) in enumerate(items)]
    pool.check()
    assert hosted == _sim_hits(items, "chain-lru", capacity, hints=True)
    stock = make_pool(capacity, None)
    assert hosted != [serve_one(stock, k, lim) for k, lim, _ in items]


@settings(max_examples=60, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    capacity=st.integers(8, 40),
    requests=st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 10), st.integers(0, 3)), min_size=1, max_size=60
    ),
)
def test_free_queue_invariants(policy, capacity, requests):
    """Random prefix trees: membership iff ref_cnt == 0, blank blocks first, no lost block, and
    get_new_blocks never refuses while enough blocks are free."""
    pool = make_pool(capacity, policy)
    for root, length, extra in requests:
        keys = vllm_keys(root * 1000 + i for i in range(length))
        if len(keys) + extra > capacity:
            continue
        serve_one(pool, keys, len(keys) - 1, extra_blocks=extra)
        pool.check()
        queue = pool.free_block_queue
        free = queue.get_all_free_blocks()
        hashed = [b.block_hash is not None for b in free]
        assert hashed == sorted(hashed), "a blank block sits behind a cached one"
        taken = pool.get_new_blocks(pool.get_num_free_blocks())  # never refuses
        assert len(taken) == capacity and pool.get_num_free_blocks() == 0
        pool.free_blocks(taken)
        pool.check()


def test_pins_that_are_not_hits_do_not_reach_the_policy():
    pool = make_pool(16, "s3fifo")
    keys = vllm_keys(range(4))
    serve_one(pool, keys, 3)
    queue = pool.free_block_queue
    hits = queue.num_hits
    blocks = [pool.cached_block_hash_to_block.get_one_block(k) for k in keys[:2]]
    pool.touch(blocks)  # an offload-style pin: not a hit
    assert queue.num_hits == hits and all(queue.policy.is_pinned(queue.key_of(b)) for b in blocks)
    pool.counting_hits = True
    pool.touch(blocks)  # a prefix hit on blocks that are already pinned
    pool.counting_hits = False
    assert queue.num_hits == hits + 2
    assert [queue.key_of(b) for b in blocks] == [policy_key(k) for k in keys[:2]]
    pool.free_blocks(blocks + blocks)
    pool.check()


def test_reset_forgets_policy_state_and_ghosts():
    pool = make_pool(20, "s3fifo")
    for root in range(12):
        serve_one(pool, vllm_keys(root * 100 + i for i in range(5)), 4)
    policy = pool.free_block_queue.policy
    assert len(policy) > 0 and policy.ghost_size > 0
    assert pool.reset_prefix_cache()
    pool.check()
    assert len(policy) == 0 and policy.ghost_size == 0
    assert pool.free_block_queue.num_blank_blocks == 20
    assert all(b.block_hash is None for b in pool.blocks)


def test_switch_keeps_every_block():
    pool = make_pool(64, "lru")
    for root in range(30):
        serve_one(pool, vllm_keys(root % 7 * 100 + i for i in range(6)), 5)
    before = {b.block_id for b in pool.free_block_queue.get_all_free_blocks()}
    for name in ("s3fifo", "arc", "sieve", "lru"):
        pool.free_block_queue.switch(make_policy(name, 64))
        pool.check()
        assert {b.block_id for b in pool.free_block_queue.get_all_free_blocks()} == before


def test_install_takes_a_new_policy_of_the_pools_size_once():
    """A policy that already holds keys (the queue would count them as free blocks the pool lacks:
    a crash in get_new_blocks), one sized for another pool, a second install, and a switch to a
    policy of another size are refused with a clear error; the pool stays usable."""
    from wakman.vllm_plugin import install

    def fresh() -> BlockPool:
        return BlockPool(11, enable_caching=True, hash_block_size=16)

    used = make_policy("lru", 10)
    used.access(1)
    with pytest.raises(ValueError, match="must start empty"):
        install(fresh(), used)
    with pytest.raises(ValueError, match=r"capacity \(3 blocks\) must be the pool's usable blocks \(10\)"):
        install(fresh(), make_policy("lru", 3))
    pool = install(fresh(), make_policy("s3fifo", 10))
    with pytest.raises(RuntimeError, match="already has a wakman policy"):
        install(pool, make_policy("lru", 10))
    with pytest.raises(ValueError, match="usable blocks"):
        pool.free_block_queue.switch(make_policy("lru", 5))
    assert len(pool.get_new_blocks(10)) == 10
    pool.check()


@pytest.mark.parametrize("name", ["lru", "s3fifo", "arc", "chain-lru"])
def test_the_queue_reserves_each_policys_tables(name):
    """The policy the queue takes at its install and at a switch has its tables for every key it can
    hold already allocated (``reserve()``): no index grows while vLLM serves."""
    capacity = 500
    room = make_policy(name, capacity)
    room.reserve()
    pool = make_pool(capacity, name)
    assert pool.free_block_queue.policy.memory_bytes >= room.memory_bytes
    switched_to = make_policy(name, capacity)
    pool.free_block_queue.switch(switched_to)
    assert switched_to.memory_bytes >= room.memory_bytes > make_policy(name, capacity).memory_bytes


def _loaded_pool(policy: str, capacity: int = 300):
    """A pool after traffic with shared prefixes: cached free blocks in the policy's order."""
    pool = make_pool(capacity, policy)
    for root in range(80):
        serve_one(pool, vllm_keys(root % 13 * 1000 + i for i in range(root % 9 + 2)), 8, extra_blocks=1)
    return pool


@pytest.mark.parametrize("policy", POLICIES)
def test_repr_of_every_block_works_and_no_block_points_into_a_queue(policy):
    """vLLM's KVCacheBlock.__repr__ reads prev_free_block / next_free_block: the queue leaves them None."""
    pool = _loaded_pool(policy)
    assert all(b.prev_free_block is None and b.next_free_block is None for b in pool.blocks)
    assert all(f"block_id={b.block_id}," in repr(b) for b in pool.blocks)


@pytest.mark.parametrize("policy", POLICIES)
def test_iter_blocks_after_walks_the_free_order_from_any_cursor(policy):
    """The offloader's cursor walk (vLLM's simple_kv_offload) sees the queue's order: from the head,
    and after any free block, across the iterator's chunk boundaries (64, 128, ...)."""
    pool = _loaded_pool(policy)
    queue = pool.free_block_queue
    free = queue.get_all_free_blocks()
    assert len(free) > 200 and queue.num_blank_blocks > 0
    assert list(queue.iter_blocks_after(None)) == free
    for i in (0, queue.num_blank_blocks - 1, queue.num_blank_blocks, 63, 64, 130, len(free) - 1):
        assert list(queue.iter_blocks_after(free[i])) == free[i + 1 :], i
    in_use = pool.get_new_blocks(1)[0]
    assert list(queue.iter_blocks_after(in_use)) == []  # not free: nothing after it, as in stock
    pool.free_blocks([in_use])


@pytest.mark.parametrize("policy", POLICIES)
def test_removing_one_hash_keeps_every_other_block_in_place(policy):
    """A connector eviction (BlockPool.evict_blocks) of a free block: under lru and fifo the block
    keeps its place in the order (hashless, as in stock's one list); under the other policies it
    leaves the policy for the head of the blank blocks. The other blocks keep their order (their
    metadata is untouched)."""
    pool = _loaded_pool(policy)
    queue = pool.free_block_queue
    free = queue.get_all_free_blocks()
    victim = free[queue.num_blank_blocks + 5]
    pool.evict_blocks({victim.block_id})
    assert victim.block_hash is None
    after = queue.get_all_free_blocks()
    if policy in ("lru", "fifo"):
        assert queue.is_hashless(victim) and after == free
    else:
        assert queue.key_of(victim) is None and not queue.is_hashless(victim)
        assert after[0] is victim and after[1:] == [b for b in free if b is not victim]
    pool.check()
    taken = pool.get_new_blocks(len(after))  # every free block, in that order; the hashless one too
    assert taken == after and not queue.is_hashless(victim) and queue.key_of(victim) is None
    pool.free_blocks(taken)
    pool.check()


@pytest.mark.parametrize("to", ["fifo", "s3fifo", "arc"])
def test_a_switch_sends_hashless_blocks_where_the_new_policy_would(to):
    """A free block that lost its hash under lru keeps its place (hashless); at a switch to a policy
    that renames keys (fifo) it keeps it there, to any other it goes to blank's head, as its hash loss
    would have sent it under that policy."""
    pool = _loaded_pool("lru")
    queue = pool.free_block_queue
    victim = queue.get_all_free_blocks()[queue.num_blank_blocks + 5]
    pool.evict_blocks({victim.block_id})
    assert queue.is_hashless(victim)
    queue.switch(make_policy(to, 300))
    pool.check()
    if to == "fifo":
        assert queue.is_hashless(victim) and queue.get_all_free_blocks()[0] is not victim
    else:
        assert not queue.is_hashless(victim) and queue.key_of(victim) is None
        assert queue.in_blank(victim) and queue.get_all_free_blocks()[0] is victim


@pytest.mark.parametrize("to", ["fifo", "s3fifo", "arc"])
def test_a_switch_sends_unpinned_pages_where_the_new_policy_would(to):
    """Pages unpinned under lru (hashless, in the policy's order) stay there at a switch to a policy
    that renames keys (fifo); at a switch to any other they join the reserve, oldest first, and are
    handed out after every blank and cached block, as that policy would have kept them."""
    pool = _loaded_pool("lru")
    queue = pool.free_block_queue
    pages = pool.get_new_blocks(3)
    pool.unpin_blocks(pages, lambda b: None)
    assert all(queue.is_hashless(b) for b in pages) and queue.num_reserve_blocks == 0
    queue.switch(make_policy(to, 300))
    pool.check()
    if to == "fifo":
        assert all(queue.is_hashless(b) for b in pages) and queue.num_reserve_blocks == 0
    else:
        assert queue.num_reserve_blocks == 3 and not any(queue.is_hashless(b) for b in pages)
        assert queue.get_all_free_blocks()[-3:] == pages


def _request_steps(*more: st.SearchStrategy) -> st.SearchStrategy:
    """1 to 40 requests, each (prefix root, full blocks, uncached extra blocks, *more)."""
    return st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 10), st.integers(0, 3), *more), min_size=1, max_size=40
    )


def _request_keys(root: int, length: int, extra: int, capacity: int) -> list | None:
    """A step's prompt keys, or None where the request does not fit the pool."""
    keys = vllm_keys(root * 1000 + i for i in range(length))
    return keys if len(keys) + extra <= capacity else None


def _assert_same_free_queue(stock: BlockPool, ours: BlockPool) -> None:
    """``ours`` keeps its invariants and frees blocks in stock's order, block by block."""
    ours.check()
    order = [[b.block_id for b in p.free_block_queue.get_all_free_blocks()] for p in (stock, ours)]
    assert order[0] == order[1]


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(8, 40),
    steps=_request_steps(
        st.sets(st.integers(0, 40), max_size=4),  # connector evictions while the request holds
        st.sets(st.integers(0, 40), max_size=4),  # ... and after it freed its blocks
    ),
)
def test_lru_is_stock_across_connector_evictions(capacity, steps):
    """lru behind vLLM's pool makes stock's decisions when a connector evicts blocks from the prefix
    cache (``evict_blocks``: in use or free, cached or not): the same hits at every request and the
    same free queue, block by block, after every step. Stock vLLM's pool is the reference."""
    stock, ours = make_pool(capacity, None), make_pool(capacity, "lru")
    for root, length, extra, held_evictions, free_evictions in steps:
        keys = _request_keys(root, length, extra, capacity)
        if keys is None:
            continue
        hits = []
        for p in (stock, ours):
            ids = {i % len(p.blocks) for i in held_evictions}
            hits.append(
                serve_one(p, keys, len(keys) - 1, extra, while_held=lambda p, ids=ids: p.evict_blocks(ids))
            )
            p.evict_blocks({i % len(p.blocks) for i in free_evictions})
        assert hits[0] == hits[1]
        _assert_same_free_queue(stock, ours)


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(8, 40),
    steps=_request_steps(st.integers(0, 4)),  # pages then taken and unpinned (HiSparse)
)
def test_lru_is_stock_across_unpinned_pages(capacity, steps):
    """vLLM's ``unpin_blocks`` appends uncached pages to its one list's tail, so cached blocks freed
    later go behind them: lru behind vLLM's pool keeps each page at that place (a hashless key at the
    policy's newest end), so it makes stock's decisions: the same hits at every request, the same free
    queue block by block after every step, and each page's reuse watcher firing at the same
    allocation. Stock vLLM's pool is the reference."""
    stock, ours = make_pool(capacity, None), make_pool(capacity, "lru")
    reused: dict[int, list[int]] = {id(stock): [], id(ours): []}
    for root, length, extra, pages in steps:
        keys = _request_keys(root, length, extra, capacity)
        if keys is None:
            continue
        hits = [serve_one(p, keys, len(keys) - 1, extra) for p in (stock, ours)]
        assert hits[0] == hits[1]
        for p in (stock, ours):
            taken = p.get_new_blocks(min(pages, p.get_num_free_blocks()))
            p.unpin_blocks(taken, lambda b, p=p: reused[id(p)].append(b.block_id))
        _assert_same_free_queue(stock, ours)
        assert reused[id(stock)] == reused[id(ours)]


def test_a_connector_eviction_publishes_stock_events_in_stock_order():
    """``evict_blocks`` hands the caller's own set to stock: vLLM's loop emits a BlockRemoved event
    per evicted block in the set's iteration order, which a set rebuilt from it may not keep (the
    scheduler builds its set with ``update``). Stock vLLM's pool is the reference."""
    import random

    from vllm.distributed.kv_events import BlockRemoved

    from wakman.vllm_plugin import install

    class EventPrompt(Prompt):  # what a BlockStored event reads of a vLLM Request besides its hashes
        lora_request = cache_salt = prompt_embeds = session_id = None
        mm_features = ()

        @property
        def all_token_ids(self) -> list[int]:
            return [0] * (32 * len(self.keys))

    def pool(policy: str | None) -> BlockPool:
        p = BlockPool(38, enable_caching=True, hash_block_size=32, enable_kv_cache_events=True)
        if policy is not None:
            install(p, make_policy(policy, 37))
        for root in range(6):  # six cached prompts of six blocks, freed: 36 cached free blocks
            keys = vllm_keys(root * 100 + i for i in range(6))
            serve_one(p, EventPrompt(*Prompt.of(keys)), 5)
        p.take_events()
        return p

    rng = random.Random(5)
    for _ in range(30):
        picks = [rng.randrange(1, 38) for _ in range(rng.randrange(2, 12))]
        removed = []
        for p in (pool(None), pool("lru")):
            ids: set[int] = set()
            ids.update(i * 7 % 38 for i in picks)  # as the scheduler builds it
            p.evict_blocks(ids)
            removed.append([e.block_hashes for e in p.take_events() if isinstance(e, BlockRemoved)])
        assert removed[0] == removed[1] and removed[0]


def test_moved_hashes_follow_their_block():
    """move_block_hashes (the copy-on-write path) re-keys the destination block and keeps the hit."""
    pool = make_pool(32, "s3fifo")
    keys = vllm_keys(range(3))
    serve_one(pool, keys, 2)
    src = pool.cached_block_hash_to_block.get_one_block(keys[1])
    pool.touch([src])
    dst = pool.get_new_blocks(1)[0]
    pool.move_block_hashes(src, dst)
    queue = pool.free_block_queue
    assert queue.key_of(src) is None and queue.key_of(dst) == policy_key(keys[1])
    pool.free_blocks([src, dst])
    pool.check()
    assert serve_one(pool, keys, 3) == 3


def test_hashes_set_or_removed_on_unhooked_paths_are_caught_at_release():
    """A hash set or removed by a stock method the plugin does not hook (vLLM's Mamba checkpoint
    eviction calls _maybe_evict_cached_block on an in-use block) is reconciled when the block is freed."""
    pool = make_pool(16, "lru")
    queue = pool.free_block_queue
    a, b = pool.get_new_blocks(2)
    key_a, key_b = vllm_keys([7, 8])
    BlockPool._insert_block_hash(pool, key_a, a, None)  # unhooked: the queue has not seen it
    assert queue.key_of(a) is None
    pool.free_blocks([a])
    assert queue.key_of(a) == policy_key(key_a) and not queue.policy.is_pinned(policy_key(key_a))
    pool.cache_full_blocks(Prompt.of([key_b]), [b], 0, 1, pool.hash_block_size, 0)
    assert queue.key_of(b) == policy_key(key_b)
    pool._maybe_evict_cached_block(b)  # in use; unhooked
    pool.free_blocks([b])  # no hash: stock hands it to prepend_n, which drops the key
    assert queue.key_of(b) is None and queue.get_all_free_blocks()[0] is b
    pool.check()


@pytest.mark.parametrize("policy", POLICIES)
def test_blocks_freed_evict_first_are_handed_out_first_as_in_stock(policy):
    """vLLM 0.34's ``free_blocks(evict_first=True)`` (the simple CPU offload connector's lazy mode,
    for blocks another tier holds) puts cached blocks at the head of the free queue: they are handed
    out before every other block and stay hittable until then. Stock vLLM's pool is the reference."""
    if "evict_first" not in inspect.signature(BlockPool.free_blocks).parameters:
        pytest.skip(f"vLLM {vllm.__version__}'s free_blocks has no evict_first (0.34 added it)")
    stock, pool = make_pool(64, None), make_pool(64, policy)
    held, kept = vllm_keys(range(100, 103)), vllm_keys(range(200, 205))
    for p in (stock, pool):
        serve_one(p, kept, 5)  # cached, in the free queue's policy order
        blocks = p.get_new_blocks(3)
        p.cache_full_blocks(Prompt.of(held), blocks, 0, 3, p.hash_block_size, 0)
        p.free_blocks(blocks, evict_first=True)
    ids = [[b.block_id for b in p.free_block_queue.get_all_free_blocks()[:3]] for p in (stock, pool)]
    assert ids[0] == ids[1]
    pool.check()
    # their keys left through the policy's evict_key: nothing was evicted before, so the ghosts are
    # theirs: ARC moved all three from T1 to B1; S3-FIFO those in its small queue (the warm-up rule
    # put the later ones in M, which keeps no ghost)
    ghosts = pool.free_block_queue.policy
    if policy == "arc":
        assert ghosts.ghost_size == 3
    if policy == "s3fifo":
        in_ghost = [ghosts.in_ghost(policy_key(k)) for k in held]
        assert in_ghost[0] and sum(in_ghost) == ghosts.ghost_size
    # still cached: a request over them hits all three, and they become policy keys again at release
    assert serve_one(stock, held, 3) == serve_one(pool, held, 3) == 3
    assert [pool.free_block_queue.key_of(pool.cached_block_hash_to_block.get_one_block(k)) for k in held] == [
        policy_key(k) for k in held
    ]
    pool.check()
    # freed evict-first again, then taken: they go before the blank blocks and the policy's keys
    for p in (stock, pool):
        blocks = [p.cached_block_hash_to_block.get_one_block(k) for k in held]
        p.touch(blocks)
        p.free_blocks(blocks, evict_first=True)
        taken = p.get_new_blocks(3)
        assert {b.block_id for b in taken} == {b.block_id for b in blocks}
        assert (
            all(b.block_hash is None for b in taken)
            and p.cached_block_hash_to_block.get_one_block(held[0]) is None
        )
        p.free_blocks(taken)
    pool.check()
    assert serve_one(stock, kept, 5) == serve_one(pool, kept, 5) == 5


@pytest.mark.parametrize("policy", POLICIES)
def test_unpinned_pages_are_handed_out_after_every_cached_block_as_in_stock(policy):
    """vLLM's ``unpin_blocks`` (HiSparse: pages the GPU reads until they are reused) appends uncached
    blocks to the free queue's tail, "last-resort eviction candidates": handed out after every cached
    block that was free then, their reuse watchers firing only then. Stock vLLM's pool is the
    reference (the whole order for lru and fifo, the pages' places for every policy)."""
    stock, pool = make_pool(16, None), make_pool(16, policy)
    kept = vllm_keys(range(200, 205))
    reused: dict[int, list[int]] = {id(stock): [], id(pool): []}
    pages = {}
    for p in (stock, pool):
        serve_one(p, kept, 5)  # five cached blocks in the free queue
        pages[id(p)] = p.get_new_blocks(3)
        p.unpin_blocks(pages[id(p)], lambda b, p=p: reused[id(p)].append(b.block_id))
    free = [[b.block_id for b in p.free_block_queue.get_all_free_blocks()] for p in (stock, pool)]
    assert free[1][-3:] == free[0][-3:] == [b.block_id for b in pages[id(stock)]]
    assert sorted(free[1]) == sorted(free[0])
    if policy in ("lru", "fifo"):
        assert free[1] == free[0]
    queue = pool.free_block_queue
    renames = policy in ("lru", "fifo")  # the pages join the policy's order, hashless; else reserve
    assert queue.num_reserve_blocks == (0 if renames else 3)
    assert queue.num_free_blocks == stock.get_num_free_blocks()
    walk = queue.get_all_free_blocks()
    for i in (len(walk) - 4, len(walk) - 3, len(walk) - 1):  # the last cached block, the pages
        assert list(queue.iter_blocks_after(walk[i])) == walk[i + 1 :], i
    pool.check()
    # a page taken again (touched: a prefix-cache-style re-pin) leaves the queue, as in stock
    for p in (stock, pool):
        p.touch([pages[id(p)][0]])
        # in use again: nothing comes after it, not even the pages still in reserve (stock's walk)
        assert list(p.free_block_queue.iter_blocks_after(pages[id(p)][0])) == []
    assert pool.free_block_queue.num_reserve_blocks == (0 if renames else 2)
    pool.check()
    # every blank and cached block goes first; the pages' watchers fire as each is handed out
    for p in (stock, pool):
        taken = p.get_new_blocks(p.get_num_free_blocks() - 2)
        assert reused[id(p)] == [] and pages[id(p)][1] not in taken
        taken += p.get_new_blocks(2)
        assert reused[id(p)] == [b.block_id for b in pages[id(p)][1:]]
        p.free_blocks([*taken, pages[id(p)][0]])
    pool.check()
    assert serve_one(stock, kept, 5) == serve_one(pool, kept, 5)


@pytest.mark.parametrize("policy", [None, "lru"])
def test_popleft_of_an_empty_queue_raises_what_stock_raises(policy):
    pool = make_pool(4, policy)
    pool.get_new_blocks(4)
    with pytest.raises(ValueError, match="No free blocks"):
        pool.free_block_queue.popleft()


def test_a_reset_hands_out_the_unpinned_pages_last():
    """reset_prefix_cache (every block free) drops every hash; stock keeps its one list's order, so
    the pages released by unpin_blocks stay behind the blocks that were cached."""
    stock, pool = make_pool(12, None), make_pool(12, "lru")
    for p in (stock, pool):
        serve_one(p, vllm_keys(range(4)), 4)
        p.unpin_blocks(p.get_new_blocks(2), lambda b: None)
        assert p.reset_prefix_cache()
    assert [b.block_id for b in pool.free_block_queue.get_all_free_blocks()] == [
        b.block_id for b in stock.free_block_queue.get_all_free_blocks()
    ]
    assert pool.free_block_queue.num_reserve_blocks == 0
    pool.check()


def _stated_key(block_hash: bytes, group: int) -> int:
    """``policy_key`` as its docstring states it, written again here."""
    k = 0
    for i in range(0, len(block_hash), 8):
        k = splitmix64(k ^ int.from_bytes(block_hash[i : i + 8], "big"))
    return splitmix64(k ^ (group | len(block_hash) << 32))


@settings(max_examples=200, deadline=None)
@given(block_hash=st.binary(min_size=0, max_size=70), group=st.integers(0, 2**32 - 1))
def test_policy_key_follows_its_stated_rule(block_hash, group):
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

    assert policy_key(make_block_hash_with_group_id(block_hash, group)) == _stated_key(block_hash, group)


def test_the_queue_keys_blocks_and_misses_by_policy_key(stream):
    """The key a cached block gets (read from its hash) and the key an announced miss gets (made from
    the BlockHash and the group id, without the bytes object) are both ``policy_key`` of the block's
    hash key: a ghost is found again."""
    pool = make_pool(400, "s3fifo")
    for keys, limit, _ in stream[:40]:
        if len(keys) <= 400:
            serve_one(pool, keys, limit)
    queue = pool.free_block_queue
    cached = [b for b in pool.blocks if b.block_hash is not None]
    assert cached and all(queue.key_of(b) == policy_key(b.block_hash) for b in cached)
    assert all(queue.block_of(policy_key(b.block_hash)) is b for b in cached)


def test_policy_keys_are_the_same_in_every_process():
    """Python's hash of bytes changes with PYTHONHASHSEED; the policy keys (and so chain-lru's sampled
    duel and every tie the keys decide) must not."""
    import os
    import subprocess
    import sys

    code = (
        "from wakman.vllm_plugin.free_queue import policy_key\n"
        "print([policy_key(bytes([i]) * 32 + bytes(4)) for i in range(5)], hash(b'x' * 32))"
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        keys, python_hash = run.stdout.rsplit(" ", 1)
        outs.append((keys, python_hash))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] != outs[1][1]  # the check can fail: Python's own hash did change


def test_a_policy_serves_one_pool_at_a_time():
    """A policy already live behind a pool is refused by a second pool's install and by any switch,
    this pool's own included (one pool reported 12 free blocks of 8, and its next eviction crashed
    the process on a key of the other pool's); once its pool is gone, it may serve another."""
    import gc

    from wakman.vllm_plugin import install

    policy = make_policy("lru", 8)
    first = install(BlockPool(9, enable_caching=True, hash_block_size=16), policy)
    refused = BlockPool(9, enable_caching=True, hash_block_size=16)
    with pytest.raises(ValueError, match="already serves another pool"):
        install(refused, policy)
    # refused before any block changed: the pool keeps vLLM's own queue, and takes a new policy
    assert len(refused.free_block_queue.get_all_free_blocks()) == 8
    install(refused, make_policy("lru", 8)).check()
    # a queue whose construction fails after the claim gives the policy back
    spare, lone = BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("lru", 8)
    free = spare.free_block_queue.get_all_free_blocks()
    with pytest.raises(AttributeError):
        type(first.free_block_queue)(spare.blocks, [*free, object()], lone)
    install(BlockPool(9, enable_caching=True, hash_block_size=16), lone).check()
    serve_one(first, vllm_keys(range(4)), 4)
    first.check()
    with pytest.raises(ValueError, match="serves no pool"):
        first.free_block_queue.switch(policy)
    second = install(BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("s3fifo", 8))
    with pytest.raises(ValueError, match="serves no pool"):
        second.free_block_queue.switch(policy)
    first.free_block_queue.switch(make_policy("lru", 8))
    first.check()
    second.free_block_queue.switch(make_policy("lru", 8))
    del first
    gc.collect()
    third = install(BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("lru", 8))
    taken = second.free_block_queue.policy
    del second
    gc.collect()
    install(BlockPool(9, enable_caching=True, hash_block_size=16), taken).check()  # its pool is gone
    third.check()


@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
def test_a_stock_method_that_raises_part_way_still_reaches_the_queue(policy):
    """``evict_blocks([a cached block, an id past the pool])``: stock evicts the first block, then
    raises. The hook told the queue nothing, and the block kept its key with no hash (``check``
    failed: "has a key but no hash"); now what stock changed reaches the queue all the same."""
    pool = make_pool(8, policy)
    serve_one(pool, vllm_keys([1, 2, 3]), 0)
    cached = next(b for b in pool.blocks if b.block_hash is not None)
    with pytest.raises(Exception):  # noqa: B017  (stock's own assertion or IndexError)
        pool.evict_blocks([cached.block_id, 10_000])
    assert cached.block_hash is None
    pool.check()


def test_a_refused_queue_leaves_the_stock_pool_working():
    """The queue's constructor dropped every block's stock links before it could still refuse (a
    block listed free twice): the pool, left with its stock queue, then failed at its next
    allocation. Now the links go last, once nothing can refuse."""
    from wakman.vllm_plugin.free_queue import PolicyFreeQueue

    pool = BlockPool(9, enable_caching=True, hash_block_size=32)
    free = pool.free_block_queue.get_all_free_blocks()
    with pytest.raises(RuntimeError, match="free already"):
        PolicyFreeQueue(pool.blocks, [*free, free[0]], make_policy("lru", 8))
    assert [b.block_id for b in pool.get_new_blocks(3)] == [1, 2, 3]
    assert pool.free_block_queue.num_free_blocks == 5
