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
// Read-only once built, so one future serves every Belady that replays it (one per capacity).
struct BeladyFuture {
  static constexpr int64_t kNever = int64_t(1) << 62;

  explicit BeladyFuture(std::vector<Key> sequence) : keys(std::move(sequence)) {
    const size_t n = keys.size();
    if (n > static_cast<size_t>(INT32_MAX)) throw std::length_error("belady: the future exceeds 2**31 accesses");
    next_index.assign(n, kNever);
    // `last` maps a key to its latest position seen so far. It is sized by the distinct keys as they
    // come (the table doubles), not by the accesses: a trace reuses its keys, and a table of n/2
    // entries would cost 16 bytes an access and a cache miss each.
    KeyMap last;
    for (size_t j = n; j-- > 0;) {
      if (int32_t* pos = last.value_of(keys[j])) {
        next_index[j] = *pos;
        *pos = static_cast<int32_t>(j);
      } else {
        last.insert(keys[j], static_cast<int32_t>(j));
      }
    }
  }

  std::vector<Key> keys;
  std::vector<int64_t> next_index;
};

class Belady final : public StoredPolicy {
 public:
  static constexpr int64_t kNever = BeladyFuture::kNever;

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
    int64_t next = next_use_for(s_.nodes[i].key);
    if (s_.nodes[i].pinned) next_use_[i] = next;
    else set(i, next);
  }

  void miss(Key) override {}
  Key evict() override {
    if (heap_.empty()) no_evictable();
    int32_t i = heap_[0];
    heap_erase(i);
    Key key = s_.nodes[i].key;
    s_.drop(i);
    return key;
  }
  void insert(Key key, bool pinned) override {
    int32_t i = add(key, pinned);
    if (static_cast<size_t>(i) >= next_use_.size()) {
      next_use_.resize(i + 1);
      set_order_.resize(i + 1);
      heap_pos_.resize(i + 1, kNotInHeap);
    }
    int64_t next = next_use_for(key);
    if (pinned) next_use_[i] = next;
    else set(i, next);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override {
    int32_t i = resident(key);
    if (mark_pinned(i)) heap_erase(i);
  }
  // Re-enters with its next use after the clock (pool use), or the one it had (replay).
  void unpin(Key key) override {
    int32_t i = resident(key);
    mark_unpinned(i);
    set(i, occurrences_built_ ? next_after_clock(key) : next_use_[i]);
  }
  void remove(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0) return;
    if (s_.nodes[i].pinned) --pinned_;
    else heap_erase(i);
    s_.drop(i);
  }
  void adopt(Key key) override { insert(key, false); }
  void reset() override {
    clear_store();
    heap_.clear();
    std::fill(heap_pos_.begin(), heap_pos_.end(), kNotInHeap);
    has_current_ = false;
  }
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    std::vector<int32_t> order(heap_);
    std::sort(order.begin(), order.end(), [this](int32_t a, int32_t b) { return above(a, b); });
    for (int32_t i : order) {
      if (out.size() >= limit) break;
      out.push_back(s_.nodes[i].key);
    }
  }
  size_t bytes() const override {
    return s_.bytes() + heap_.capacity() * 4 + next_use_.capacity() * 20 + future_.capacity() * 16 +
           occ_positions_.capacity() * 8 + occ_start_.capacity() * 8 + occ_index_.bytes();
  }
  WAKMAN_DRIVEN(Belady)

 private:
  static constexpr int32_t kNotInHeap = -1;

  // The victim order, a strict total order: the later next use first; among equal ones (keys never
  // used again) the one whose next use was set first.
  bool above(int32_t a, int32_t b) const {
    return next_use_[a] != next_use_[b] ? next_use_[a] > next_use_[b] : set_order_[a] < set_order_[b];
  }
  // Node i (unpinned, resident) takes next use `next`: it enters the heap or moves in place.
  void set(int32_t i, int64_t next) {
    next_use_[i] = next;
    set_order_[i] = ++order_;
    if (heap_pos_[i] == kNotInHeap) {
      heap_pos_[i] = static_cast<int32_t>(heap_.size());
      heap_.push_back(i);
    }
    sift_down(sift_up(heap_pos_[i]));
  }
  void heap_erase(int32_t i) {
    const int32_t pos = heap_pos_[i];
    const int32_t last = heap_.back();
    heap_.pop_back();
    heap_pos_[i] = kNotInHeap;
    if (last == i) return;
    place(last, pos);
    sift_down(sift_up(pos));
  }
  void place(int32_t node, int32_t pos) {
    heap_[pos] = node;
    heap_pos_[node] = pos;
  }
  // Moves the node at `pos` towards the root while it belongs above its parent; returns its position.
  int32_t sift_up(int32_t pos) {
    const int32_t node = heap_[pos];
    while (pos > 0) {
      const int32_t parent = (pos - 1) / 2;
      if (!above(node, heap_[parent])) break;
      place(heap_[parent], pos);
      pos = parent;
    }
    place(node, pos);
    return pos;
  }
  void sift_down(int32_t pos) {
    const int32_t node = heap_[pos];
    const int32_t n = static_cast<int32_t>(heap_.size());
    while (true) {
      int32_t child = 2 * pos + 1;
      if (child >= n) break;
      if (child + 1 < n && above(heap_[child + 1], heap_[child])) ++child;
      if (!above(heap_[child], node)) break;
      place(heap_[child], pos);
      pos = child;
    }
    place(node, pos);
  }

  int64_t next_use_for(Key key) {
    if (has_current_ && key == current_key_) {
      has_current_ = false;
      return current_next_;
    }
    return next_after_clock(key);
  }

  // First occurrence of `key` at or after the clock (kNever if none): positions grouped by key.
  int64_t next_after_clock(Key key) {
    if (!occurrences_built_) build_occurrences();
    int32_t g = occ_index_.find(key);
    if (g < 0) return kNever;
    auto first = occ_positions_.begin() + occ_start_[g], last = occ_positions_.begin() + occ_start_[g + 1];
    auto it = std::lower_bound(first, last, clock_);
    return it == last ? kNever : *it;
  }
  void build_occurrences() {
    const size_t n = future_.size();
    std::vector<int32_t> group(n);
    std::vector<int64_t> count;
    for (size_t j = 0; j < n; ++j) {
      int32_t g = occ_index_.find(future_[j]);
      if (g < 0) {
        g = static_cast<int32_t>(count.size());
        occ_index_.insert(future_[j], g);
        count.push_back(0);
      }
      group[j] = g;
      ++count[g];
    }
    occ_start_.assign(count.size() + 1, 0);
    for (size_t g = 0; g < count.size(); ++g) occ_start_[g + 1] = occ_start_[g] + count[g];
    std::vector<int64_t> fill(occ_start_.begin(), occ_start_.end() - 1);
    occ_positions_.assign(n, 0);
    for (size_t j = 0; j < n; ++j) occ_positions_[fill[group[j]]++] = static_cast<int64_t>(j);
    occurrences_built_ = true;
  }

  std::shared_ptr<const BeladyFuture> shared_;
  const std::vector<Key>& future_;
  const std::vector<int64_t>& next_index_;
  std::vector<int64_t> next_use_;  // by node
  std::vector<uint64_t> set_order_;  // by node: when its next use was last set (ties among kNever)
  std::vector<int32_t> heap_pos_;    // by node: its index in heap_, or kNotInHeap (pinned, free slot)
  std::vector<int32_t> heap_;        // the unpinned resident nodes, a binary heap on above()
  uint64_t order_ = 0;
  int64_t clock_ = 0;
  bool has_current_ = false;
  Key current_key_ = 0;
  int64_t current_next_ = 0;
  bool occurrences_built_ = false;
  KeyMap occ_index_;
  std::vector<int64_t> occ_start_, occ_positions_;
};

}  // namespace wakman
