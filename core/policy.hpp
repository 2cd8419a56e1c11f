// Policy: the one event protocol every eviction policy implements (the core's function table).
//
// The host (shadow replay, cache mode, the serve-mode pool, the adaptive manager's shadows, vLLM's
// free-block queue) tells a policy, in libCacheSim's order:
//   miss(k)      a lookup missed on k; ghost bookkeeping happens here, before any eviction
//   evict()      remove and return one victim among the unpinned resident keys
//   insert(k,p)  k becomes resident (the host made room), pinned (in use) or not
//   hit(k)       a lookup found resident k, pinned or not
//   pin/unpin    k leaves / re-enters the eviction order (vLLM: ref_cnt leaves / reaches 0)
//   remove(k)    k leaves outside eviction, O(1); every other key keeps its metadata
//   evict_key(k) k (pinned or not) leaves as this policy's own eviction of it would leave it: the
//                ghost entry such an eviction keeps stays (S3-FIFO: from S into G, from M gone; ARC:
//                its directory trim, then T1 into B1, T2 into B2; chain-lru: from P into G, from M
//                gone), nothing else moves;
//                a policy without ghosts forgets k, as remove(). O(1); a key not resident: no-op.
//                (vLLM 0.34's free_blocks(evict_first=True): the host, not the policy, chose k.)
//   adopt(k)     hand-over: k arrives unpinned from another policy, oldest (first victim) first
//   rekey(k, k2) resident k is known as k2 (a key the policy does not know) from now on, in place:
//                its position, segment, counters and pin stay. True where the policy does this
//                (renames_keys(): the one-queue policies, LRU, FIFO and the infinite ceiling); false,
//                nothing changed, where it does not (k2 known, k not resident, or a policy whose keys
//                carry more than a place). O(1).
//                (vLLM's free queue: a free block that lost its hash keeps its place, as in stock.)
//   reset()      forget everything, ghosts and adaptive state included
// and two hints, from the drivers that see requests (cache mode and the shadows, the serve loop);
// a policy that does not learn from the request stream ignores them (they change nothing else):
//   on_request(keys, full, outputs, n_out, now_s)  a request arrived at now_s (seconds): its full
//                prompt block keys and its output block keys; the inserts that follow are its blocks
//   inserting_for(root)  the inserts that follow belong to the chain whose first block is root
//   in_session(session)  the on_request that follows belongs to this session (a trace's session id,
//                as a 64-bit key), where the host knows one
//   end_session(session)  the host was told that this session sends no more requests (a client's
//                close; a trace replay told each end after the fact)
// The host owns capacity: the policy orders, the host decides when to evict. The exact semantics of
// each policy are stated once, in the docstring of its Python module (src/wakman/policies/NAME.py).
//
// Invariants: size() == evictable + pinned; evict() only returns an unpinned resident key and
// throws NoEvictable when none exists; a pinned key keeps its segment and counters.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "key_map.hpp"

namespace wakman {

struct NoEvictable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A key that is not in the state the call needs (insert of a resident key, unpin of an unpinned one).
struct BadKey : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How many keys ahead the drivers announce a key (Policy::prefetch): about a memory latency's worth of
// lookups.
constexpr size_t kPrefetchAhead = 16;

// Calls visit(key) for each of keys[0:n], first to last (kDeepestFirst: last to first), having called
// announce(key) for each key kPrefetchAhead visits before visiting it (announce: a prefetch hint,
// such as Policy::prefetch, so the visits' lookups overlap instead of waiting on memory in turn).
template <bool kDeepestFirst = false, class Announce, class Visit>
inline void visit_announced(const Key* keys, size_t n, Announce&& announce, Visit&& visit) {
  auto at = [&](size_t i) { return keys[kDeepestFirst ? n - 1 - i : i]; };
  for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i) announce(at(i));
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) announce(at(i + kPrefetchAhead));
    visit(at(i));
  }
}

// What one request did to a plain cache (Policy::replay_request), in blocks.
struct RequestReplay {
  size_t prefix_hits;  // blocks of the longest cached prefix of keys[:limit], looked up before any access
  size_t accessed;     // blocks accessed: full + outputs
  size_t access_hits;  // of those, found resident
};

// A number for an error message, as printf's %g writes it (std::to_string writes 2.000000).
inline std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

class Policy {
 public:
  // Node slots are 32-bit: a policy's keys (resident, ghosts and ghost hits waiting for their
  // inserts: pending_bound) stay below 2**31; the capacity leaves room for ARC's 2C and a ghost of
  // up to C.
  static constexpr int64_t kMaxCapacity = int64_t{1} << 30;
  static constexpr int64_t kMaxKeys = int64_t{1} << 31;  // node indices 0 .. 2**31 - 1

