// SIEVE as libCacheSim's Sieve.c: a visited bit and a hand sweeping from the tail. Semantics: sieve.py.
#pragma once

#include "../driver.hpp"
#include "stored.hpp"

namespace wakman {

class Sieve final : public StoredPolicy {
 public:
  explicit Sieve(int64_t capacity) : StoredPolicy(capacity) {}
  const char* name() const override { return "sieve"; }
  void reserve() override { s_.reserve(static_cast<size_t>(capacity_)); }

  void hit_node(int32_t i) { s_.nodes[i].freq = 1; }

  Key evict() override {
    if (queue_.empty()) no_evictable();
    int32_t i = hand_ >= 0 ? hand_ : queue_.tail();
    while (s_.nodes[i].freq) {
      s_.nodes[i].freq = 0;
      i = s_.nodes[i].newer;
      if (i < 0) i = queue_.tail();
    }
    hand_ = s_.nodes[i].newer;
    Key key = s_.nodes[i].key;
    queue_.unlink(s_.nodes, i);
    s_.drop(i);
    return key;
  }
  void insert(Key key, bool pinned) override {
    int32_t i = add(key, pinned);
    if (!pinned) queue_.push_head(s_.nodes, i);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    if (!s_.nodes[i].pinned) leave(i);
    mark_pinned(i);
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    mark_unpinned(i);
    queue_.push_head(s_.nodes, i);
  }
  void remove(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0) return;
    if (s_.nodes[i].pinned) --pinned_;
    else leave(i);
    s_.drop(i);
  }
  void adopt(Key key) override { insert(key, false); }
  void reset() override {
    clear_store();
    queue_.clear();
    hand_ = -1;
  }
  // evict()'s order if nothing else happened: the sweep goes round the queue from the hand (the
  // tail when none), taking the unvisited keys and clearing the visited ones, which it takes on its
  // second round: the unvisited keys, then the visited ones, each in the sweep's order.
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    if (queue_.empty()) return;
    const int32_t start = hand_ >= 0 ? hand_ : queue_.tail();
    for (const bool visited : {false, true}) {
      int32_t i = start;
      do {
        if ((s_.nodes[i].freq != 0) == visited) {
          if (out.size() >= limit) return;
          out.push_back(s_.nodes[i].key);
        }
        i = s_.nodes[i].newer >= 0 ? s_.nodes[i].newer : queue_.tail();
      } while (i != start);
    }
  }
  WAKMAN_DRIVEN(Sieve)

 private:
  // Node i leaves the queue; a hand resting on it moves to its newer neighbour (libCacheSim's remove).
  void leave(int32_t i) {
    if (hand_ == i) hand_ = s_.nodes[i].newer;
    queue_.unlink(s_.nodes, i);
  }

  List queue_;
  int32_t hand_ = -1;  // the node the next sweep starts at; -1: the tail
};

}  // namespace wakman
