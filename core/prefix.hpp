// vLLM's first-miss hit rule over the core: a lookup walks a request's block keys in prefix order and
// stops at the first key that is not resident. The caller passes limit = the blocks that may hit
// (hit_limit below: full prompt blocks, at most prompt - 1 tokens).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "policy.hpp"

namespace wakman {

// Of a prompt of `tokens` tokens with `num_keys` block keys of `block_size` tokens: the blocks vLLM
// caches (only full blocks are hashed), and the blocks that may hit (full blocks covering at most
// tokens - 1 tokens: the last prompt token is always computed). Every caller's one rule (the serve
// loops here; Python's Request.full_blocks and max_hit_blocks through wakman._core). A block size
// below 1 is an invalid_argument (a ValueError in Python), never a division by zero.
inline int64_t checked_block_size(int64_t block_size) {
  if (block_size < 1) throw std::invalid_argument("block_size must be >= 1 tokens");
  return block_size;
}
inline int64_t full_blocks(int64_t num_keys, int64_t tokens, int64_t block_size) {
  return std::min(num_keys, tokens / checked_block_size(block_size));
}
inline int64_t hit_limit(int64_t num_keys, int64_t tokens, int64_t block_size) {
  return std::min(num_keys, (tokens - 1) / checked_block_size(block_size));
}

// A request's cacheable blocks in vLLM's release order, the order cache mode accesses them after its
// lookup: the outputs from the last, then keys[:full] from the last (deepest first, so the chain's
// root ends most recent). driver.hpp's drive_request visits the same order, announcing keys ahead.
template <class Fn>
inline void for_each_released(const Key* keys, size_t full, const Key* outputs, size_t num_outputs, Fn&& fn) {
  for (size_t i = num_outputs; i-- > 0;) fn(outputs[i]);
  for (size_t i = full; i-- > 0;) fn(keys[i]);
}

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