  explicit Policy(int64_t capacity) : capacity_(capacity), bound_(capacity) {
    if (capacity < 1 || capacity > kMaxCapacity)
      throw std::invalid_argument("capacity must be 1 to " + std::to_string(kMaxCapacity) + " blocks, got " +
                                  std::to_string(capacity));
  }
  // The ghost's capacity, ratio * capacity, checked: a finite ratio >= 0 whose ghost and the cache's
  // keys fit the node slots (a NaN or infinite ratio used to become 0 or overflow); `policy` names
  // the policy in the error.
  static int64_t ghost_capacity(const char* policy, int64_t capacity, double ratio) {
    const double ghost = static_cast<double>(capacity) * ratio;
    if (!(ratio >= 0) || !std::isfinite(ratio) || ghost > static_cast<double>(kMaxKeys - capacity))
      throw std::invalid_argument(std::string(policy) + ": ghost_ratio must be finite and >= 0, with capacity * (1 + " +
                                  "ghost_ratio) at most " + std::to_string(kMaxKeys) + " keys, got " +
                                  num(ratio));
    return static_cast<int64_t>(ghost);
  }
  // The most ghost hits a policy holds while they wait for their inserts (a miss() whose insert
  // never comes, as after a dropped admission, leaves one waiting): the capacity, or fewer where the
  // node slots cannot hold them beside `held` resident and ghost keys (the oldest is dropped).
  int64_t pending_bound(int64_t held) const { return std::max<int64_t>(0, std::min(capacity_, kMaxKeys - held)); }
  virtual ~Policy() = default;

  virtual const char* name() const = 0;
  int64_t capacity() const { return capacity_; }
  // The resident size at which a plain-cache driver evicts before inserting (capacity; the
  // infinite ceiling never reaches it).
  int64_t bound() const { return bound_; }

  // The host that serves a pool from this policy (vLLM's free queue; none: nullptr). A policy serves
  // one pool at a time: claim() takes it for `host`, false if another host (or `host` itself) holds
  // it; release() gives it up, by its holder only.
  bool claim(const void* host) {
    if (host_ != nullptr || replaying()) return false;
    host_ = host;
    return true;
  }
  void release(const void* host) {
    if (host_ == host) host_ = nullptr;
  }
  bool hosted() const { return host_ != nullptr; }

  // A replay that runs without Python's GIL (bindings.cpp) owns the policy until it returns:
  // begin_replay() takes it (false if another replay holds it), end_replay() gives it back. The
  // bindings refuse to change, host or replay a policy meanwhile.
  bool begin_replay() { return !replaying_.exchange(true, std::memory_order_acquire); }
  void end_replay() { replaying_.store(false, std::memory_order_release); }
  bool replaying() const { return replaying_.load(std::memory_order_acquire); }

  virtual size_t size() const = 0;
  virtual size_t num_pinned() const = 0;
  size_t num_evictable() const { return size() - num_pinned(); }
  virtual bool contains(Key key) const = 0;
  virtual bool is_pinned(Key key) const = 0;
  // A hint from a driver that `key` comes up soon (kPrefetchAhead keys ahead): start loading its
  // index entry. Changes nothing a call can observe.
  virtual void prefetch(Key /*key*/) const {}
  // Allocates now the tables for every key the policy can hold at once (its capacity's resident
  // keys and its ghosts), so that no later call stalls on a table's growth (a serving host calls it
  // once: vLLM's free queue and offload tier; a simulation grows its tables as keys come). Ghost
  // hits left waiting for an insert that never came (pending_bound) are not reserved: they may
  // grow the tables. reset() keeps the room. Changes nothing a call can observe but memory_bytes.
  virtual void reserve() {}

  virtual void miss(Key key) = 0;
  virtual Key evict() = 0;
  virtual void insert(Key key, bool pinned) = 0;
  virtual void hit(Key key) = 0;
  virtual void pin(Key key) = 0;
  // A request takes a resident key (vLLM's touch): hit(key), then pin(key) when `pin_too` (its first
  // reference). The same as those two calls; a policy built with WAKMAN_DRIVEN finds the key once.
  virtual void hit_pin(Key key, bool pin_too) {
    hit(key);
    if (pin_too) pin(key);
  }
  virtual void unpin(Key key) = 0;
  virtual void remove(Key key) = 0;
  virtual void evict_key(Key key) = 0;
  virtual void adopt(Key key) = 0;
  virtual bool rekey(Key /*from*/, Key /*to*/) { return false; }
  // Whether rekey renames a resident key (given an unknown new one).
  virtual bool renames_keys() const { return false; }
  virtual void reset() = 0;
  virtual void on_request(const Key* /*keys*/, size_t /*full*/, const Key* /*outputs*/, size_t /*n_out*/,
                          double /*now_s*/) {}
  virtual void inserting_for(Key /*root*/) {}
  virtual void in_session(Key /*session*/) {}
  virtual void end_session(Key /*session*/) {}
  // Whether on_request changes anything: a host that must build the keys for it (vLLM's queue)
  // skips the hint for a policy that ignores it.
  virtual bool learns_from_requests() const { return false; }
  // Whether miss() changes anything (a ghost to find): a host that must build a key for each miss
  // (vLLM's queue) skips them for a policy without ghosts.
  virtual bool hears_misses() const { return true; }

