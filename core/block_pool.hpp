// BlockPool: the serve-mode simulator's copy of vLLM 0.32's block pool, counting blocks instead of
// naming them, over any Policy. The semantics and invariants are stated once, in the docstring of
// src/wakman/simulation/pool.py; this is their only implementation.
//
// Per cached block (a copy) the pool keeps a slot: its trace key, its policy key (the trace key for
// the copy that holds it, copy_key(key, n) for vLLM's further copies), its parent key (the previous
// block of its chain, for `stranded`) and `refs` (running requests holding it; the policy key is
// pinned iff refs > 0). The copies of one trace key form a chain in caching order; `index_` finds
// the first (the one vLLM's lookup returns and touches), `dup_` the remixed ones by policy key.
// Slots live in arrays that grow to at most `capacity` entries as copies are cached, and are reused
// through a free stack, so steady state allocates nothing per block. A request's held blocks (`Held`)
// are slots in prefix order, -1 for an anonymous (uncached) block; a held slot is referenced, hence
// pinned, hence never evicted, so it stays valid until release.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "key_map.hpp"
#include "policy.hpp"
#include "prefix.hpp"

namespace wakman {

// No free block (blank or evictable) is left for an allocation.
struct PoolExhausted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// check() found a broken invariant.
struct PoolBroken : std::logic_error {
  using std::logic_error::logic_error;
};

class BlockPool {
 public:
  using Held = std::vector<int32_t>;
  static constexpr int32_t kAnonymous = -1;

  BlockPool(int64_t capacity, Policy& policy)
      : capacity_(capacity),
        blank_(capacity),
        policy_(&policy) {
    if (capacity < 1) throw std::invalid_argument("capacity must be >= 1 block, got " + std::to_string(capacity));
    if (policy.size() != 0) throw std::invalid_argument("block pool: the policy must start empty (every block blank)");
  }

  // ------------------------------------------------------------------ queries (blocks)
  int64_t capacity() const { return capacity_; }
  int64_t blank() const { return blank_; }
  int64_t uncached_in_use() const { return uncached_in_use_; }
  int64_t evictions() const { return evictions_; }
  int64_t free() const { return blank_ + static_cast<int64_t>(policy_->num_evictable()); }
  Policy& policy() const { return *policy_; }
  bool cached(Key key) const { return index_.find(key) >= 0; }
  bool contains(Key key) const { return cached(key); }  // for cached_prefix
  void prefetch(Key key) const { index_.prefetch(key); }  // for cached_prefix
  // Running requests holding `key`'s first copy (0 when it is not cached).
  int32_t refs(Key key) const {
    int32_t s = index_.find(key);
    return s < 0 ? 0 : refs_[s];
  }
  // The slot of a cached key's first copy, or -1; the slot holding a policy key, or -1; and the
  // trace and policy keys of a slot in use.
  int32_t slot(Key key) const { return index_.find(key); }
  int32_t slot_of_policy_key(Key pkey) const {
    if (dup_.size() > 0) {
      int32_t d = dup_.find(pkey);
      if (d >= 0) return d;
    }
    for (int32_t c = index_.find(pkey); c >= 0; c = next_copy_[c])
      if (pkey_[c] == pkey) return c;
    return -1;
  }
  Key key_of(int32_t slot) const { return key_[slot]; }
  Key policy_key_of(int32_t slot) const { return pkey_[slot]; }
  int32_t refs_of(int32_t slot) const { return refs_[slot]; }
  // Copies of cached blocks beyond the first of their key (vLLM's duplicates).
  int64_t duplicates() const {
    return static_cast<int64_t>(key_.size() - free_slots_.size() - index_.size());
  }

  // Blocks of the longest cached prefix of keys[:limit]: the project's one first-miss rule, over the
  // pool's copies (a key whose only copy has a remixed policy key still hits, as in vLLM).
  size_t longest_hit(const Key* keys, size_t limit) const { return cached_prefix(*this, keys, limit); }

