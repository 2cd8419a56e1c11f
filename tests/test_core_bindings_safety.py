"""The compiled core's bindings against callers that misuse them or run Python code mid-call: each
case used to read or write freed or out-of-range memory (a crash or silent garbage; found under
AddressSanitizer), and must now give the right answer or a Python exception with the pool, queue
or policy unchanged. No vLLM needed: the blocks are stand-ins with vLLM's ``KVCacheBlock`` slots."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from wakman import _core


class Block:
    """vLLM 0.32's ``KVCacheBlock`` as the free queue reads it (slots, ``block_hash`` a property)."""

    __slots__ = ("_block_hash", "block_id", "is_null", "next_free_block", "prev_free_block", "ref_cnt")

    def __init__(self, i: int) -> None:
        self.block_id, self.ref_cnt, self._block_hash, self.is_null = i, 0, None, False
        self.prev_free_block = self.next_free_block = None

    @property
    def block_hash(self):
        return self._block_hash


def _queue(n: int, policy=_core.LRU):
    blocks = [Block(i) for i in range(n)]
    return blocks, _core.FreeBlockQueue(blocks, blocks, policy(n))


def test_popleft_returns_the_head_block_every_time():
    """``popleft`` gave back an item of a list freed as it returned (a crash on the first call)."""
    blocks, queue = _queue(64)
    got = []
    for _ in range(64):
        got.append(queue.popleft())
        _ = [object() for _ in range(3)]  # allocations that would reuse a freed list's memory
    assert got == blocks  # blank blocks head first, in the order given
    with pytest.raises(ValueError, match="No free blocks"):
        queue.popleft()


@pytest.mark.parametrize("policy", [_core.LRU, _core.FIFO, _core.S3FIFO, _core.Sieve, _core.ARC])
def test_a_block_already_free_is_not_freed_twice(policy):
    """Appending a free block raised under S3-FIFO but was taken under LRU and FIFO (a hashless page
    key beside its blank entry): one block then handed out twice, ``num_free`` 5 of 4 blocks."""
    blocks, queue = _queue(4, policy)
    with pytest.raises(RuntimeError, match="block 0 is free already"):
        queue.append(blocks[0])
    assert queue.num_free_blocks == 4
    assert sorted(b.block_id for b in queue.popleft_n(4)) == [0, 1, 2, 3]


def test_a_block_id_past_32_bits_is_no_block():
    """``block_id`` 2**32 + 1 was narrowed to block 1, which ``remove`` then took out of the queue."""
    _, queue = _queue(4)
    alias = Block(2**32 + 1)
    with pytest.raises(IndexError, match="no block 4294967297"):
        queue.remove(alias)
    assert queue.num_free_blocks == 4


def test_the_null_block_is_refused_as_free():
    blocks = [Block(i) for i in range(5)]
    blocks[0].is_null = True
    with pytest.raises(ValueError, match="null block is never free"):
        _core.FreeBlockQueue(blocks, blocks, _core.LRU(4))


HOSTED_MUTATORS = [
    ("insert", (12345, False)),
    ("insert_pinned", (12345,)),
    ("access", (12345,)),
    ("replay", ([12345],)),
    ("hit", (0,)),
    ("pin", (0,)),
    ("hit_pin", (0,)),
    ("unpin", (0,)),
    ("hit_pin_many", ([0],)),
    ("unpin_many", ([0],)),
    ("evict", ()),
    ("evict_many", (1,)),
    ("remove", (0,)),
    ("discard", (0,)),
    ("evict_key", (0,)),
    ("adopt", ([12345],)),
    ("rekey", (0, 1)),
    ("reset", ()),
    ("miss", (12345,)),
    ("miss_many", ([12345],)),
]


