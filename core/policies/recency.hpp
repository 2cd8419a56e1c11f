// LRU, FIFO and the infinite ceiling: one queue; LRU moves a hit to the head, FIFO and the ceiling
// leave it; the ceiling never evicts (the plain-cache driver never reaches its bound and evict()
// refuses). Semantics: lru.py, fifo.py, infinite.py.
#pragma once

#include <limits>

#include "../driver.hpp"
#include "stored.hpp"

namespace wakman {

template <bool kMoveOnHit, bool kEvicts = true>
class Recency final : public StoredPolicy {
 public:
  explicit Recency(int64_t capacity) : StoredPolicy(capacity) {
    if (!kEvicts) {  // the ceiling holds every distinct key of its trace: a half-full index
      bound_ = std::numeric_limits<int64_t>::max();
      s_ = Store(KeyMap::Fill::kDense);
    }
  }
  const char* name() const override { return kMoveOnHit ? "lru" : kEvicts ? "fifo" : "infinite"; }
  void reserve() override {
    if (kEvicts) s_.reserve(static_cast<size_t>(capacity_));  // the ceiling has no bound to reserve
  }

  void hit_node(int32_t i) {
    if (kMoveOnHit && !s_.nodes[i].pinned) order_.move_to_head(s_.nodes, i);
  }

  Key evict() override {
    if (!kEvicts) throw NoEvictable("infinite: never evicts");
    if (order_.empty()) no_evictable();
    int32_t i = s_.pop_tail(order_);
    Key key = s_.nodes[i].key;
    s_.drop(i);
    return key;
  }
  void insert(Key key, bool pinned) override {
    int32_t i = add(key, pinned);
    if (!pinned) order_.push_head(s_.nodes, i);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    if (mark_pinned(i)) order_.unlink(s_.nodes, i);
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    mark_unpinned(i);
    order_.push_head(s_.nodes, i);
  }
  void remove(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0) return;
    if (s_.nodes[i].pinned) --pinned_;
    else order_.unlink(s_.nodes, i);
    s_.drop(i);
  }
  void adopt(Key key) override { insert(key, false); }
  // The key's node keeps its place in the queue (and its pin): the queue is all a key carries here.
  bool rekey(Key from, Key to) override {
    const int32_t i = s_.index.find(from);
    return i >= 0 && s_.rekey(i, to);
  }
  bool renames_keys() const override { return true; }
  void reset() override {
    clear_store();
    order_.clear();
  }
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    order_.append_keys(s_.nodes, out, limit);
  }
  bool eviction_order_after(Key after, std::vector<Key>& out, size_t limit) const override {
    const int32_t at = s_.index.find(after);
    if (at < 0 || s_.nodes[at].pinned) bad_key("eviction_order_after of a key not in the order", after);
    for (int32_t i = s_.nodes[at].newer; i >= 0 && out.size() < limit; i = s_.nodes[i].newer)
      out.push_back(s_.nodes[i].key);
    return true;
  }
  WAKMAN_DRIVEN(Recency)

 private:
  List order_;
};

using LRU = Recency<true>;
using FIFO = Recency<false>;
using Infinite = Recency<false, false>;

}  // namespace wakman
