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
