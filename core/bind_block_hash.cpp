// wakman._core.chain_blake2b64: the workload generator's fast-mode block hash chain; chain_ids: a
// trace's per-block content ids as prefix-chained keys (block_hash.hpp); splitmix64 of an array
// (key_map.hpp's mixer, for keys a reader makes up).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "bind_numpy.hpp"
#include "block_hash.hpp"

namespace nb = nanobind;
using namespace nb::literals;

void bind_block_hash(nb::module_& m) {
  m.def(
      "chain_blake2b64",
      [](nb::bytes parent, nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> tokens,
         size_t block_size) {
        if (parent.size() != 8) throw nb::value_error("chain_blake2b64: parent must be an 8-byte digest");
        if (block_size < 1) throw nb::value_error("chain_blake2b64: block_size must be at least 1 token");
        const size_t n = tokens.shape(0) / block_size;
        std::vector<uint64_t> keys(n);
        std::vector<uint8_t> scratch(8 + 4 * block_size);
        wakman::chain_blake2b64(reinterpret_cast<const uint8_t*>(parent.c_str()), tokens.data(), n, block_size,
                                keys.data(), scratch.data());
        return wakman::to_numpy(std::move(keys));
      },
      "parent"_a, "tokens"_a.noconvert(), "block_size"_a,
      "Keys (uint64) of the full blocks of tokens (int32), each block's 8-byte BLAKE2b digest taken over the "
      "previous digest (parent for the first) and the block's token bytes; a key is its digest read "
      "big-endian. The chain's last digest is the last key's 8 big-endian bytes.");
  m.def(
      "chain_ids",
      [](nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> ids) {
        const size_t n = ids.shape(0);
        std::vector<uint64_t> keys(n);
        wakman::chain_ids(ids.data(), n, keys.data());
        return wakman::to_numpy(std::move(keys));
      },
      "ids"_a.noconvert(),
      "Prefix-chained keys (uint64) of per-block content ids (uint64): keys[i] = splitmix64(keys[i-1] ^ "
      "splitmix64(ids[i])), keys[-1] = 0x6B6579636861696E; an id after two different prefixes gets two keys.");
  m.def(
      "splitmix64",
      [](nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> values) {
        const size_t n = values.shape(0);
        std::vector<uint64_t> out(n);
        for (size_t i = 0; i < n; ++i) out[i] = wakman::splitmix64(values.data()[i]);
        return wakman::to_numpy(std::move(out));
      },
      "values"_a.noconvert(), "splitmix64 (core/key_map.hpp) of each uint64 value: a bijection of 64-bit integers.");
}
