// KeyMap: the core's one hash index, a 64-bit block key -> int32 slot in a NodeArena.
//
// Open addressing with linear probing and backward-shift deletion (no tombstones), a power-of-two
// table kept at most a quarter full (Fill::kSparse: the policies' and pools' tables, bounded by a
// cache's capacity, where almost every probe ends at its first entry; measured on the Claude Code
// archive and the synthetic mixes, 10-25 % less time a block than at half full) while that table
// stays within kSparseEntries, at most half full beyond (a table that outgrows the CPU's caches
// waits on memory, and a bigger one waits longer: at 2 M blocks S3-FIFO and ARC replayed 18-24 %
// slower at a quarter), and at most half full always for Fill::kDense (the tables of every
// distinct key of a trace, where memory counts more). Lookups and
// inserts allocate nothing unless the table grows. The fill never changes what a lookup returns;
// for_each's order is the table's (callers that hand keys on sort them first: policy.hpp's handover).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace wakman {

using Key = uint64_t;

// The policy key of the n-th extra copy (n >= 1) of a block cached under `key` (vLLM keeps duplicate
// blocks): splitmix64 of the key and n. A copy takes the first of key, copy_key(key, 1), ... that no
// other copy holds, so a block re-duplicated after its copy was evicted meets that copy's ghost, in
// the simulator's pool and in the vLLM plugin's queue alike.
// splitmix64's output function of x + golden ratio: a well-mixed 64-bit hash of x.
inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline Key copy_key(Key key, uint64_t n) { return splitmix64(key + 0x9E3779B97F4A7C15ULL * n); }

// The policy key a new copy of `key` takes: the first of key, copy_key(key, 1), ... for which
// taken(k) is false (taken: some cached block holds k as its policy key).
template <class Taken>
Key free_copy_key(Key key, Taken&& taken) {
  Key k = key;
  for (uint64_t n = 1; taken(k); ++n) k = copy_key(key, n);
  return k;
}

class KeyMap {
 public:
  // At most 1/4 or 1/2 of the entries in use: the table doubles before an insert would pass that.
  enum class Fill : uint8_t { kSparse = 4, kDense = 2 };
  // The largest table kept a quarter full (entries; 32 MB of them).
  static constexpr size_t kSparseEntries = size_t{1} << 21;

  explicit KeyMap(size_t expected = 8, Fill fill = Fill::kSparse) : spread_(static_cast<size_t>(fill)) {
    rehash(expected);
  }

  // Starts loading the entry where `key`'s probe begins into the CPU's cache: a hint that changes
  // nothing (the drivers give it a few keys ahead, so the lookup does not wait on memory).
  void prefetch(Key key) const {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&table_[home(key)]);
#else
    (void)key;  // no portable prefetch: a no-op
#endif
  }

  // Slot of `key`, or -1 (an empty entry's value).
  int32_t find(Key key) const { return table_[probe(key)].value; }

  // The value stored for `key`, writable in place, or nullptr (valid until the next insert or erase).
  int32_t* value_of(Key key) {
    Entry& e = table_[probe(key)];
    return e.value < 0 ? nullptr : &e.value;
  }

  // Precondition: `key` is absent.
  void insert(Key key, int32_t value) {
    make_room_for_one();
    size_t i = home(key);
    while (table_[i].value >= 0) i = (i + 1) & mask_;
    table_[i] = {key, value};
    ++size_;
  }

  // The value stored for `key`, writable in place; an absent key is inserted with `value` first
  // (`inserted` says so) in one probe. `value` >= 0; the reference is valid until the next insert or erase.
  int32_t& find_or_insert(Key key, int32_t value, bool& inserted) {
    make_room_for_one();
    Entry& e = table_[probe(key)];
    inserted = e.value < 0;
    if (inserted) {
      e = {key, value};
      ++size_;
    }
    return e.value;
  }

  // Removes `key` if present; the entries after it shift back so no probe chain breaks.
  void erase(Key key) {
    size_t i = probe(key);
    if (table_[i].value < 0) return;
    size_t j = i;
    while (true) {
      j = (j + 1) & mask_;
      if (table_[j].value < 0) break;
      size_t h = home(table_[j].key);
      // The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
      bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
      if (!stays) {
        table_[i] = table_[j];
        i = j;
      }
    }
    table_[i].value = -1;
    --size_;
  }

  void clear() {
    for (Entry& e : table_) e.value = -1;
    size_ = 0;
  }

  // fn(key, value) for every entry, in table order.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const Entry& e : table_)
      if (e.value >= 0) fn(e.key, e.value);
  }

  size_t size() const { return size_; }
  size_t bytes() const { return table_.size() * sizeof(Entry); }

  // Room for `keys` keys: no insert grows the table until it holds more (a rehash now, if need be).
  void reserve(size_t keys) {
    if (keys * spread_for(keys) > table_.size()) rehash(std::max(keys, size_));
  }

 private:
  struct Entry {
    Key key;
    int32_t value;  // -1: empty
  };

  // The index of `key`'s entry, or of the empty entry where its probe sequence ends.
  size_t probe(Key key) const {
    size_t i = home(key);
    while (table_[i].value >= 0 && table_[i].key != key) i = (i + 1) & mask_;
    return i;
  }

  size_t home(Key key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }

  // The table doubles before one more key would pass the fill.
  void make_room_for_one() {
    if ((size_ + 1) * spread_for(size_ + 1) > table_.size()) rehash(size_ + 1);
  }

  // Table entries per key for a table holding `keys` keys: the fill's, unless a quarter-full table
  // would pass kSparseEntries.
  size_t spread_for(size_t keys) const { return spread_ * keys <= kSparseEntries ? spread_ : 2; }

  void rehash(size_t at_least) {
    size_t n = 16;
    while (n < spread_for(at_least) * at_least) n <<= 1;
    std::vector<Entry> fresh(n, Entry{0, -1});  // allocated first: a bad_alloc leaves the map as it was
    fresh.swap(table_);
    mask_ = n - 1;
    size_ = 0;
    for (const Entry& e : fresh)  // the old entries
      if (e.value >= 0) insert(e.key, e.value);
  }

  std::vector<Entry> table_;
  size_t spread_;  // table entries per key at the most (Fill)
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace wakman
