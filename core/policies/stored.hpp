// StoredPolicy: the part shared by the policies whose every known key is resident (no ghosts): LRU,
// FIFO, SIEVE, Belady and the infinite ceiling. One Store (index + nodes) and the count of pinned keys.
#pragma once

#include "../node_arena.hpp"
#include "../policy.hpp"

namespace wakman {

class StoredPolicy : public Policy {
 public:
  using Policy::Policy;

  size_t size() const override { return s_.index.size(); }
  size_t num_pinned() const override { return pinned_; }
  bool contains(Key key) const override { return s_.index.find(key) >= 0; }
  void prefetch(Key key) const override { s_.index.prefetch(key); }
  bool is_pinned(Key key) const override {
    int32_t i = s_.index.find(key);
    return i >= 0 && s_.nodes[i].pinned;
  }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override { return s_.bytes(); }

  void miss(Key) override {}  // no ghosts: a miss changes nothing
  void evict_key(Key key) override { remove(key); }  // no ghost to keep
  bool hears_misses() const override { return false; }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const { return s_.index.find(key); }

 protected:
  int32_t resident(Key key) const {
    int32_t i = s_.index.find(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }
  // A node for a new resident key; a pinned one is counted, an unpinned one is left for the caller
  // to put in its order.
  int32_t add(Key key, bool pinned) {
    if (s_.index.find(key) >= 0) bad_key("insert of a resident key", key);
    int32_t i = s_.add(key, 0);
    if (pinned) {
      s_.nodes[i].pinned = 1;
      ++pinned_;
    }
    return i;
  }
  // Marks node i pinned (false if it already was); the caller takes it out of its order.
  bool mark_pinned(int32_t i) {
    if (s_.nodes[i].pinned) return false;
    s_.nodes[i].pinned = 1;
    ++pinned_;
    return true;
  }
  void mark_unpinned(int32_t i) {
    if (!s_.nodes[i].pinned) bad_key("unpin of an unpinned key", s_.nodes[i].key);
    s_.nodes[i].pinned = 0;
    --pinned_;
  }
  void clear_store() {
    s_.clear();
    pinned_ = 0;
  }

  Store s_;
  size_t pinned_ = 0;
};

}  // namespace wakman
