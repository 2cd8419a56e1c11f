// vLLM's first-miss hit rule over the core: a lookup walks a request's block keys in prefix order and
// stops at the first key that is not resident. The caller passes limit = the blocks that may hit
// (full prompt blocks, at most prompt - 1 tokens: wakman.traces.Request.max_hit_blocks).
#pragma once

#include <cstddef>

#include "policy.hpp"

namespace wakman {

inline size_t cached_prefix(const Policy& p, const Key* keys, size_t limit) {
  size_t n = 0;
  while (n < limit && p.contains(keys[n])) ++n;
  return n;
}

}  // namespace wakman
