// Belady / MIN: evict the unpinned key whose next use is farthest in the future. Semantics: belady.py.
#pragma once

#include <algorithm>
#include <climits>
#include <memory>
#include <stdexcept>
#include <string>

#include "../driver.hpp"
#include "stored.hpp"

namespace wakman {

// The future a Belady run is given: the whole key sequence and, per access, the index of the same
// key's next access (kNever if none), from one backward pass, as libCacheSim's next_access_vtime.
// Read-only once built (but for the occurrence index pool use builds on first need), so one future
// serves every Belady that replays it (one per capacity). Memory: 12 bytes per access, plus 4 per
// access once the occurrences are built.
struct BeladyFuture {
  static constexpr int32_t kNever = INT32_MAX;  // above every index: the future holds < INT32_MAX keys

  explicit BeladyFuture(std::vector<Key> sequence) : keys(std::move(sequence)) {
    const size_t n = keys.size();
    if (n >= static_cast<size_t>(INT32_MAX)) throw std::length_error("belady: the future exceeds 2**31 - 2 accesses");
    next_index.assign(n, kNever);
    // `last` maps a key to its latest position seen so far. It is sized by the distinct keys as they
    // come (the table doubles), not by the accesses: a trace reuses its keys, and a table of n/2
    // entries would cost 16 bytes an access and a cache miss each.
    KeyMap last(8, KeyMap::Fill::kDense);
    for (size_t j = n; j-- > 0;) {
      if (int32_t* pos = last.value_of(keys[j])) {
        next_index[j] = *pos;
        *pos = static_cast<int32_t>(j);
      } else {
        last.insert(keys[j], static_cast<int32_t>(j));
      }
    }
  }

  // A cursor over one key's occurrences, from the positions grouped by key (built on the first call;
  // pool use keeps one per resident key): next_at(c, clock) is the key's first occurrence at or after
  // `clock` (kNever if none), without an index lookup: O(1) when the clock passed no occurrence
  // since the last call, O(log of those passed) otherwise (a galloping search; a clock moved back
  // searches the positions already passed). `end < 0`: no cursor yet.
  struct Cursor {
    int32_t start = 0, pos = 0, end = -1;  // the key's positions are occ_positions_[start:end]
  };
  Cursor cursor(Key key, int64_t clock) const {
    if (!occurrences_built_) build_occurrences();
    int32_t g = occ_index_.find(key);
    if (g < 0) return Cursor{0, 0, 0};
    Cursor c{occ_start_[g], occ_start_[g], occ_start_[g + 1]};
    c.pos = static_cast<int32_t>(
        std::lower_bound(occ_positions_.begin() + c.start, occ_positions_.begin() + c.end, clock) -
        occ_positions_.begin());
    return c;
  }
  int32_t next_at(Cursor& c, int64_t clock) const {
    auto at = [this](int32_t i) { return occ_positions_.begin() + i; };
    if (c.pos > c.start && occ_positions_[c.pos - 1] >= clock) {  // the clock moved back
      c.pos = static_cast<int32_t>(std::lower_bound(at(c.start), at(c.pos), clock) - at(0));
    } else if (c.pos < c.end && occ_positions_[c.pos] < clock) {  // forward: gallop, then search
      int32_t passed = c.pos, step = 1;
      while (c.end - passed > step && occ_positions_[passed + step] < clock) {
        passed += step;
        step *= 2;
      }
      c.pos = static_cast<int32_t>(std::lower_bound(at(passed + 1), at(std::min(passed + step, c.end)), clock) -
                                   at(0));
    }
    return c.pos < c.end ? occ_positions_[c.pos] : kNever;
  }
  size_t occurrence_bytes() const {
    return occ_positions_.capacity() * 4 + occ_start_.capacity() * 4 + occ_index_.bytes();
  }

  std::vector<Key> keys;
  std::vector<int32_t> next_index;

