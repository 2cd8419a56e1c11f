// Belady / MIN: evict the unpinned key whose next use is farthest in the future. Semantics: belady.py.
#pragma once

#include <algorithm>
#include <string>

#include "../driver.hpp"
#include "stored.hpp"

namespace wakman {

class Belady final : public StoredPolicy {
 public:
  static constexpr int64_t kNever = int64_t(1) << 62;

  Belady(int64_t capacity, std::vector<Key> future) : StoredPolicy(capacity), future_(std::move(future)) {
    const size_t n = future_.size();
    next_index_.assign(n, kNever);
    KeyMap last(n / 2 + 8);
    std::vector<int64_t> last_pos;  // by slot in `last`
    for (size_t j = n; j-- > 0;) {
      Key key = future_[j];
      int32_t slot = last.find(key);
      if (slot >= 0) {
        next_index_[j] = last_pos[slot];
        last_pos[slot] = static_cast<int64_t>(j);
      } else {
        last.insert(key, static_cast<int32_t>(last_pos.size()));
        last_pos.push_back(static_cast<int64_t>(j));
      }
    }
  }
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
    Node& n = s_.nodes[i];
    int64_t next = next_use_for(n.key);
    if (n.pinned) next_use_[i] = next;
    else set(i, next);
  }

  void miss(Key) override {}
  Key evict() override {
    if (pinned_ == s_.index.size()) no_evictable();
    while (true) {
      std::pop_heap(heap_.begin(), heap_.end(), later_first);
      Entry e = heap_.back();
      heap_.pop_back();
      int32_t i = s_.index.find(e.key);
      if (i >= 0 && !s_.nodes[i].pinned && next_use_[i] == e.next) {
        s_.drop(i);
        return e.key;
      }
    }
  }
  void insert(Key key, bool pinned) override {
    int32_t i = add(key, pinned);
    if (static_cast<size_t>(i) >= next_use_.size()) next_use_.resize(i + 1);
    int64_t next = next_use_for(key);
    if (pinned) next_use_[i] = next;
    else set(i, next);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { mark_pinned(resident(key)); }  // its heap entries go stale
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
    s_.drop(i);
  }
  void adopt(Key key) override { insert(key, false); }
  void reset() override {
    clear_store();
    heap_.clear();
    has_current_ = false;
  }
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    std::vector<std::pair<int64_t, Key>> order;
    s_.index.for_each([&](Key key, int32_t i) {
      if (!s_.nodes[i].pinned) order.emplace_back(next_use_[i], key);
    });
    std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (auto& [next, key] : order) {
      if (out.size() >= limit) break;
      out.push_back(key);
    }
  }
  size_t bytes() const override {
    return s_.bytes() + heap_.capacity() * sizeof(Entry) + future_.capacity() * 16 +
           occ_positions_.capacity() * 8 + occ_start_.capacity() * 8 + occ_index_.bytes();
  }
  WAKMAN_DRIVEN(Belady)

 private:
  struct Entry {
    int64_t next;
    uint64_t order;  // ties (keys never used again): the oldest entry first
    Key key;
  };
  static bool later_first(const Entry& a, const Entry& b) {
    return a.next != b.next ? a.next < b.next : a.order > b.order;
  }

  void set(int32_t i, int64_t next) {
    next_use_[i] = next;
    heap_.push_back(Entry{next, ++order_, s_.nodes[i].key});
    std::push_heap(heap_.begin(), heap_.end(), later_first);
    if (heap_.size() > 4 * (s_.index.size() - pinned_) + 1024) rebuild_heap();
  }
  void rebuild_heap() {
    heap_.clear();
    s_.index.for_each([&](Key key, int32_t i) {
      if (!s_.nodes[i].pinned) heap_.push_back(Entry{next_use_[i], ++order_, key});
    });
    std::make_heap(heap_.begin(), heap_.end(), later_first);
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

  std::vector<Key> future_;
  std::vector<int64_t> next_index_;
  std::vector<int64_t> next_use_;  // by node
  std::vector<Entry> heap_;
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
