// S3-FIFO as libCacheSim's S3FIFO (warm-up rule) and S3FIFOv0 (without). Semantics: s3fifo.py.
#pragma once

#include <algorithm>
#include <utility>

#include "../driver.hpp"
#include "../node_arena.hpp"

namespace wakman {

class S3FIFO final : public Policy {
 public:
  enum : uint8_t { kSmall, kMain, kGhost, kPending };

  S3FIFO(int64_t capacity, double small_ratio, double ghost_ratio, int promote_threshold, int freq_cap,
         bool warmup_to_main)
      : Policy(capacity),
        small_ratio_(small_ratio),
        ghost_ratio_(ghost_ratio),
        promote_threshold_(promote_threshold),
        freq_cap_(freq_cap),
        warmup_to_main_(warmup_to_main) {
    if (!(small_ratio >= 0 && small_ratio < 1))
      throw std::invalid_argument("s3fifo: small_ratio must be in [0, 1), got " + num(small_ratio));
    if (promote_threshold < 1 || promote_threshold > 255)
      throw std::invalid_argument("s3fifo: promote_threshold must be 1 to 255, got " +
                                  std::to_string(promote_threshold));
    if (freq_cap < 1 || freq_cap > 255)
      throw std::invalid_argument("s3fifo: freq_cap must be 1 to 255, got " + std::to_string(freq_cap));
    small_capacity_ = static_cast<int64_t>(static_cast<double>(capacity) * small_ratio);
    main_capacity_ = capacity - small_capacity_;
    ghost_capacity_ = ghost_capacity("s3fifo", capacity, ghost_ratio);
  }
  const char* name() const override { return warmup_to_main_ ? "s3fifo" : "s3fifo-v0"; }
  void reserve() override { s_.reserve(static_cast<size_t>(capacity_ + ghost_capacity_)); }

  size_t size() const override { return small_.size() + main_.size() + small_pinned_ + main_pinned_; }
  size_t num_pinned() const override { return small_pinned_ + main_pinned_; }
  bool contains(Key key) const override { return find_resident(key) >= 0; }
  void prefetch(Key key) const override { s_.index.prefetch(key); }
  bool is_pinned(Key key) const override {
    int32_t i = find_resident(key);
    return i >= 0 && s_.nodes[i].pinned;
  }
  bool in_ghost(Key key) const {
    int32_t i = s_.index.find(key);
    return i >= 0 && s_.nodes[i].where == kGhost;
  }
  size_t ghost_size() const { return ghost_.size(); }
  // A resident key's segment (true: S) and frequency, or false and -1 for another key.
  std::pair<bool, int> segment(Key key) const {
    int32_t i = find_resident(key);
    if (i < 0) return {false, -1};
    return {s_.nodes[i].where == kSmall, s_.nodes[i].freq};
  }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const {
    int32_t i = s_.index.find(key);
    return (i >= 0 && s_.nodes[i].where <= kMain) ? i : -1;
  }
  void hit_node(int32_t i) {
    uint8_t& f = s_.nodes[i].freq;
    if (f < 255) ++f;
  }

  // A ghost hit leaves the ghost now (libCacheSim's S3FIFO_find), so the evictions that follow see
  // the ghost without it; the key waits in `pending_` until its insert puts it in M.
  void miss(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0 || s_.nodes[i].where != kGhost) return;
    ghost_.unlink(s_.nodes, i);
    s_.nodes[i].where = kPending;
    pending_.push_head(s_.nodes, i);
    if (static_cast<int64_t>(pending_.size()) > pending_bound(capacity_ + ghost_capacity_)) s_.drop(s_.pop_tail(pending_));
  }

  Key evict() override {
    if (small_.empty() && main_.empty()) no_evictable();
    has_evicted_ = true;
    while (true) {
      int64_t main_resident = static_cast<int64_t>(main_.size() + main_pinned_);
      if (!main_.empty() && (main_resident > main_capacity_ || small_.empty())) return evict_main();
      if (small_.empty()) return evict_main();
      Key victim;
      if (evict_small(victim)) return victim;
    }
  }