 private:
  // Each key's positions in order, one group per key: a position no access names as its next use
  // starts a key's chain, which next_index then walks. O(accesses).
  void build_occurrences() const {
    const size_t n = keys.size();
    std::vector<bool> is_next(n, false);
    for (size_t j = 0; j < n; ++j)
      if (next_index[j] != kNever) is_next[static_cast<size_t>(next_index[j])] = true;
    occ_index_ = KeyMap(8, KeyMap::Fill::kDense);
    occ_start_.assign(1, 0);
    occ_positions_.assign(n, 0);
    int32_t filled = 0;
    for (size_t j = 0; j < n; ++j) {
      if (is_next[j]) continue;
      occ_index_.insert(keys[j], static_cast<int32_t>(occ_start_.size() - 1));
      for (int32_t p = static_cast<int32_t>(j); p != kNever; p = next_index[p]) occ_positions_[filled++] = p;
      occ_start_.push_back(filled);
    }
    occurrences_built_ = true;
  }

  mutable bool occurrences_built_ = false;
  mutable KeyMap occ_index_{8, KeyMap::Fill::kDense};
  mutable std::vector<int32_t> occ_start_, occ_positions_;
};

class Belady final : public StoredPolicy {
 public:
  static constexpr int32_t kNever = BeladyFuture::kNever;

  Belady(int64_t capacity, std::shared_ptr<const BeladyFuture> future)
      : StoredPolicy(capacity), shared_(std::move(future)), future_(shared_->keys), next_index_(shared_->next_index) {}
  const char* name() const override { return "belady"; }

  int64_t clock() const { return clock_; }
  size_t future_size() const { return future_.size(); }

  // Accesses before `position` (an index into the future) are past.
  void seek(int64_t position) {
    clock_ = position;
    has_current_ = false;
  }

  // The driver's i-th access must be future[i]: its next use is known in O(1).
  void begin_access(Key key) {
    int64_t i = clock_;
    if (i < 0 || i >= static_cast<int64_t>(future_.size()) || future_[i] != key)
      throw std::invalid_argument("belady: access #" + std::to_string(i) + " is key " + std::to_string(key) +
                                  ", but future[" + std::to_string(i) + "] is not that key");
    current_key_ = key;
    current_next_ = next_index_[i];
    has_current_ = true;
    clock_ = i + 1;
  }
  void hit_node(int32_t i) {
    int32_t next = next_use_for(i);
    if (s_.nodes[i].pinned) next_use_[i] = next;
    else set(i, next);
  }

