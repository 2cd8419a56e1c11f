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
  for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i) p.prefetch(keys[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) p.prefetch(keys[i + kPrefetchAhead]);
    hits += drive_access(p, keys[i]);
  }
  return hits;
}

// Policy::replay_request for a final class P (prefix.hpp's first-miss rule, then drive_access).
template <class P>
inline RequestReplay drive_request(P& p, const Key* keys, size_t limit, size_t full, const Key* outputs,
                                   size_t num_outputs, double arrival_s) {
  p.on_request(keys, full, outputs, num_outputs, arrival_s);
  RequestReplay r{cached_prefix(p, keys, limit), full + num_outputs, 0};
  for (size_t i = 0; i < std::min(num_outputs, kPrefetchAhead); ++i) p.prefetch(outputs[num_outputs - 1 - i]);
  for (size_t i = num_outputs; i-- > 0;) {
    if (i >= kPrefetchAhead) p.prefetch(outputs[i - kPrefetchAhead]);
    r.access_hits += drive_access(p, outputs[i]);
  }
  for (size_t i = 0; i < std::min(full, kPrefetchAhead); ++i) p.prefetch(keys[full - 1 - i]);
  for (size_t i = full; i-- > 0;) {
    if (i >= kPrefetchAhead) p.prefetch(keys[i - kPrefetchAhead]);
    r.access_hits += drive_access(p, keys[i]);
  }
  return r;
}

// Implements the driver entry points of Policy for a final class P.
#define WAKMAN_DRIVEN(P)                                                                         \
  int64_t replay(const Key* keys, size_t n) override { return drive_replay<P>(*this, keys, n); } \
  bool access(Key key) override { return drive_access<P>(*this, key); }                          \
  RequestReplay replay_request(const Key* keys, size_t limit, size_t full, const Key* outputs,   \
                               size_t num_outputs, double arrival_s) override {                  \
    return drive_request<P>(*this, keys, limit, full, outputs, num_outputs, arrival_s);          \
  }

}  // namespace wakman