  // longest_hit, remembering the hit blocks' slots for the admission that follows (its count of
  // evictable hits and its touch find no key again). They stay valid until the pool next changes.
  size_t look_up(const Key* keys, size_t limit) {
    looked_up_.clear();
    return cached_prefix(SlotRecorder{index_, looked_up_}, keys, limit);
  }

  // How many of these keys no request holds (for cached keys: admitting them uses up that many
  // free blocks).
  size_t evictable_among(const Key* keys, size_t n) const {
    size_t free_ones = 0;
    for (size_t i = 0; i < n; ++i) {
      int32_t s = index_.find(keys[i]);
      free_ones += s < 0 || refs_[s] == 0;
    }
    return free_ones;
  }
  // evictable_among the blocks of the last look_up.
  size_t evictable_looked_up() const {
    size_t free_ones = 0;
    for (int32_t s : looked_up_) free_ones += refs_[s] == 0;
    return free_ones;
  }

  // ------------------------------------------------------------------ life cycle
  // Hits (vLLM touch): each cached key is a policy hit, then pinned by one more reference; the
  // slots are appended to `held` when given.
  void touch(const Key* keys, size_t n, Held* held = nullptr) {
    for (size_t i = 0; i < n; ++i) touch_slot(slot_of(keys[i]), held);
  }

  // Take n free blocks: blank ones first, then the policy's victims (evicted now). They become
  // anonymous blocks in use.
  void allocate(int64_t n) {
    if (n < 0) throw std::invalid_argument("block pool: allocate " + std::to_string(n) + " blocks");
    if (n > free())
      throw PoolExhausted("need " + std::to_string(n) + " blocks, " + std::to_string(free()) + " free");
    int64_t from_blank = std::min(n, blank_);
    blank_ -= from_blank;
    for (int64_t i = from_blank; i < n; ++i) {
      free_slots_.push_back(take_copy(policy_->evict()));
      ++evictions_;
    }
    uncached_in_use_ += n;
  }

  // A held anonymous block became full with `key`: it becomes a cached copy of the key, pinned by its
  // request, and its slot is returned. vLLM does not deduplicate: when the key is cached already (a
  // stranded block recomputed after an earlier miss, a block another request computed meanwhile),
  // the block is a second copy. Its policy key is the first of key, copy_key(key, 1), ... that no copy
  // holds; lookups keep finding the first copy, and the next once the first is evicted.
  int32_t cache(Key key, Key parent, bool has_parent) {
    if (uncached_in_use_ < 1) throw PoolBroken("block pool: cache() needs a held anonymous block (allocate first)");
    const int32_t first = index_.find(key);
    const Key pkey = first < 0 ? key : free_copy_key(key, [this](Key c) { return holds_policy_key(c); });
    if (free_slots_.empty()) add_slot();  // allocates before the policy hears of the key
    policy_->insert(pkey, true);
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    key_[s] = key;
    pkey_[s] = pkey;
    next_copy_[s] = kNoCopy;
    parent_[s] = parent;
    has_parent_[s] = has_parent;
    if (first < 0) index_.insert(key, s);
    else {
      int32_t last = first;
      while (next_copy_[last] >= 0) last = next_copy_[last];
      next_copy_[last] = s;
    }
    if (pkey != key) dup_.insert(pkey, s);
    --uncached_in_use_;
    refs_[s] = 1;
    ++referenced_;
    return s;
  }

  // Whether some copy holds `pkey` as its policy key (the plugin's queue: a block holds that key).
  bool holds_policy_key(Key pkey) const { return slot_of_policy_key(pkey) >= 0; }

  // cache() for keys[from:to] of one chain (the parent of keys[j] is keys[j - 1]), appended to held.
  void cache_run(const Key* keys, size_t from, size_t to, Held& held) {
    for (size_t j = from; j < to; ++j) held.push_back(cache(keys[j], j ? keys[j - 1] : 0, j > 0));
  }

