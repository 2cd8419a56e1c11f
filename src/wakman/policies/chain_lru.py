"""chain-lru: LRU that evicts rarely extended chains' new blocks first; filters as S3-FIFO when a duel says.

It evicts first the new blocks of chains whose requests are rarely extended, and filters every new
block (as S3-FIFO does) while a duel of two sampled miniature caches says that keeps more prefixes.

wakman's own policy: it learns per chain root, from the hash chains of the request stream, whether a
root's requests get a next turn, and from two miniature caches fed a sample of the same stream
whether recency or filtering keeps more prefixes; no request type, no prompt content.

A chain's root is the key of its first block (a system prompt or a fixed prompt: the application
that sent it). A request's *ends* are its last full prompt block and its last output block; an end
is *extended* when a later request's prompt holds it before its own last full block (a next turn,
an agent's next step). Single-turn traffic (a fixed prompt, then a payload used once) is never
extended; multi-turn and agentic sessions mostly are.

Semantics (C = capacity in blocks; times in seconds, from the request stream):
- The request stream, through the hint ``on_request(keys, full, outputs, now_s)`` (every request at
  its arrival, whether it hits or not, so the statistics are not censored by the cache's own
  evictions), in this order: (1) every open end registered at or before ``now_s - window_s`` expires,
  not extended, for its root; (2) every open end among ``keys[:full - 1]`` closes, extended, for its
  root; (3) the request's ends open, for its root (an end that is already open is registered again:
  its window restarts). Per root, ``rate = (extended + 0.5) / (resolved + 1)``; a root's two counts
  halve when ``resolved`` reaches 1024; after 4,096 roots, new roots share one entry. The request is
  the *insert context*: its root is *rarely extended* when ``rate < threshold``.
  ``inserting_for(root)`` sets the context for the inserts that follow (the serve loop, when a
  request is admitted and when one of its output blocks is cached), read as ``on_request`` reads
  it (a root heard after the 4,096th reads the shared entry); a root not heard while there was
  room is not rarely extended.
- Two LRU queues: probation P and main M, and a ghost G (FIFO of ``int(ghost_ratio * C)`` keys).
- insert: into P when the context's root is rarely extended, else into M; a key that is in G (or
  left G by a ``miss``) goes to M instead and leaves G.
- miss of a key in G: it leaves G at once, before the evictions that make room for it (as S3-FIFO),
  and waits (at most C such keys, fewer only where C + the ghost + C would pass the core's 2**31
  keys) for its insert.
- Each block remembers whether it was inserted for a rarely extended root (*rare*) and whether it
  has been *hit* since its insert (a key inserted back from G, or from the keys waiting after
  leaving G, counts as hit; an adopted one does not), and has a counter, 0 at insert.
- hit: a rare block already in M counts the hit (at most 3); then the key moves to M's newest end
  (from P or M); on a pinned key only its segment becomes M.
- evict: P's oldest unpinned key, whose key enters G (G's oldest leaves when full). When P has none,
  M's oldest: if its counter is above 0 it is decremented and the block goes to M's newest end (a
  second chance, as S3-FIFO's main queue; only rare blocks ever count), and the scan goes on;
  otherwise it is evicted (no ghost).
- That is the *recency* mode. In the *filter* mode three rules change: insert puts every new block in
  P (a key from G still goes to M); a hit in M counts for every block, rare or not; evict takes P's
  oldest unpinned key only while P's blocks, its pinned ones included (as S3-FIFO counts its small
  queue), are at least ``small_ratio * C``, or M has no unpinned key; else M's oldest as above.
  A switch to the recency mode moves no block. A switch to the filter mode starts the *switch
  walk*, which moves M's unpinned blocks that have not been hit since their insert to P's newest
  end, M's oldest first (P then evicts its own blocks first, then those in M's order), as if the
  filter mode had inserted them: the recency mode put every new block in M, and left there they
  would hold M while the filter mode evicts every new block from P's ``small_ratio * C``. The walk
  examines ``switch_walk`` of M's blocks at the end of the switching ``on_request`` and as many at
  the end of each ``on_request`` after, from M's oldest block towards its newest, until it has
  examined as many as M held at the switch or passed M's newest block; a block that leaves M while
  the walk points at it (hit, pinned, evicted, removed, demoted) passes the point to the next newer
  block of M; a switch back to the recency mode ends it. Where M holds at most ``switch_walk``
  blocks (every cache of at most 65,536 blocks by default) the walk is one pass inside the
  switching request; a larger M is walked over several requests, so that no request waits on a
  pass over a million-block cache (in vLLM: inside ``add_request``).

Modes (``mode=``): ``"recency"`` and ``"filter"`` run one mode; ``"adaptive"`` (the default) starts in
recency and lets a duel choose. The duel runs in ``on_request``, after the statistics: it samples
the blocks whose ``splitmix64(key)`` is divisible by ``S`` (a power of two: the largest at most
``C / 2048``, at least 2, at most 64) and keeps two miniatures, plain chain-lru caches of ``C // S``
blocks with no duel, one per mode. The request's sampled full prompt blocks and sampled outputs go
through each miniature as cache mode takes a request, in the request's insert context: the
first-miss rule over the sampled prompt blocks (in prefix order) counts the miniature's prefix hits,
then the sampled outputs and prompt blocks are accessed deepest first. The sampled prompt blocks
and both hit counts are summed, and all three halve when the blocks reach ``8 * (C // S)``. When
the other mode's miniature leads the running mode's by more than ``0.01`` of the summed blocks, the
cache switches mode, except under the floor guard: the live cache's own prefix hits on the request's
sampled full prompt blocks (the first-miss rule, before the request's accesses; pinned blocks are
resident) are summed beside the recency miniature's and the sampled blocks, all three halving when
those blocks reach ``64 * (C // S)``; while the live cache's sum trails the recency miniature's by
more than ``0.02`` of the blocks, the cache runs the recency mode (switching back to it from the
filter mode), whatever the miniatures' lead. A miniature has no pinned blocks (the cache's pinned
blocks are resident and hit too), so it models the whole cache at ``1 / S`` scale (spatial
sampling, as SHARDS and miniature simulations do); the first-miss rule over the sampled blocks keeps
its counts from crediting blocks whose prefix is gone, which filtering leaves behind. The guard sees
what the miniatures cannot: in serve mode the cache's blocks stay pinned while their requests run,
and a switch leaves the cache holding the other mode's blocks. (In vLLM's CPU offload tier the hint
comes at a request's finish, when its chunks are resident, so the live cache never trails there and
the guard never holds.)

- pinning: a pinned key leaves its queue and keeps its segment; ``unpin`` puts it at the newest end
  of its segment. ``adopt`` puts inherited keys in M, oldest first; ``remove`` takes a key out
  without a ghost entry; ``evict_key`` (the host's eviction of a given key) puts a key from P into
  G as P's victims go and drops one from M; ``reset`` forgets the statistics too.

Session mode (``sessions=True``, off by default), for hosts that know each request's session id (a
trace's ``session_id``: kv-cache-tester conversations and sub-agents, AIPerf sessions; sent by
``replay_request`` as ``in_session(key)`` before ``on_request``): per session (at most 4,096
followed; a new session past that takes the place of the one heard from longest ago, forgotten as if
it had ended but with nothing demoted, so sessions whose ends never come cannot stop session mode
for good) chain-lru keeps its previous request's chain (full prompt blocks, then outputs). When the
session's next request shares only a prefix of it (a compacted or edited context, a restart; also a
side request, such as a title prompt, sent under the same id), the rest is the session's abandoned
branch: each of its resident, unpinned blocks that are the session's *own* (below; a sub-agent's
session extending them makes them shared) moves to P's oldest end, shallowest first, so the deepest
is evicted first and none before a block under it (a later hit still moves it to M). A session's
end, where the host is told of it (``end_session(key)``: a client that closes its sessions;
``simulate(..., session_ends_after_s=D)`` replays a trace telling each end ``D`` seconds after the
session's last-arriving request is done (serve mode: when it finishes or is refused as larger than
the pool), a what-if from the trace's hindsight): its *own* blocks in its last request move to P's
oldest end the same way (in the filter mode P goes first only while it holds ``small_ratio * C``
blocks), and the session is no longer followed (an unknown session's end changes nothing). A block
is a followed session's own when that session's request (full prompt blocks and outputs, at
``on_request``) was the first to hold it and it was not cached then (the session brought it), and no
other followed session's request has held it since (a shared system prompt or a popular fixed prompt
never is). Before a followed session's request is counted, if more than ``4 * C`` blocks have an
owner entry, the entries of blocks no longer cached go (a block evicted and brought again later has
a new owner). Memory, in session mode only: 8 bytes per block of each followed session's last
request, and at most ``4 * C`` owner entries plus one request's blocks, in a table at most a quarter
full up to 2^21 entries, half full beyond (16-byte slots: 64-128 bytes an entry, 32-64 past 2^21);
measured, with each session's end told (as ``reproduce`` and ``advise`` run it), about 350 bytes per
cache block on mix04 at 3,000 and 12,000 blocks, where without session mode chain-lru holds 505 and
366; told no ends, sessions stay followed and their last requests dominate: about 1,150 and 550
bytes per cache block there. Cache mode, ``replay_request``'s callers and both serve loops give the
session hints where the trace has session ids (the step loop, as vLLM's plugin, tells no output
keys, so an end there moves prompt blocks only); so does vLLM's scheduler with ``WAKMAN_SESSIONS=1``
(``Request.session_id``; an end when the request its client marked ``session_end`` is done:
``vllm_plugin/sessions.py``); the offload tier does not (vLLM gives it no session ids).

Without the hints (``replay``, ``access``, a driver that sees no requests) no block is rare, the
duel never runs, every insert goes to M and chain-lru (in its default adaptive mode) is exactly LRU;
in filter mode every insert still goes to P (a segmented LRU with a ghost, no longer LRU); in the
recency mode the same
holds for traffic whose every root is extended (agentic and chat sessions). Within a request the
blocks are inserted deepest first (as vLLM frees them), so P and M evict a chain's tail before its
prefix, and no block outlives its parent in P longer than in LRU.

Where the hints come from: cache mode, the adaptive manager's shadows and the serve loop (outputs
are the trace's output keys); vLLM's GPU pool (``add_request``: the prompt's full blocks, no
outputs, since vLLM does not know them yet; ``allocate_slots``: ``inserting_for`` the request's
first block); vLLM's CPU offload tier (a request's chunks when it finishes, and its root before
each store; docs/vllm.md).

Parameters: ``window_s=120`` (seconds an end waits to be extended), ``threshold=0.2``,
``ghost_ratio=1.0``, ``sessions=False``, ``mode="adaptive"``, ``small_ratio=0.1`` (P's share of C in
the filter mode, S3-FIFO's small queue), ``switch_walk=65536`` (M's blocks the switch walk examines
a request).

Memory: per resident block one node (24 bytes) and its index entries (16 bytes each; the table at
most a quarter full up to 2^21 entries, 64-128 bytes a key, at most half full beyond, 32-64
bytes), the same per ghost key (at most ``ghost_ratio * C``); per open end 24 bytes
and its index entry (about two ends per request that arrived in the last ``window_s``); 16 bytes per
root (at most 4,097). The adaptive mode's two miniatures hold ``C // S`` blocks and ghosts each:
``2 / S`` of the cache's own per-block memory on top of it (as much again for ``C < 8192``, where
``S = 2``; 1/32 at ``S = 64``).
"""

from __future__ import annotations

from wakman import _core


class ChainLRU(_core.ChainLRU):
    name = "chain-lru"
