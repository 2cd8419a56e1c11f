// vLLM's first-miss hit rule over the core: a lookup walks a request's block keys in prefix order and
// stops at the first key that is not resident. The caller passes limit = the blocks that may hit
// (full prompt blocks, at most prompt - 1 tokens: wakman.traces.Request.max_hit_blocks).
#pragma once

#include <algorithm>
#include <cstddef>

#include "policy.hpp"

namespace wakman {

// `cache` is anything with contains(key) and prefetch(key): a policy (plain caches), the serve-mode
// pool (its copies).
template <class Cache>
inline size_t cached_prefix(const Cache& cache, const Key* keys, size_t limit) {
  for (size_t i = 0; i < std::min(limit, kPrefetchAhead); ++i) cache.prefetch(keys[i]);
  size_t n = 0;
  while (n < limit && cache.contains(keys[n])) {
    if (n + kPrefetchAhead < limit) cache.prefetch(keys[n + kPrefetchAhead]);
    ++n;
  }
  return n;
}

}  // namespace wakman

namespace wakman {

// One request through a plain cache, vLLM's way (cache mode and the adaptive manager's shadows):
// the hit prefix by the first-miss rule, then every cacheable block accessed deepest first (outputs
// from the last, then the full prompt blocks from the last), as vLLM frees a request's blocks, so the
// chain's root ends most recent. The policy hears of the request first (Policy::on_request).
struct RequestReplay {
  size_t prefix_hits;  // blocks of the longest cached prefix of keys[:limit], looked up before any access
  size_t accessed;     // blocks accessed: full + outputs
  size_t access_hits;  // of those, found resident
};

inline RequestReplay replay_request(Policy& p, const Key* keys, size_t limit, size_t full, const Key* outputs,
                                    size_t num_outputs, double arrival_s) {
  p.on_request(keys, full, outputs, num_outputs, arrival_s);
  RequestReplay r{cached_prefix(p, keys, limit), full + num_outputs, 0};
  for (size_t i = 0; i < std::min(num_outputs, kPrefetchAhead); ++i) p.prefetch(outputs[num_outputs - 1 - i]);
  for (size_t i = num_outputs; i-- > 0;) {
    if (i >= kPrefetchAhead) p.prefetch(outputs[i - kPrefetchAhead]);
    r.access_hits += p.access(outputs[i]);
  }
  for (size_t i = 0; i < std::min(full, kPrefetchAhead); ++i) p.prefetch(keys[full - 1 - i]);
  for (size_t i = full; i-- > 0;) {
    if (i >= kPrefetchAhead) p.prefetch(keys[i - kPrefetchAhead]);
    r.access_hits += p.access(keys[i]);
  }
  return r;
}

}  // namespace wakman
