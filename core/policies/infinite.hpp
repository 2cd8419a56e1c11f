// Infinite: the ceiling. Never evicts; every key once seen stays resident. Semantics: infinite.py.
#pragma once

#include <limits>

#include "../driver.hpp"
#include "../node_arena.hpp"

namespace wakman {

class Infinite final : public Policy {
 public:
  explicit Infinite(int64_t capacity) : Policy(capacity) { bound_ = std::numeric_limits<int64_t>::max(); }
  const char* name() const override { return "infinite"; }

  size_t size() const override { return s_.index.size(); }
  size_t num_pinned() const override { return pinned_; }
  bool contains(Key key) const override { return s_.index.find(key) >= 0; }
  bool is_pinned(Key key) const override {
    int32_t i = s_.index.find(key);
    return i >= 0 && s_.nodes[i].pinned;
  }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const { return s_.index.find(key); }
  void hit_node(int32_t) {}

  void miss(Key) override {}
  Key evict() override { throw NoEvictable("infinite: never evicts"); }
  void insert(Key key, bool pinned) override {
    if (s_.index.find(key) >= 0) bad_key("insert of a resident key", key);
    int32_t i = s_.add(key, 0);
    if (pinned) {
      s_.nodes[i].pinned = 1;
      ++pinned_;
    } else {
      order_.push_head(s_.nodes, i);
    }
  }
  void hit(Key key) override {
    if (s_.index.find(key) < 0) bad_key("not resident", key);
  }
  void pin(Key key) override {
    int32_t i = resident(key);
    if (s_.nodes[i].pinned) return;
    order_.unlink(s_.nodes, i);
    s_.nodes[i].pinned = 1;
    ++pinned_;
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    if (!s_.nodes[i].pinned) bad_key("unpin of an unpinned key", key);
    s_.nodes[i].pinned = 0;
    --pinned_;
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
  void reset() override {
    s_.clear();
    order_.clear();
    pinned_ = 0;
  }
  void eviction_order(std::vector<Key>& out) const override { order_.append_keys(s_.nodes, out); }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override { return s_.bytes(); }
  WAKMAN_DRIVEN(Infinite)

 private:
  int32_t resident(Key key) const {
    int32_t i = s_.index.find(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }

  Store s_;
  List order_;
  size_t pinned_ = 0;
};

}  // namespace wakman