  // Unpinned keys in the order evict() would take them if nothing else happened (no access, pin or
  // miss: S3-FIFO's promotions and second chances, SIEVE's visited bits, ARC's p and ghosts counted),
  // appended to `out` until it holds `limit` keys: a dry run that changes nothing; the first k victims
  // cost O(k) plus the keys evict() would pass over (S3-FIFO: up to freq_cap - 1 second chances each,
  // 2 by default; SIEVE's visited); Belady's copies and sorts its whole heap whatever the limit.
  virtual void eviction_order(std::vector<Key>& out, size_t limit) const = 0;
  void eviction_order(std::vector<Key>& out) const { eviction_order(out, SIZE_MAX); }
  // The keys after `after` (an unpinned resident key) in eviction_order, appended to `out` until it
  // holds `limit` keys, in O(those keys), where the policy can walk on from a key (one queue: LRU,
  // FIFO); false where it cannot (the caller runs eviction_order from its start).
  virtual bool eviction_order_after(Key /*after*/, std::vector<Key>& /*out*/, size_t /*limit*/) const {
    return false;
  }
  virtual void pinned_keys(std::vector<Key>& out) const = 0;
  // Bytes held by the policy's tables (index, nodes, ghosts).
  virtual size_t bytes() const = 0;

  // The shared plain-cache driver (driver.hpp), instantiated once per policy: hits of `keys`.
  virtual int64_t replay(const Key* keys, size_t n) = 0;
  virtual bool access(Key key) = 0;
  // One request through the plain cache, vLLM's way (cache mode, the adaptive manager's shadows): the
  // policy hears of it (on_request at arrival_s seconds), the hit prefix of keys[:limit] by the
  // first-miss rule is looked up, then every cacheable block is accessed deepest first (outputs from
  // the last, then keys[:full] from the last), as vLLM frees a request's blocks, so the chain's root
  // ends most recent. limit <= full.
  virtual RequestReplay replay_request(const Key* keys, size_t limit, size_t full, const Key* outputs,
                                       size_t num_outputs, double arrival_s) = 0;

 protected:
  [[noreturn]] void no_evictable() const {
    throw NoEvictable(std::string(name()) + ": no unpinned key to evict (" + std::to_string(num_pinned()) +
                      " pinned)");
  }
  [[noreturn]] static void bad_key(const char* what, Key key) {
    throw BadKey(std::string(what) + ": key " + std::to_string(key));
  }

  int64_t capacity_;
  int64_t bound_;

 private:
  const void* host_ = nullptr;             // written by claim() and release() only
  std::atomic<bool> replaying_{false};  // written by begin_replay() and end_replay() only
};

// `n` victims at once (the pools' batched eviction): all or nothing.
inline void evict_many(Policy& p, size_t n, std::vector<Key>& out) {
  if (n > p.num_evictable())
    throw NoEvictable(std::string(p.name()) + ": " + std::to_string(n) + " victims asked, " +
                      std::to_string(p.num_evictable()) + " unpinned");
  for (size_t i = 0; i < n; ++i) out.push_back(p.evict());
}

// Take-over (wakman.policies.take_over): reset `dst`, then give it the `n_order` unpinned keys at
// `order` through adopt(), first victim first, and the `n_pinned` keys at `pinned` inserted pinned in
// increasing key order (sorted here: pinned keys have no order; a fixed one keeps the caller's layout
// out of dst's state, S3-FIFO's warm-up rule placing them by insertion order). The keys must be
// distinct. O(keys + pinned keys * log pinned keys).
inline void take_over(Policy& dst, const Key* order, size_t n_order, std::vector<Key> pinned) {
  std::sort(pinned.begin(), pinned.end());
  dst.reset();
  constexpr size_t kAhead = 8;  // dst's index entries start loading this many keys ahead
  for (size_t i = 0; i < n_order; ++i) {
    if (i + kAhead < n_order) dst.prefetch(order[i + kAhead]);
    dst.adopt(order[i]);
  }
  for (Key k : pinned) dst.insert(k, true);
}

// Hand-over (wakman.policies.handover): take_over of `src`'s cached blocks, the unpinned ones in src's
// eviction order, the pinned ones as pinned. src's ghosts and counters stay behind; src is unchanged.
inline void handover(const Policy& src, Policy& dst) {
  std::vector<Key> order, pinned;
  src.eviction_order(order);
  src.pinned_keys(pinned);
  take_over(dst, order.data(), order.size(), std::move(pinned));
}

}  // namespace wakman