  // A request frees its blocks, deepest first (vLLM frees reversed(blocks)); a key whose last
  // reference goes is unpinned, so it re-enters the policy's order.
  void release(const int32_t* held, size_t n) {
    for (size_t i = n; i-- > 0;) {
      int32_t s = held[i];
      if (s < 0) {
        --uncached_in_use_;
        ++blank_;
      } else if (--refs_[s] == 0) {
        --referenced_;
        policy_->unpin(pkey_[s]);
      }
    }
  }

  // One admission (vLLM: lookup, touch, allocate, cache the full blocks) of a request whose prompt
  // has `total` blocks, the first `full` with keys, at most `max_hit` of which may hit. Returns the
  // hit blocks, or -1 (nothing done) when the request does not fit in the free blocks. Before
  // allocating, each full prompt key after the hit prefix that is not cached is a policy miss, so
  // a ghost hit is seen before any eviction (libCacheSim's order). `held` receives the blocks.
  int64_t admit(const Key* keys, size_t max_hit, size_t total, size_t full, Held& held) {
    const int64_t free_now = free();
    if (max_hit > total) throw std::invalid_argument("block pool: a hit longer than the prompt");
    if (total - max_hit > static_cast<size_t>(free_now)) return -1;  // even a full hit would not fit
    size_t hits = look_up(keys, max_hit);
    int64_t fresh = static_cast<int64_t>(total - hits);
    if (fresh + static_cast<int64_t>(evictable_looked_up()) > free_now) return -1;
    miss_uncached(keys, hits, full);
    held.clear();
    touch_looked_up(&held);
    allocate(fresh);
    cache_run(keys, hits, full, held);
    held.resize(total, kAnonymous);
    return static_cast<int64_t>(hits);
  }

  // ------------------------------------------------------------------ per run (serve mode)
  // The pool keeps each run's held blocks (run = request number), so a request is one call per
  // admission, per decode block and per release; a run's storage is reused across its admissions.
  void reserve_runs(size_t n) {
    if (n > runs_.size()) runs_.resize(n);
  }
  static constexpr size_t kMaxRuns = size_t{1} << 31;  // run numbers are request indexes
  Held& held(size_t run) {
    if (run >= kMaxRuns) throw std::out_of_range("block pool: no run " + std::to_string(run));
    reserve_runs(run + 1);
    return runs_[run];
  }
  int64_t admit_run(size_t run, const Key* keys, size_t max_hit, size_t total, size_t full) {
    return admit(keys, max_hit, total, full, held(run));
  }
  // The run's last block filled up with `key`: cache it (a copy, see cache()) if it is anonymous.
  void fill_last(size_t run, Key key, Key parent, bool has_parent) {
    Held& h = held(run);
    if (!h.empty() && h.back() == kAnonymous) h.back() = cache(key, parent, has_parent);
  }
  // One more (anonymous) block for the run; returns the blocks it holds.
  size_t extend_run(size_t run) {
    Held& h = held(run);
    allocate(1);
    h.push_back(kAnonymous);
    return h.size();
  }
  void release_run(size_t run) {
    Held& h = held(run);
    release(h.data(), h.size());
    h.clear();
  }

  // ------------------------------------------------------------------ per run, in chunks (steps.hpp)
  // vLLM's scheduler admits a waiting request as run `run`: keys[:known] are its full blocks, the
  // first `hits` of them cached, as the last look_up(keys, ...) found on the unchanged pool (the
  // caller checked that the run fits). Each of keys[hits:known] that no copy holds is a policy miss,
  // before any eviction; then the looked-up hits are touched into its blocks.
  void start_run(size_t run, const Key* keys, size_t hits, size_t known) {
    if (hits != looked_up_.size()) throw PoolBroken("block pool: start_run needs look_up of its keys first");
    miss_uncached(keys, hits, known);
    Held& h = held(run);
    h.clear();
    touch_looked_up(&h);
  }
  // The run holds at least `blocks` blocks: the missing ones are allocated (anonymous, evicting).
  void grow_run(size_t run, size_t blocks) {
    Held& h = held(run);
    if (blocks <= h.size()) return;
    allocate(static_cast<int64_t>(blocks - h.size()));
    h.resize(blocks, kAnonymous);
  }
  // Held block j of the run is full with `key`: cache it (a copy, see cache()) if it is anonymous.
  void fill_at(size_t run, size_t j, Key key, Key parent, bool has_parent) {
    Held& h = held(run);
    if (h[j] == kAnonymous) h[j] = cache(key, parent, has_parent);
  }
  size_t run_blocks(size_t run) { return held(run).size(); }

