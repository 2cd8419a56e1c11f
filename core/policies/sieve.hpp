// SIEVE as libCacheSim's Sieve.c: a visited bit and a hand sweeping from the tail. Semantics: sieve.py.
#pragma once

#include "../driver.hpp"
#include "../node_arena.hpp"

namespace wakman {

class Sieve final : public Policy {
 public:
  explicit Sieve(int64_t capacity) : Policy(capacity) {}
  const char* name() const override { return "sieve"; }

  size_t size() const override { return s_.index.size(); }
  size_t num_pinned() const override { return pinned_; }
  bool contains(Key key) const override { return s_.index.find(key) >= 0; }
  bool is_pinned(Key key) const override {
    int32_t i = s_.index.find(key);
    return i >= 0 && s_.nodes[i].pinned;
  }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const { return s_.index.find(key); }
  void hit_node(int32_t i) { s_.nodes[i].freq = 1; }

  void miss(Key) override {}
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
    if (s_.index.find(key) >= 0) bad_key("insert of a resident key", key);
    int32_t i = s_.add(key, 0);
    if (pinned) {
      s_.nodes[i].pinned = 1;
      ++pinned_;
    } else {
      queue_.push_head(s_.nodes, i);
    }
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override {
    int32_t i = resident(key);
    if (s_.nodes[i].pinned) return;
    leave(i);
    s_.nodes[i].pinned = 1;
    ++pinned_;
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    if (!s_.nodes[i].pinned) bad_key("unpin of an unpinned key", key);
    s_.nodes[i].pinned = 0;
    --pinned_;
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
    s_.clear();
    queue_.clear();
    pinned_ = 0;
    hand_ = -1;
  }
  // From the hand to the head, then from the tail up to the hand: the order the hand sweeps.
  void eviction_order(std::vector<Key>& out) const override {
    if (hand_ < 0) return queue_.append_keys(s_.nodes, out);
    for (int32_t i = hand_; i >= 0; i = s_.nodes[i].newer) out.push_back(s_.nodes[i].key);
    for (int32_t i = queue_.tail(); i != hand_; i = s_.nodes[i].newer) out.push_back(s_.nodes[i].key);
  }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override { return s_.bytes(); }
  WAKMAN_DRIVEN(Sieve)

 private:
  int32_t resident(Key key) const {
    int32_t i = s_.index.find(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }
  // Node i leaves the queue; a hand resting on it moves to its newer neighbour (libCacheSim's remove).
  void leave(int32_t i) {
    if (hand_ == i) hand_ = s_.nodes[i].newer;
    queue_.unlink(s_.nodes, i);
  }

  Store s_;
  List queue_;
  size_t pinned_ = 0;
  int32_t hand_ = -1;  // the node the next sweep starts at; -1: the tail
};

}  // namespace wakman
