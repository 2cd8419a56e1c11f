// The policy key of a vLLM hash key: the 64-bit key the core's policies take for a block vLLM caches.
//
// A vLLM hash key is a BlockHash's bytes, then the KV-cache group id as 4 big-endian bytes
// (BlockHashWithGroupId, and the CPU offload tier's OffloadKey alike). Its policy key chains
// splitmix64 over the BlockHash's 8-byte big-endian words (the last one shorter where the length is
// not a multiple of 8), then over group | len(BlockHash) << 32: every byte counts, and the key is the
// same in every process (no PYTHONHASHSEED). Python's wakman.vllm_plugin.free_queue.policy_key
// states the same rule; the binding layer only reads the bytes out of Python objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "key_map.hpp"

namespace wakman {

// The `len` (<= 8) bytes at p as a big-endian number.
inline Key big_endian(const char* p, size_t len) {
  Key word = 0;
  for (size_t j = 0; j < len; ++j) word = (word << 8) | static_cast<unsigned char>(p[j]);
  return word;
}

// big_endian(p, 8) with one load where the compiler says how to swap the bytes.
inline Key big_endian_word(const char* p) {
#if defined(__BYTE_ORDER__) && (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ || __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
  uint64_t w;
  std::memcpy(&w, p, 8);
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? __builtin_bswap64(w) : w;
#else
  return big_endian(p, 8);
#endif
}

// The policy key of the BlockHash of `n` bytes at `hash` in KV-cache group `group`.
inline Key block_hash_key(const char* hash, size_t n, uint32_t group) {
  Key k = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) k = splitmix64(k ^ big_endian_word(hash + i));
  if (i < n) k = splitmix64(k ^ big_endian(hash + i, n - i));  // the last, shorter word
  return splitmix64(k ^ (static_cast<Key>(group) | (static_cast<Key>(n) << 32)));
}

// The policy key of a whole hash key's `n` bytes (BlockHash, then the group id's 4 bytes); fewer than
// 4 bytes: a BlockHash of group 0.
inline Key hash_key_bytes(const char* data, size_t n) {
  if (n < 4) return block_hash_key(data, n, 0);
  const uint32_t group = static_cast<uint32_t>(big_endian(data + n - 4, 4));
  return block_hash_key(data, n - 4, group);
}

}  // namespace wakman