  void insert(Key key, bool pinned) override {
    int32_t i = s_.index.find(key);
    bool to_main = false;
    if (i >= 0) {
      Node& n = s_.nodes[i];
      if (n.where <= kMain) bad_key("insert of a resident key", key);
      (n.where == kGhost ? ghost_ : pending_).unlink(s_.nodes, i);
      to_main = true;
    } else {
      i = s_.add(key, kSmall);
      to_main = warmup_to_main_ && !has_evicted_ &&
                static_cast<int64_t>(small_.size() + small_pinned_) >= small_capacity_;
    }
    Node& n = s_.nodes[i];
    n.where = to_main ? kMain : kSmall;
    n.freq = 0;
    place(i, pinned);
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    Node& n = s_.nodes[i];
    if (n.pinned) return;
    queue(n.where).unlink(s_.nodes, i);
    n.pinned = 1;
    ++pinned_count(n.where);
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    Node& n = s_.nodes[i];
    if (!n.pinned) bad_key("unpin of an unpinned key", key);
    n.pinned = 0;
    --pinned_count(n.where);
    queue(n.where).push_head(s_.nodes, i);
  }
  void remove(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.pinned) --pinned_count(n.where);
    else queue(n.where).unlink(s_.nodes, i);
    s_.drop(i);
  }
  // A key in S enters G as evict_small's victim does (G's oldest goes when G is full); one in M goes.
  // Not an eviction for the warm-up rule (has_evicted_ stays): the host chose the key, not capacity.
  void evict_key(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.pinned) {
      n.pinned = 0;
      --pinned_count(n.where);
    } else {
      queue(n.where).unlink(s_.nodes, i);
    }
    if (n.where == kSmall) to_ghost(i);
    else s_.drop(i);
  }
  // Inherited blocks go to M, oldest first, freq 0.
  void adopt(Key key) override {
    if (s_.index.find(key) >= 0) bad_key("adopt of a known key", key);
    int32_t i = s_.add(key, kMain);
    main_.push_head(s_.nodes, i);
  }
  void reset() override {
    s_.clear();
    small_.clear();
    main_.clear();
    ghost_.clear();
    pending_.clear();
    small_pinned_ = main_pinned_ = 0;
    has_evicted_ = false;
  }
  // evict()'s order if nothing else happened: its rules run on a dry run of S and M (M's
  // re-inserted and promoted nodes after its own) and of M's resident count; no node changes.
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    DryQueue small(s_.nodes, small_), main(s_.nodes, main_);
    int64_t main_resident = static_cast<int64_t>(main_.size() + main_pinned_);
    while (out.size() < limit && !(small.empty() && main.empty())) {
      if (!main.empty() && (main_resident > main_capacity_ || small.empty())) {  // evict_main
        while (true) {
          const DryQueue::Entry e = main.pop();
          const int freq = e.count >= 0 ? e.count : s_.nodes[e.node].freq;
          if (freq < 1) {
            out.push_back(s_.nodes[e.node].key);
            --main_resident;
            break;
          }
          main.push(e.node, std::min(freq, freq_cap_) - 1);
        }
        continue;
      }
      while (!small.empty()) {  // evict_small
        const int32_t i = small.pop().node;
        if (s_.nodes[i].freq >= promote_threshold_) {
          main.push(i, 0);
          ++main_resident;
          continue;
        }
        out.push_back(s_.nodes[i].key);
        break;
      }
    }
  }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override { return s_.bytes(); }
  WAKMAN_DRIVEN(S3FIFO)

  double small_ratio_, ghost_ratio_;
  int promote_threshold_, freq_cap_;
  bool warmup_to_main_;
  int64_t small_capacity_ = 0, main_capacity_ = 0, ghost_capacity_ = 0;

 private:
  List& queue(uint8_t where) { return where == kSmall ? small_ : main_; }
  size_t& pinned_count(uint8_t where) { return where == kSmall ? small_pinned_ : main_pinned_; }
  int32_t resident(Key key) const {
    int32_t i = find_resident(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }
  void place(int32_t i, bool pinned) {
    Node& n = s_.nodes[i];
    if (pinned) {
      n.pinned = 1;
      ++pinned_count(n.where);
    } else {
      queue(n.where).push_head(s_.nodes, i);
    }
  }

  // S's oldest: promoted to M (freq 0) when freq >= threshold, else evicted (its key enters G).
  // False when promotions emptied S.
  bool evict_small(Key& victim) {
    while (!small_.empty()) {
      int32_t i = s_.pop_tail(small_);
      Node& n = s_.nodes[i];
      if (n.freq >= promote_threshold_) {
        n.where = kMain;
        n.freq = 0;
        main_.push_head(s_.nodes, i);
        continue;
      }
      victim = n.key;
      to_ghost(i);
      return true;
    }
    return false;
  }
  // Node i, off every queue, lives on as G's newest entry, freq 0 (G's oldest goes when G is full);
  // without a ghost queue it goes.
  void to_ghost(int32_t i) {
    s_.nodes[i].freq = 0;
    s_.to_ghost(ghost_, ghost_capacity_, i, kGhost);
  }

  Key evict_main() {
    while (true) {
      int32_t i = s_.pop_tail(main_);
      Node& n = s_.nodes[i];
      if (n.freq < 1) {
        Key key = n.key;
        s_.drop(i);
        return key;
      }
      n.freq = static_cast<uint8_t>(std::min<int>(n.freq, freq_cap_) - 1);
      main_.push_head(s_.nodes, i);
    }
  }

  Store s_;
  List small_, main_, ghost_, pending_;
  size_t small_pinned_ = 0, main_pinned_ = 0;
  bool has_evicted_ = false;
};

}  // namespace wakman