@pytest.mark.parametrize("policy", [_core.LRU, _core.S3FIFO, _core.ARC, _core.ChainLRU])
@pytest.mark.parametrize(("name", "args"), HOSTED_MUTATORS)
def test_a_policy_that_serves_a_queue_changes_through_the_queue_only(policy, name, args):
    """A key put in the live policy behind the queue's back stands for no block (``clear_cache`` and
    ``get_all_free_blocks`` then read index -1); one dropped behind it leaves a free block the
    queue cannot hand out. Python's mutators refuse a hosted policy before anything changes; once a
    switch releases it, it is a plain policy again."""
    blocks, queue = _queue(4, policy)
    live = queue.policy
    queue.popleft_n(2)  # blocks 0, 1 in use; the queue's state: 2 free, 2 blank
    with pytest.raises(ValueError, match="serves a vLLM free queue"):
        getattr(live, name)(*args)
    with pytest.raises(ValueError, match="serves a vLLM free queue"):
        _core.handover(_core.LRU(4), live)
    with pytest.raises(ValueError, match="serves a vLLM free queue"):
        _core.replay_request(live, [12345, 12346], 1, 2, [], 0.0)
    with pytest.raises(ValueError, match="serves a vLLM free queue"):
        _core.BlockPool(4, live)  # the simulator's pool would change it too
    with pytest.raises(ValueError, match="serves a vLLM free queue"):
        _core.BlockPool(4, _core.LRU(4)).replace_policy(live)
    assert 12345 not in live and queue.num_free_blocks == 2
    live.on_request([7, 8], 2, [], 0.0)  # hints stay open
    queue.append_n(blocks[:2])
    assert sorted(b.block_id for b in queue.get_all_free_blocks()) == [0, 1, 2, 3]
    queue.switch(_core.S3FIFO(4))
    assert queue.policy is not live
    live.insert(12345, False)  # released by the switch: a plain policy
    assert 12345 in live


def test_a_list_changed_by_a_block_attribute_read_is_walked_safely():
    """A block type without slots is read through getattr, so its ``block_hash`` property runs:
    one that changes the list being read freed the blocks ``sync`` was still to read (a crash)."""
    _, queue = _queue(64)
    taken = queue.popleft_n(64)
    for block in taken:
        block.ref_cnt = 1
    victims = list(taken)
    calls = []

    class Clearing:  # no slots: the queue reads its attributes with getattr
        def __init__(self, i: int) -> None:
            self.block_id, self.ref_cnt = i, 1

        @property
        def block_hash(self):
            calls.append(1)
            victims.clear()
            _ = [Block(1000 + j) for j in range(2000)]  # reuse the freed memory
            return None

    victims[0] = Clearing(0)
    queue.sync(victims)  # walks what is left of the list (nothing), never a freed block
    assert calls == [1] and queue.num_free_blocks == 0


def test_keys_whose_index_changes_their_list_are_read_safely():
    """A key whose ``__index__`` clears its list freed the items still to be read (any binding that
    takes keys); a key whose ``__index__`` calls the pool again overwrote the outer call's keys
    (10 for 2)."""
    keys = []

    class Clearing:
        def __index__(self):
            keys.clear()
            return 1

    keys.extend([Clearing()] + [Clearing() for _ in range(2000)])
    policy = _core.LRU(16)
    policy.replay(keys)  # read through the iterator, which holds each key it converts
    pool = _core.BlockPool(4, _core.LRU(4))
    pool.allocate(2)
    pool.release([pool.cache(1, None), pool.cache(2, None)])

    class Reentrant:
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self):
            pool.evictable_among(list(range(5, 15)))
            return self.value

    assert pool.evictable_among([Reentrant(1), Reentrant(2)]) == 2


def test_the_simulator_pool_refuses_counts_that_would_break_it():
    """Each of these left the pool's counts broken (a negative anonymous count, a negative
    reference count) or read past its run table; now each is refused and ``check()`` holds."""
    pool = _core.BlockPool(4, _core.LRU(4))
    with pytest.raises(ValueError):
        pool.allocate(-5)
    with pytest.raises(KeyError, match="anonymous"):
        pool.release([None])
    pool.check()
    pool.allocate(1)
    key = pool.cache(7, None)
    with pytest.raises(KeyError, match="2 times, held 1"):
        pool.release([key, key])
    pool.check()
    assert pool.admit(0, [], 0, 2**64 - 1, 0) == -1  # does not fit (its size was read as -1)
    pool.check()
    with pytest.raises(IndexError, match="no run"):
        pool.held(2**64 - 1)
    with pytest.raises(ValueError, match="2\\*\\*63"):
        _core.request_block_keys([1, 2, 3, 4], 4, [], 0, 2**63 - 1, 12)