  // The adaptive manager's switch: `policy` already holds this pool's cached keys and pins
  // (handover); the pool's slots carry over unchanged. `generation` counts the switches.
  void replace_policy(Policy& policy) {
    policy_ = &policy;
    ++generation_;
  }
  uint64_t generation() const { return generation_; }

  // ------------------------------------------------------------------ diagnostics
  // Cached blocks no lookup can reach: some ancestor of their chain is not cached.
  int64_t stranded() const {
    enum : uint8_t { kUnknown, kReachable, kStranded, kOnPath };
    std::vector<uint8_t> state(key_.size(), kUnknown);
    std::vector<int32_t> path;
    int64_t count = 0;
    index_.for_each([&](Key, int32_t s0) {
      path.clear();
      uint8_t verdict = kReachable;
      for (int32_t s = s0;;) {
        if (state[s] == kReachable || state[s] == kStranded) {
          verdict = state[s];
          break;
        }
        if (state[s] == kOnPath) {  // a cycle of parents: no root, never reachable
          verdict = kStranded;
          break;
        }
        state[s] = kOnPath;
        path.push_back(s);
        if (!has_parent_[s]) break;
        s = index_.find(parent_[s]);
        if (s < 0) {
          verdict = kStranded;
          break;
        }
      }
      for (int32_t s : path) state[s] = verdict;
      count += verdict == kStranded;
    });
    return count;
  }

  // The invariants of pool.py's docstring; throws PoolBroken naming the first one broken.
  void check() const {
    const Policy& p = *policy_;
    const int64_t cached = static_cast<int64_t>(p.size());
    if (blank_ < 0 || uncached_in_use_ < 0) fail("negative blank or anonymous count");
    if (blank_ + cached + uncached_in_use_ != capacity_)
      fail("blocks lost: " + std::to_string(blank_) + " blank + " + std::to_string(cached) + " cached + " +
           std::to_string(uncached_in_use_) + " anonymous != " + std::to_string(capacity_));
    const int64_t in_use = static_cast<int64_t>(key_.size() - free_slots_.size());
    if (in_use != cached)
      fail("the pool holds " + std::to_string(in_use) + " copies, the policy " + std::to_string(cached) + " keys");
    if (p.num_pinned() != referenced_)
      fail(std::to_string(p.num_pinned()) + " pinned keys, " + std::to_string(referenced_) + " referenced");
    int64_t copies = 0, remixed = 0;
    index_.for_each([&](Key key, int32_t first) {
      for (int32_t s = first; s >= 0; s = next_copy_[s]) {
        ++copies;
        const Key pkey = pkey_[s];
        if (key_[s] != key) fail("a copy of key " + std::to_string(key) + " names another key");
        if (pkey != key && dup_.find(pkey) != s) fail("remixed key " + std::to_string(pkey) + " is not indexed");
        remixed += pkey != key;
        if (!p.contains(pkey)) fail("cached key " + std::to_string(pkey) + " is not in the policy");
        if (refs_[s] < 0 || p.is_pinned(pkey) != (refs_[s] > 0))
          fail("key " + std::to_string(pkey) + ": pinned iff referenced is broken");
      }
    });
    if (copies != in_use) fail("slots lost: " + std::to_string(copies) + " reachable copies of " + std::to_string(in_use));
    if (remixed != static_cast<int64_t>(dup_.size())) fail("stale remixed keys");
  }