  Key evict() override {
    if (heap_.empty()) no_evictable();
    int32_t i = heap_[0].node;
    heap_erase(i);
    Key key = s_.nodes[i].key;
    s_.drop(i);
    return key;
  }
  void insert(Key key, bool pinned) override {
    int32_t i = add(key, pinned);
    if (static_cast<size_t>(i) >= next_use_.size()) {
      next_use_.resize(i + 1);
      heap_pos_.resize(i + 1, kNotInHeap);
      cursor_.resize(i + 1);
    }
    cursor_[i] = BeladyFuture::Cursor{};
    int32_t next = next_use_for(i);
    if (pinned) next_use_[i] = next;
    else set(i, next);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    if (mark_pinned(i)) heap_erase(i);
  }
  // Re-enters with its next use after the clock (pool use), or the one it had (replay).
  void unpin(Key key) override {
    int32_t i = resident(key);
    mark_unpinned(i);
    set(i, pool_use_ ? pool_next_use(i) : next_use_[i]);
  }
  void remove(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0) return;
    if (s_.nodes[i].pinned) --pinned_;
    else heap_erase(i);
    s_.drop(i);
  }
  void adopt(Key key) override { insert(key, false); }
  // Forgets every key, not the clock: a reset prefix cache (vLLM's reset_prefix_cache, a hand-over
  // into this policy) goes on at the same position of the future; seek(0) starts it over.
  void reset() override {
    clear_store();
    heap_.clear();
    std::fill(heap_pos_.begin(), heap_pos_.end(), kNotInHeap);
    has_current_ = false;
  }
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    std::vector<Entry> order(heap_);
    std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) { return a.above(b); });
    for (const Entry& e : order) {
      if (out.size() >= limit) break;
      out.push_back(s_.nodes[e.node].key);
    }
  }
  size_t bytes() const override {
    return s_.bytes() + heap_.capacity() * sizeof(Entry) + next_use_.capacity() * 4 + heap_pos_.capacity() * 4 +
           cursor_.capacity() * sizeof(BeladyFuture::Cursor) +
           future_.capacity() * 8 + next_index_.capacity() * 4 + shared_->occurrence_bytes();
  }
  WAKMAN_DRIVEN(Belady)

 private:
  static constexpr int32_t kNotInHeap = -1;
  static constexpr size_t kArity = 4;  // a 4-ary heap: half the levels of a binary one, siblings adjacent

  // A heap slot: an unpinned resident node with its next use and when that was set, inline so that a
  // sift compares adjacent memory.
  struct Entry {
    uint64_t order;  // when its next use was set (ties among kNever: the earlier goes first)
    int32_t next;
    int32_t node;
    // The victim order, a strict total order: the later next use first, then the earlier set.
    bool above(const Entry& b) const { return next != b.next ? next > b.next : order < b.order; }
  };

  // Node i (unpinned, resident) takes next use `next`: it enters the heap or moves in place.
  void set(int32_t i, int32_t next) {
    next_use_[i] = next;
    const Entry e{++order_, next, i};
    size_t pos;
    if (heap_pos_[i] == kNotInHeap) {
      pos = heap_.size();
      heap_.push_back(e);
    } else {
      pos = static_cast<size_t>(heap_pos_[i]);
      heap_[pos] = e;
    }
    sift_down(sift_up(pos, e), e);
  }
  void heap_erase(int32_t i) {
    const size_t pos = static_cast<size_t>(heap_pos_[i]);
    const Entry last = heap_.back();
    heap_.pop_back();
    heap_pos_[i] = kNotInHeap;
    if (last.node == i) return;
    sift_down(sift_up(pos, last), last);
  }
  void place(const Entry& e, size_t pos) {
    heap_[pos] = e;
    heap_pos_[e.node] = static_cast<int32_t>(pos);
  }
  // Moves `e` (bound for slot `pos`) towards the root while it belongs above its parent; returns
  // the slot it takes.
  size_t sift_up(size_t pos, const Entry& e) {
    while (pos > 0) {
      const size_t parent = (pos - 1) / kArity;
      if (!e.above(heap_[parent])) break;
      place(heap_[parent], pos);
      pos = parent;
    }
    place(e, pos);
    return pos;
  }
  void sift_down(size_t pos, const Entry& e) {
    const size_t n = heap_.size();
    while (true) {
      const size_t first = kArity * pos + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t end = std::min(first + kArity, n);
      for (size_t c = first + 1; c < end; ++c)
        if (heap_[c].above(heap_[best])) best = c;
      if (!heap_[best].above(e)) break;
      place(heap_[best], pos);
      pos = best;
    }
    place(e, pos);
  }

  // Node i's next use: the driver's current access's, else its first occurrence at the clock.
  int32_t next_use_for(int32_t i) {
    if (has_current_ && s_.nodes[i].key == current_key_) {
      has_current_ = false;
      return current_next_;
    }
    pool_use_ = true;
    return pool_next_use(i);
  }
  int32_t pool_next_use(int32_t i) {
    BeladyFuture::Cursor& c = cursor_[i];
    if (c.end < 0) c = shared_->cursor(s_.nodes[i].key, clock_);
    return shared_->next_at(c, clock_);
  }

  std::shared_ptr<const BeladyFuture> shared_;
  const std::vector<Key>& future_;
  const std::vector<int32_t>& next_index_;
  std::vector<int32_t> next_use_;  // by node
  std::vector<int32_t> heap_pos_;  // by node: its slot in heap_, or kNotInHeap (pinned, free slot)
  std::vector<BeladyFuture::Cursor> cursor_;  // by node, pool use: its key's occurrences at the clock
  std::vector<Entry> heap_;        // the unpinned resident nodes, a 4-ary heap on Entry::above
  uint64_t order_ = 0;
  int64_t clock_ = 0;
  bool has_current_ = false;
  bool pool_use_ = false;  // a next use was looked up at the clock: the pool's, not the driver's
  Key current_key_ = 0;
  int32_t current_next_ = 0;
};

}  // namespace wakman
