// The workload generator's chained block hash in fast mode (wakman.workload.hashing): block i's hash
// is BLAKE2b with an 8-byte digest (RFC 7693, unkeyed) of parent || the block's token ids as int32 in
// the machine's byte order (numpy's tobytes()), parent being block i-1's hash, or the chain's
// none-hash for block 0. The trace key is that digest read as a big-endian 64-bit integer (vLLM's
// external form of a hash). One compression per 128 bytes of input (a 16-token block is one).
// The generator's per-block loop; Python's hashlib.blake2b is its reference in the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "key_map.hpp"

namespace wakman {

class Blake2b {
 public:
  // BLAKE2b-(8 * out_len) of data[0:len] into out[0:out_len]; out_len in 1..64, no key.
  static void hash(const uint8_t* data, size_t len, uint8_t* out, size_t out_len) {
    uint64_t h[8];
    for (int i = 0; i < 8; ++i) h[i] = kIv[i];
    h[0] ^= 0x01010000ULL ^ static_cast<uint64_t>(out_len);
    uint64_t counted = 0;
    while (len > 128) {  // every block but the last
      counted += 128;
      compress(h, data, counted, false);
      data += 128;
      len -= 128;
    }
    uint8_t last[128] = {};
    std::memcpy(last, data, len);
    compress(h, last, counted + len, true);
    for (size_t i = 0; i < out_len; ++i) out[i] = static_cast<uint8_t>(h[i / 8] >> (8 * (i % 8)));
  }

 private:
  static constexpr uint64_t kIv[8] = {0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
                                      0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
                                      0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL};
  static constexpr uint8_t kSigma[12][16] = {
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
      {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
      {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
      {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
      {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

  static uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }
  static uint64_t load64(const uint8_t* p) {
    uint64_t x;
    std::memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);  // BLAKE2b reads its message words little-endian
#endif
    return x;
  }
  static void mix(uint64_t* v, int a, int b, int c, int d, uint64_t x, uint64_t y) {
    v[a] = v[a] + v[b] + x;
    v[d] = rotr(v[d] ^ v[a], 32);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 24);
    v[a] = v[a] + v[b] + y;
    v[d] = rotr(v[d] ^ v[a], 16);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 63);
  }
  // Round r of F, its message schedule a compile-time constant (the rounds unroll into straight code).
  template <int r>
  static void round(uint64_t* v, const uint64_t* m) {
    constexpr const uint8_t* s = kSigma[r];
    mix(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
    mix(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
    mix(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
    mix(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
    mix(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
    mix(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
    mix(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
    mix(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  // RFC 7693's F: `counted` is the bytes hashed so far including this block (< 2^64 here).
  static void compress(uint64_t* h, const uint8_t* block, uint64_t counted, bool last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; ++i) {
      v[i] = h[i];
      v[i + 8] = kIv[i];
    }
    v[12] ^= counted;
    if (last) v[14] = ~v[14];
    for (int i = 0; i < 16; ++i) m[i] = load64(block + 8 * i);
    round<0>(v, m);
    round<1>(v, m);
    round<2>(v, m);
    round<3>(v, m);
    round<4>(v, m);
    round<5>(v, m);
    round<6>(v, m);
    round<7>(v, m);
    round<8>(v, m);
    round<9>(v, m);
    round<10>(v, m);
    round<11>(v, m);
    for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
  }
};

// The trace key of an 8-byte digest: its bytes read big-endian.
inline uint64_t digest_key(const uint8_t* digest) {
  uint64_t k = 0;
  for (int i = 0; i < 8; ++i) k = (k << 8) | digest[i];
  return k;
}

// Chains `num_blocks` blocks of `block_size` tokens each (tokens[0 : num_blocks * block_size]) on the
// 8-byte `parent` digest: keys[i] = the trace key of block i's digest. `scratch` holds at least
// 8 + 4 * block_size bytes. The last digest is the big-endian bytes of keys[num_blocks - 1].
inline void chain_blake2b64(const uint8_t* parent, const int32_t* tokens, size_t num_blocks, size_t block_size,
                            uint64_t* keys, uint8_t* scratch) {
  const size_t token_bytes = 4 * block_size;
  std::memcpy(scratch, parent, 8);
  for (size_t i = 0; i < num_blocks; ++i) {
    std::memcpy(scratch + 8, tokens + i * block_size, token_bytes);
    uint8_t digest[8];
    Blake2b::hash(scratch, 8 + token_bytes, digest, 8);
    keys[i] = digest_key(digest);
    std::memcpy(scratch, digest, 8);
  }
}

// A trace's per-block content ids (each names one block's tokens alone, as Bailian's salted SipHash
// of each 16-token block does) as prefix-chained keys, vLLM's rule that a block's key stands for its
// whole prefix: keys[i] = splitmix64(keys[i - 1] ^ splitmix64(ids[i])), keys[-1] = kIdChainSeed.
// After one parent, distinct ids give distinct keys (splitmix64 is a bijection); ids that already
// stand for their prefix (no id after two different prefixes) keep every equality and inequality.
inline constexpr uint64_t kIdChainSeed = 0x6B6579636861696EULL;  // "keychain"
inline void chain_ids(const uint64_t* ids, size_t n, uint64_t* keys) {
  uint64_t parent = kIdChainSeed;
  for (size_t i = 0; i < n; ++i) keys[i] = parent = splitmix64(parent ^ splitmix64(ids[i]));
}

}  // namespace wakman
