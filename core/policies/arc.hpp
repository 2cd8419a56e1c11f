// ARC as libCacheSim's current ARC.c (float p, ghosts B1/B2). Semantics: arc.py.
#pragma once

#include <algorithm>

#include "../driver.hpp"
#include "../node_arena.hpp"

namespace wakman {

class ARC final : public Policy {
 public:
  enum : uint8_t { kT1, kT2, kB1, kB2, kPending };

  explicit ARC(int64_t capacity) : Policy(capacity) {}
  const char* name() const override { return "arc"; }
  void reserve() override { s_.reserve(2 * static_cast<size_t>(capacity_)); }  // T1, T2, B1, B2 <= 2c

  size_t size() const override { return t1_.size() + t2_.size() + t1_pinned_ + t2_pinned_; }
  size_t num_pinned() const override { return t1_pinned_ + t2_pinned_; }
  bool contains(Key key) const override { return find_resident(key) >= 0; }
  void prefetch(Key key) const override { s_.index.prefetch(key); }
  bool is_pinned(Key key) const override {
    int32_t i = find_resident(key);
    return i >= 0 && s_.nodes[i].pinned;
  }
  double p() const { return p_; }
  size_t ghost_size() const { return b1_.size() + b2_.size(); }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const {
    int32_t i = s_.index.find(key);
    return (i >= 0 && s_.nodes[i].where <= kT2) ? i : -1;
  }
  void hit_node(int32_t i) {
    Node& n = s_.nodes[i];
    if (n.pinned) {
      if (n.where == kT1) {
        --t1_pinned_;
        ++t2_pinned_;
        n.where = kT2;
      }
      return;
    }
    if (n.where == kT1) {
      t1_.unlink(s_.nodes, i);
      n.where = kT2;
      t2_.push_head(s_.nodes, i);
    } else {
      t2_.move_to_head(s_.nodes, i);
    }
  }

  // A ghost hit adapts p and leaves its ghost now; the evictions until the key's insert use REPLACE.
  void miss(Key key) override {
    incoming_ = 0;
    int32_t i = s_.index.find(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.where != kB1 && n.where != kB2) return;
    incoming_ = adapt(i) ? 2 : 1;
    n.where = kPending;
    pending_.push_head(s_.nodes, i);
    if (static_cast<int64_t>(pending_.size()) > pending_bound(2 * capacity_)) s_.drop(s_.pop_tail(pending_));
  }

  Key evict() override {
    if (t1_.empty() && t2_.empty()) no_evictable();
    if (incoming_) return replace(incoming_ == 2);
    if (static_cast<int64_t>(t1_.size() + t1_pinned_ + b1_.size()) >= capacity_) {
      if (!b1_.empty()) {
        s_.drop(s_.pop_tail(b1_));
        return replace(false);
      }
      if (!t1_.empty()) {
        int32_t i = s_.pop_tail(t1_);
        Key key = s_.nodes[i].key;
        s_.drop(i);
        return key;
      }
      return replace(false);
    }
    if (static_cast<int64_t>(size() + b1_.size() + b2_.size()) >= 2 * capacity_ && !b2_.empty())
      s_.drop(s_.pop_tail(b2_));
    return replace(false);
  }