 private:
  // A fresh slot joins the free stack: the slot arrays grow with the copies cached, up to
  // `capacity`, so a large pool that caches little, like the infinite ceiling's, holds no more than
  // it uses.
  void add_slot() {
    key_.push_back(0);
    pkey_.push_back(0);
    next_copy_.push_back(kNoCopy);
    parent_.push_back(0);
    refs_.push_back(0);
    has_parent_.push_back(0);
    free_slots_.push_back(static_cast<int32_t>(key_.size() - 1));
  }
  // cached_prefix's view of the pool for look_up: a cached key's first copy's slot is recorded.
  struct SlotRecorder {
    const KeyMap& index;
    std::vector<int32_t>& slots;
    bool contains(Key key) const {
      int32_t s = index.find(key);
      if (s < 0) return false;
      slots.push_back(s);
      return true;
    }
    void prefetch(Key key) const { index.prefetch(key); }
  };
  // touch() of one cached copy.
  void touch_slot(int32_t s, Held* held) {
    const bool first_ref = refs_[s] == 0;
    policy_->hit_pin(pkey_[s], first_ref);  // may throw: nothing changed yet
    ++refs_[s];
    referenced_ += first_ref;
    if (held) held->push_back(s);
  }
  void touch_looked_up(Held* held) {
    for (int32_t s : looked_up_) touch_slot(s, held);
  }
  int32_t slot_of(Key key) const {
    int32_t s = index_.find(key);
    if (s < 0) throw BadKey("block pool: key " + std::to_string(key) + " is not cached");
    return s;
  }
  [[noreturn]] static void fail(const std::string& what) { throw PoolBroken("block pool: " + what); }
  // A lookup missed on keys[from:to]: each that no copy holds as its policy key is a policy miss.
  void miss_uncached(const Key* keys, size_t from, size_t to) {
    for (size_t j = from; j < to; ++j)
      if (!holds_policy_key(keys[j])) policy_->miss(keys[j]);
  }
  // The copy holding policy key `victim` (evicted) leaves its key's chain and the indexes; returns
  // its slot.
  int32_t take_copy(Key victim) {
    const int32_t s = slot_of_policy_key(victim);
    if (s < 0) throw BadKey("block pool: the policy evicted " + std::to_string(victim) + ", which no block holds");
    unlink_copy(s, index_.value_of(key_[s]));
    if (pkey_[s] != key_[s]) dup_.erase(victim);
    return s;
  }
  // Copy s leaves its key's chain, whose first copy's index entry is `first`.
  void unlink_copy(int32_t s, int32_t* first) {
    if (*first == s) {
      if (next_copy_[s] >= 0) *first = next_copy_[s];
      else index_.erase(key_[s]);
    } else {
      int32_t c = *first;
      while (next_copy_[c] != s) c = next_copy_[c];
      next_copy_[c] = next_copy_[s];
    }
    next_copy_[s] = kNoCopy;
  }

  int64_t capacity_;
  int64_t blank_;
  int64_t uncached_in_use_ = 0;
  int64_t evictions_ = 0;
  size_t referenced_ = 0;  // cached keys with refs > 0 (== policy's pinned keys)
  Policy* policy_;
  static constexpr int32_t kNoCopy = -1;
  KeyMap index_;  // trace key -> its first copy's slot
  KeyMap dup_;    // remixed policy key -> slot (copies whose policy key is not their trace key)
  std::vector<Key> key_, pkey_;  // per slot: trace key, policy key
  std::vector<int32_t> next_copy_;  // per slot: the next copy of the same trace key, or kNoCopy
  std::vector<Key> parent_;
  std::vector<int32_t> refs_;
  std::vector<uint8_t> has_parent_;
  std::vector<int32_t> free_slots_;
  std::vector<Held> runs_;
  std::vector<int32_t> looked_up_;  // the hit prefix's slots, from the last look_up
  uint64_t generation_ = 0;
};

}  // namespace wakman
