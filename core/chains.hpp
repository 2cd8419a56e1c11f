// ChainParents: each cached block's previous block in its prefix chain, to count stranded blocks
// (cached, but unreachable by any lookup because an ancestor is not cached: the first-miss rule
// stops before them).
#pragma once

#include <cstdint>
#include <vector>

#include "key_map.hpp"
#include "policy.hpp"

namespace wakman {

class ChainParents {
 public:
  // chain[first_new:] were just cached after chain[first_new - 1] (or as roots): each key keeps the
  // first parent it was recorded with.
  void record(const Key* chain, size_t n, size_t first_new) {
    bool has_prev = first_new > 0;
    Key prev = has_prev ? chain[first_new - 1] : 0;
    for (size_t i = first_new; i < n; ++i) {
      Key key = chain[i];
      if (index_.find(key) < 0) {
        index_.insert(key, static_cast<int32_t>(parent_.size()));
        parent_.push_back(prev);
        has_parent_.push_back(has_prev);
      }
      prev = key;
      has_prev = true;
    }
  }

  // Keys resident in `cached` with an ancestor (through the recorded parents) that is not resident.
  size_t count_stranded(const Policy& cached) const {
    enum : uint8_t { kUnknown, kReachable, kStranded };
    std::vector<uint8_t> state(parent_.size(), kUnknown);
    std::vector<int32_t> path;
    size_t count = 0;
    index_.for_each([&](Key key, int32_t slot) {
      if (!cached.contains(key)) return;
      path.clear();
      uint8_t verdict = kReachable;
      int32_t s = slot;
      Key k = key;
      while (true) {
        if (state[s] != kUnknown) {
          verdict = state[s];
          break;
        }
        if (!cached.contains(k)) {
          verdict = kStranded;
          break;
        }
        path.push_back(s);
        if (!has_parent_[s]) break;  // a root: reachable
        k = parent_[s];
        s = index_.find(k);
        if (s < 0) break;  // a parent never recorded counts as a root
      }
      for (int32_t p : path) state[p] = verdict;
      count += verdict == kStranded;
    });
    return count;
  }

  size_t size() const { return parent_.size(); }

 private:
  KeyMap index_;
  std::vector<Key> parent_;
  std::vector<uint8_t> has_parent_;
};

}  // namespace wakman