  void insert(Key key, bool pinned) override {
    incoming_ = 0;
    int32_t i = s_.index.find(key);
    uint8_t where = kT1;
    if (i >= 0) {
      Node& n = s_.nodes[i];
      if (n.where <= kT2) bad_key("insert of a resident key", key);
      if (n.where == kPending) pending_.unlink(s_.nodes, i);
      else adapt(i);  // a ghost key inserted without a miss first
      where = kT2;
      n.where = kT2;
    } else {
      i = s_.add(key, kT1);
    }
    Node& n = s_.nodes[i];
    if (pinned) {
      n.pinned = 1;
      ++(where == kT1 ? t1_pinned_ : t2_pinned_);
    } else {
      (where == kT1 ? t1_ : t2_).push_head(s_.nodes, i);
    }
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    Node& n = s_.nodes[i];
    if (n.pinned) return;
    (n.where == kT1 ? t1_ : t2_).unlink(s_.nodes, i);
    n.pinned = 1;
    ++(n.where == kT1 ? t1_pinned_ : t2_pinned_);
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    Node& n = s_.nodes[i];
    if (!n.pinned) bad_key("unpin of an unpinned key", key);
    n.pinned = 0;
    --(n.where == kT1 ? t1_pinned_ : t2_pinned_);
    (n.where == kT1 ? t1_ : t2_).push_head(s_.nodes, i);
  }
  void remove(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.pinned) --(n.where == kT1 ? t1_pinned_ : t2_pinned_);
    else (n.where == kT1 ? t1_ : t2_).unlink(s_.nodes, i);
    s_.drop(i);
  }
  // The host's eviction of `key`, as evict() would leave its own victim: first the directory's trim
  // evict() makes room with (outside a pending ghost hit: |T1| + |B1| >= C drops B1's LRU ghost, or,
  // with B1 empty, a key from T1 leaves outright; else a directory of 2C drops B2's LRU ghost), then
  // T1 -> B1, T2 -> B2, as REPLACE moves its victim; p stays. So evict_key(the first victim) is
  // evict(), and the directory keeps its bounds (the ghosts grew by one per call without the trim).
  void evict_key(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    const bool t1 = n.where == kT1;
    bool ghost = true;
    if (!incoming_) {
      if (static_cast<int64_t>(t1_.size() + t1_pinned_ + b1_.size()) >= capacity_) {
        if (!b1_.empty()) s_.drop(s_.pop_tail(b1_));
        else ghost = !t1;
      } else if (static_cast<int64_t>(size() + b1_.size() + b2_.size()) >= 2 * capacity_ && !b2_.empty()) {
        s_.drop(s_.pop_tail(b2_));
      }
    }
    if (n.pinned) {
      n.pinned = 0;
      --(t1 ? t1_pinned_ : t2_pinned_);
    } else {
      (t1 ? t1_ : t2_).unlink(s_.nodes, i);
    }
    if (!ghost) {
      s_.drop(i);
      return;
    }
    n.where = t1 ? kB1 : kB2;
    (t1 ? b1_ : b2_).push_head(s_.nodes, i);
  }
  void adopt(Key key) override {
    if (s_.index.find(key) >= 0) bad_key("adopt of a known key", key);
    insert(key, false);
  }
  void reset() override {
    s_.clear();
    t1_.clear();
    t2_.clear();
    b1_.clear();
    b2_.clear();
    pending_.clear();
    t1_pinned_ = t2_pinned_ = 0;
    p_ = 0.0;
    incoming_ = 0;
  }
  // evict()'s order if nothing else happened: its rules (a pending ghost hit's REPLACE, the
  // directory's bounds, p unchanged) run on the lists' sizes, T1 and T2 taken from their tails; no
  // node changes.
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    int32_t t1 = t1_.tail(), t2 = t2_.tail();
    size_t n1 = t1_.size(), n2 = t2_.size(), b1 = b1_.size(), b2 = b2_.size();
    const auto take = [&](bool from_t1, bool to_ghost) {
      int32_t& at = from_t1 ? t1 : t2;
      out.push_back(s_.nodes[at].key);
      at = s_.nodes[at].newer;
      --(from_t1 ? n1 : n2);
      if (to_ghost) ++(from_t1 ? b1 : b2);
    };
    const auto replace = [&](bool in_b2) {
      const double t1_resident = static_cast<double>(n1 + t1_pinned_);
      const bool take_t1 = (t1_resident > 0 && (t1_resident > p_ || (t1_resident == p_ && in_b2))) ||
                           (n2 + t2_pinned_) == 0;
      take((take_t1 && n1 > 0) || n2 == 0, true);
    };
    const auto capacity = static_cast<size_t>(capacity_);
    while (out.size() < limit && (n1 > 0 || n2 > 0)) {
      if (incoming_) {
        replace(incoming_ == 2);
      } else if (n1 + t1_pinned_ + b1 >= capacity) {
        if (b1 > 0) {
          --b1;
          replace(false);
        } else if (n1 > 0) {
          take(true, false);
        } else {
          replace(false);
        }
      } else {
        if (n1 + n2 + t1_pinned_ + t2_pinned_ + b1 + b2 >= 2 * capacity && b2 > 0) --b2;
        replace(false);
      }
    }
  }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override { return s_.bytes(); }
  WAKMAN_DRIVEN(ARC)

 private:
  int32_t resident(Key key) const {
    int32_t i = find_resident(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }

  // Ghost hit on node i (in B1 or B2): move p by the ghosts' sizes before the key leaves, unlink
  // it. True when it was in B2.
  bool adapt(int32_t i) {
    double b1 = static_cast<double>(b1_.size()), b2 = static_cast<double>(b2_.size());
    if (s_.nodes[i].where == kB1) {
      p_ = std::min(p_ + std::max(b2 / b1, 1.0), static_cast<double>(capacity_));
      b1_.unlink(s_.nodes, i);
      return false;
    }
    p_ = std::max(p_ - std::max(b1 / b2, 1.0), 0.0);
    b2_.unlink(s_.nodes, i);
    return true;
  }

  // REPLACE: T1's LRU key to B1 when T1 is over its target p (or T2 is empty), else T2's LRU to B2;
  // the other list when the chosen one has no unpinned key.
  Key replace(bool in_b2) {
    double t1 = static_cast<double>(t1_.size() + t1_pinned_);
    bool take_t1 = (t1 > 0 && (t1 > p_ || (t1 == p_ && in_b2))) || (t2_.size() + t2_pinned_) == 0;
    int32_t i;
    if ((take_t1 && !t1_.empty()) || t2_.empty()) {
      i = s_.pop_tail(t1_);
      s_.nodes[i].where = kB1;
      b1_.push_head(s_.nodes, i);
    } else {
      i = s_.pop_tail(t2_);
      s_.nodes[i].where = kB2;
      b2_.push_head(s_.nodes, i);
    }
    return s_.nodes[i].key;
  }

  Store s_;
  List t1_, t2_, b1_, b2_, pending_;
  size_t t1_pinned_ = 0, t2_pinned_ = 0;
  double p_ = 0.0;
  int incoming_ = 0;  // the last miss was a ghost hit in B1 (1) or B2 (2); cleared by insert
};

}  // namespace wakman
