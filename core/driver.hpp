// The shared drivers of the protocol: one loop for every policy, no policy has a fast path of its own.
//
// access(): libCacheSim's get(): find; on a hit, hit(); on a miss, miss() (a ghost is seen before
// anything is evicted), evict() while the cache is full, then insert(). Instantiated per final policy
// class, so the calls inline.
// replay_request(): one request, vLLM's way (Policy::replay_request); the same access() per block.
// replay() announces each key kPrefetchAhead keys before its access (Policy::prefetch), so index
// lookups overlap instead of waiting on memory one after another; the results are the same.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "policy.hpp"
#include "prefix.hpp"

namespace wakman {

template <class P>
inline bool drive_access(P& p, Key key) {
  p.begin_access(key);
  int32_t node = p.find_resident(key);
  if (node >= 0) {
    p.hit_node(node);
    return true;
  }
  p.miss(key);
  const size_t bound = static_cast<size_t>(p.bound());
  while (p.size() >= bound) p.evict();
  p.insert(key, false);
  return false;
}

template <class P>
inline int64_t drive_replay(P& p, const Key* keys, size_t n) {
  int64_t hits = 0;
  visit_announced(keys, n, [&p](Key k) { p.prefetch(k); }, [&](Key k) { hits += drive_access(p, k); });
  return hits;
}

// Policy::replay_request for a final class P (prefix.hpp's first-miss rule, then drive_access).
template <class P>
inline RequestReplay drive_request(P& p, const Key* keys, size_t limit, size_t full, const Key* outputs,
                                   size_t num_outputs, double arrival_s) {
  p.on_request(keys, full, outputs, num_outputs, arrival_s);
  RequestReplay r{cached_prefix(p, keys, limit), full + num_outputs, 0};
  auto announce = [&p](Key k) { p.prefetch(k); };
  auto access = [&](Key k) { r.access_hits += drive_access(p, k); };
  visit_announced<true>(outputs, num_outputs, announce, access);  // deepest first: outputs, then the prompt
  visit_announced<true>(keys, full, announce, access);
  return r;
}

// Implements the driver entry points of Policy for a final class P, and hit_pin with one lookup (P's
// resident, hit_node and pin_node: hit and pin after the lookup).
#define WAKMAN_DRIVEN(P)                                                                         \
  void hit_pin(Key key, bool pin_too) override {                                                 \
    const int32_t i = resident(key);                                                             \
    hit_node(i);                                                                                 \
    if (pin_too) pin_node(i);                                                                    \
  }                                                                                              \
  int64_t replay(const Key* keys, size_t n) override { return drive_replay<P>(*this, keys, n); } \
  bool access(Key key) override { return drive_access<P>(*this, key); }                          \
  RequestReplay replay_request(const Key* keys, size_t limit, size_t full, const Key* outputs,   \
                               size_t num_outputs, double arrival_s) override {                  \
    return drive_request<P>(*this, keys, limit, full, outputs, num_outputs, arrival_s);          \
  }

}  // namespace wakman