def test_a_failed_table_growth_leaves_the_policy_usable():
    """A ``bad_alloc`` as a policy's index grew left an empty table with the old mask: the next
    lookup read outside it. Run in a process whose address space is capped, so the growth fails."""
    code = (
        "import resource\n"
        "from wakman import _core\n"
        "policy = _core.ARC(2**30)\n"
        "cap = 2 * 2**30 + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 * 4\n"
        "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
        "try:\n"
        "    policy.reserve()\n"
        "    print('reserved')\n"
        "except MemoryError:\n"
        "    print('refused')\n"
        "print(len(policy), policy.access(1), policy.access(1))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["refused", "0", "False", "True"]


def test_hash_inputs_of_the_wrong_type_are_refused_not_converted():
    """float or int64 tokens and int64 ids were converted silently ([1.9, 2.7] hashed as [1, 2])."""
    with pytest.raises(TypeError):
        _core.chain_blake2b64(b"\0" * 8, np.array([1.9, 2.7]), 1)
    with pytest.raises(TypeError):
        _core.chain_ids(np.array([1 + 2**32, 2], dtype=np.int64))
    with pytest.raises(TypeError):
        _core.splitmix64(np.array([1.0]))


@pytest.mark.parametrize("call", ["replay", "replay_request"])
def test_a_shadow_replay_lets_other_threads_run(call):
    """vLLM's plugin replays shadows on a thread beside the scheduler's. The core held the GIL for
    the whole replay, so a scheduler step that gave the GIL up (waiting on the GPU) could not get
    it back until the replay's call returned. Here the main thread counts while a long replay runs
    on another: it got no turn before the fix."""
    import threading

    keys = np.arange(3_000_000, dtype=np.uint64) % np.uint64(400_000)
    shadow = _core.LRU(200_000)
    counted = {}
    count = [0]

    def replay() -> None:
        before = count[0]  # this thread holds the GIL from here into the call
        if call == "replay":
            shadow.replay(keys)
        else:
            _core.replay_request(shadow, keys, 0, len(keys), [], 0.0)
        counted["during"] = count[0] - before  # read as the call returns, before this thread lets go

    # no forced switch between threads: a thread runs until it lets go of the GIL (a sleep, or a
    # call that releases it), so nothing but the replay's own release lets this thread count in it
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        worker = threading.Thread(target=replay)
        worker.start()
        while worker.is_alive():
            count[0] += 1
            time.sleep(0)  # lets the worker in (and back, once its replay returns)
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert counted["during"] > 0


def test_a_policy_a_replay_holds_is_no_other_threads_to_change():
    """A replay runs without the GIL: a second thread's replay of the same policy ran its loop at
    the same time (an insert of a resident key, a broken eviction order). While one runs, the
    policy's mutators, ``reserve`` and a second replay are refused."""
    import threading

    keys = np.arange(3_000_000, dtype=np.uint64) % np.uint64(400_000)
    shadow = _core.LRU(200_000)
    refused: list[str] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)  # the main thread runs only once the worker lets go of the GIL
    try:
        worker = threading.Thread(target=shadow.replay, args=(keys,))
        worker.start()  # it holds the GIL until its replay lets go: the main thread runs inside it
        for call in (
            lambda: shadow.replay(keys[:10]),
            lambda: _core.replay_request(shadow, [1, 2], 1, 2, [], 0.0),
            lambda: shadow.insert(7, False),
            lambda: shadow.evict(),
            lambda: shadow.reserve(),  # rehashed the index under the replay (it was let through)
        ):
            try:
                call()
            except (RuntimeError, ValueError) as exc:
                refused.append(str(exc))
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(refused) == 5, refused
    assert all("running" in message for message in refused)
    assert len(shadow) == 200_000 and len(set(shadow.eviction_order())) == 200_000
    assert shadow.replay(keys[:10]) >= 0  # given back once the replay returned
