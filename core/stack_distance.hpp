// TraceScan: one pass over a trace's block keys, in access order, for wakman.traces.stats.
//
// Per access it keeps, in O(distinct keys) memory (never O(accesses)):
//   - the distinct count and the accesses whose key was seen before (reuses: infinite-cache hits);
//   - Mattson's stack distance of every reuse: the number of distinct other keys touched since the
//     key's previous access. LRU with C blocks hits exactly the accesses with distance < C, so
//     distance_histogram()[d] summed over d < C is LRU's hits at capacity C, for every C at once;
//   - reuse times (seconds since the key's previous access), for the whole trace and per label, in
//     ReuseHistogram (bounded precision, stated there).
//
// Stack distances use a Fenwick tree over access positions 1..cap: position p holds 1 iff some key's
// last access is at p. A reuse of a key last accessed at p has distance distinct - prefix(p). When
// positions run out, compaction renumbers the live last positions 1..D in order (D = distinct keys)
// and rebuilds the tree in O(cap); cap is then max(min_positions, 2 D + 2), so at least D + 2 fresh
// positions follow and compaction costs O(1) per access, amortised.
// Invariants: tree prefix(cap) == distinct(); at_[p] == s >= 0 iff last_pos_[s] == p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "key_map.hpp"

namespace wakman {

// A histogram of non-negative durations (seconds) with bounded relative error, for percentiles.
//
// Bins: one for t < 2^-20 s (about 1 us; negative values land here too) standing for 0, then 2048
// equal bins per octave [2^e, 2^(e+1)) for e = -20 .. 43 (the last bin also takes t >= 2^44 s), read
// straight from the double's exponent and top 11 mantissa bits. A bin stands for the mean of its
// values (kept as a sum of offsets from the bin's low edge): exact when the bin holds one distinct
// value (common: trace clocks are discrete), and always within 2^-11 (0.049 %) of every value in the
// bin. percentile(q) is numpy's default ("linear") rule applied to those stand-ins, clamped to the
// exact min and max, so for values >= 2^-20 s it is within 0.049 % of np.percentile of the exact
// values (within 2^-20 s absolute below that). Memory: 2 x 131,073 counters (2 MiB), whatever the
// number of values.
class ReuseHistogram {
 public:
  static constexpr int kSubBits = 11;
  static constexpr int kMinExp = -20;
  static constexpr int kOctaves = 64;
  static constexpr size_t kBins = 1 + (static_cast<size_t>(kOctaves) << kSubBits);

  ReuseHistogram() : counts_(kBins, 0), offsets_(kBins, 0.0) {}

  void add(double t) {
    const size_t i = bin(t);
    ++counts_[i];
    if (i > 0) offsets_[i] += t - low(i);
    ++n_;
    if (t < min_) min_ = t;
    if (t > max_) max_ = t;
  }

  int64_t count() const { return n_; }
  double min() const { return n_ ? min_ : std::numeric_limits<double>::quiet_NaN(); }
  double max() const { return n_ ? max_ : std::numeric_limits<double>::quiet_NaN(); }

  // q in [0, 100]; NaN when empty.
  double percentile(double q) const {
    if (n_ == 0) return std::numeric_limits<double>::quiet_NaN();
    if (!(q >= 0.0 && q <= 100.0)) throw std::invalid_argument("percentile: q must lie in [0, 100]");
    const double h = static_cast<double>(n_ - 1) * (q / 100.0);
    const int64_t lo = static_cast<int64_t>(std::floor(h));
    const double frac = h - static_cast<double>(lo);
    const int64_t hi = std::min(lo + 1, n_ - 1);
    double v_lo = 0.0, v_hi = 0.0;
    int64_t seen = 0;
    bool have_lo = false;
    for (size_t i = 0; i < kBins; ++i) {
      if (counts_[i] == 0) continue;
      seen += counts_[i];
      if (!have_lo && seen > lo) {
        v_lo = value(i);
        have_lo = true;
      }
      if (seen > hi) {
        v_hi = value(i);
        break;
      }
    }
    const double v = v_lo + frac * (v_hi - v_lo);
    return std::min(std::max(v, min_), max_);
  }

  // The stand-in value of bin i: the mean of its values (0 for bin 0).
  double value(size_t i) const {
    if (i == 0 || counts_[i] == 0) return 0.0;
    return low(i) + offsets_[i] / static_cast<double>(counts_[i]);
  }

  // The low edge of bin i >= 1.
  static double low(size_t i) {
    const size_t k = i - 1;
    const int e = kMinExp + static_cast<int>(k >> kSubBits);
    const double sub = static_cast<double>(k & ((size_t{1} << kSubBits) - 1));
    return std::ldexp(1.0 + sub / static_cast<double>(size_t{1} << kSubBits), e);
  }

  static size_t bin(double t) {
    if (!(t >= kLow)) return 0;  // also NaN and negatives
    uint64_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    if (e >= kMinExp + kOctaves) return kBins - 1;
    const size_t sub = static_cast<size_t>((bits >> (52 - kSubBits)) & ((uint64_t{1} << kSubBits) - 1));
    return 1 + (static_cast<size_t>(e - kMinExp) << kSubBits) + sub;
  }

  size_t bytes() const { return counts_.capacity() * sizeof(int64_t) + offsets_.capacity() * sizeof(double); }

 private:
  static constexpr double kLow = 1.0 / static_cast<double>(uint64_t{1} << -kMinExp);
  std::vector<int64_t> counts_;
  std::vector<double> offsets_;  // [i] sum over bin i's values of (value - low(i))
  int64_t n_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
};

class TraceScan {
 public:
  // stack_distances=false skips the Fenwick tree (reuse counts and times only). min_positions is the
  // smallest position range (>= 2); small values force frequent compaction (tests).
  explicit TraceScan(bool stack_distances = true, uint32_t min_positions = 1u << 16)
      : distances_(stack_distances), min_positions_(std::max<uint32_t>(min_positions, 2)) {
    if (distances_) resize_positions(min_positions_);
  }
  TraceScan(const TraceScan&) = delete;
  TraceScan& operator=(const TraceScan&) = delete;

  // Accesses keys[0..n) in order, all at time t (s); label >= 0 also files their reuse times under
  // that label (labels are small dense integers chosen by the caller). Returns the reuses among them.
  int64_t scan(const Key* keys, size_t n, double t, int32_t label) {
    ReuseHistogram* by_label = label >= 0 ? &label_histogram(label) : nullptr;
    // Look every key up first. Slots follow first-access order, so a prefix re-read in order finds
    // each key in the slot after the previous key's: that guess is checked before hashing.
    slots_.resize(n);
    const size_t known = keys_.size();
    int32_t guess = -1;
    for (size_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(guess) + 1;
      guess = guess >= 0 && g < known && keys_[g] == keys[i] ? static_cast<int32_t>(g) : index_.find(keys[i]);
      slots_[i] = guess;
    }
    int64_t reuses = 0;
    for (size_t i = 0; i < n; ++i) {
      const Key key = keys[i];
      int32_t s = slots_[i];
      if (s < 0) s = index_.find(key);  // a key new to this batch may have been inserted just before
      if (s < 0) {
        if (last_t_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
          throw std::length_error("TraceScan: more than 2^31 - 1 distinct keys");
        s = static_cast<int32_t>(last_t_.size());
        index_.insert(key, s);
        keys_.push_back(key);
        last_t_.push_back(t);
        if (distances_) {
          last_pos_.push_back(0);
          place(s);
        }
        continue;
      }
      ++reuses;
      const double dt = t - last_t_[s];
      last_t_[s] = t;
      all_.add(dt);
      if (by_label) by_label->add(dt);
      if (distances_) {
        const uint32_t p = last_pos_[s];
        // A key whose last access directly follows the previous reuse's has the same prefix count
        // (that key moved past it); prefix-chained traces re-read whole runs in order.
        const int32_t before = run_pos_ > 0 && p == run_pos_ + 1 ? run_prefix_ : prefix(p);
        run_pos_ = p;
        run_prefix_ = before;
        const size_t d = last_t_.size() - static_cast<size_t>(before);
        if (d >= hist_.size()) hist_.resize(std::max(d + 1, 2 * hist_.size()), 0);
        ++hist_[d];
        at_[p] = -1;
        if (next_ > cap_) {
          add(p, -1);
          place(s);  // compacts
        } else {
          const uint32_t r = next_++;
          move(p, r);
          at_[r] = s;
          last_pos_[s] = r;
        }
      }
    }
    accesses_ += static_cast<int64_t>(n);
    reuses_ += reuses;
    return reuses;
  }

  // vLLM's prefix lookup under LRU at every capacity at once, changing nothing: keys[0..n) in prefix
  // order, each key's stack distance now (the distinct other keys touched since its last access),
  // stopping at the first key never seen. LRU with C blocks holds a key iff its distance is < C, so
  // the first-miss rule hits block j iff the running max of blocks 0..j's distances is < C; that max
  // is filed in prefix_histogram() with `weight` (a block's tokens, say). Returns the blocks looked at
  // before the first unseen key (what an infinite cache of every accessed key would hit).
  size_t lookup(const Key* keys, size_t n, int64_t weight) {
    if (!distances_) throw std::logic_error("TraceScan.lookup needs stack_distances=True");
    const size_t known = keys_.size();
    size_t worst = 0;
    int32_t guess = -1;
    for (size_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(guess) + 1;
      guess = guess >= 0 && g < known && keys_[g] == keys[i] ? static_cast<int32_t>(g) : index_.find(keys[i]);
      if (guess < 0) return i;
      const size_t d = known - static_cast<size_t>(prefix(last_pos_[guess]));
      if (d > worst) worst = d;
      if (worst >= prefix_hist_.size()) prefix_hist_.resize(std::max(worst + 1, 2 * prefix_hist_.size()), 0);
      prefix_hist_[worst] += weight;
    }
    return n;
  }

  // [d] = the weight of looked-up blocks whose running max distance is d, d = 0 .. distinct() - 1.
  std::vector<int64_t> prefix_histogram() const {
    std::vector<int64_t> out(distinct(), 0);
    std::copy(prefix_hist_.begin(), prefix_hist_.begin() + std::min(prefix_hist_.size(), out.size()), out.begin());
    return out;
  }

  size_t distinct() const { return last_t_.size(); }
  int64_t accesses() const { return accesses_; }
  int64_t reuses() const { return reuses_; }
  int64_t compactions() const { return compactions_; }
  bool has_distances() const { return distances_; }

  // [d] = reuses with stack distance d, d = 0 .. distinct() - 1 (zeros past the largest seen).
  std::vector<int64_t> distance_histogram() const {
    std::vector<int64_t> out(distinct(), 0);
    std::copy(hist_.begin(), hist_.begin() + std::min(hist_.size(), out.size()), out.begin());
    return out;
  }

  // Reuse times of every access (label -1) or of one label's accesses (empty if never seen).
  const ReuseHistogram& reuse_times(int32_t label) const {
    static const ReuseHistogram empty;
    if (label < 0) return all_;
    if (static_cast<size_t>(label) < labels_.size() && labels_[label]) return *labels_[label];
    return empty;
  }

  size_t bytes() const {
    size_t b = index_.bytes() + keys_.capacity() * sizeof(Key) + last_t_.capacity() * sizeof(double) + last_pos_.capacity() * sizeof(uint32_t) +
               tree_.capacity() * sizeof(int32_t) + at_.capacity() * sizeof(int32_t) +
               hist_.capacity() * sizeof(int64_t) + prefix_hist_.capacity() * sizeof(int64_t) + all_.bytes();
    for (const auto& h : labels_)
      if (h) b += h->bytes();
    return b;
  }

 private:
  ReuseHistogram& label_histogram(int32_t label) {
    if (static_cast<size_t>(label) >= labels_.size()) labels_.resize(static_cast<size_t>(label) + 1);
    if (!labels_[label]) labels_[label] = std::make_unique<ReuseHistogram>();
    return *labels_[label];
  }

  // Gives slot s the next position (its access is the newest).
  void place(int32_t s) {
    if (next_ > cap_) compact();
    const uint32_t p = next_++;
    add(p, 1);
    at_[p] = s;
    last_pos_[s] = p;
  }

  int32_t prefix(uint32_t p) const {
    int32_t total = 0;
    for (; p > 0; p &= p - 1) total += tree_[p];
    return total;
  }

  void add(uint32_t p, int32_t delta) {
    for (uint64_t q = p; q <= cap_; q += q & (~q + 1)) tree_[q] += delta;
  }

  // Moves a 1 from position p to position r > p: the two update paths cancel from where they meet.
  void move(uint32_t p, uint32_t r) {
    uint64_t q = p, u = r;
    while (q != u && (q <= cap_ || u <= cap_)) {
      if (q < u) {
        tree_[q] -= 1;
        q += q & (~q + 1);
      } else {
        tree_[u] += 1;
        u += u & (~u + 1);
      }
    }
  }

  void resize_positions(uint32_t cap) {
    cap_ = cap;
    tree_.assign(static_cast<size_t>(cap) + 1, 0);
    at_.resize(static_cast<size_t>(cap) + 1, -1);
  }

  // Renumbers the live last positions 1..D in access order and rebuilds the tree in O(cap).
  void compact() {
    uint32_t d = 0;
    for (uint32_t p = 1; p < next_; ++p) {
      const int32_t s = at_[p];
      if (s < 0) continue;
      at_[++d] = s;
      last_pos_[s] = d;
    }
    std::fill(at_.begin() + d + 1, at_.end(), -1);
    const uint64_t want = std::max<uint64_t>(min_positions_, 2 * static_cast<uint64_t>(d) + 2);
    if (want > std::numeric_limits<uint32_t>::max() - 1) throw std::length_error("TraceScan: too many keys");
    resize_positions(std::max(cap_, static_cast<uint32_t>(want)));
    // Linear build: every position 1..d holds 1; push each node's sum to its parent.
    for (uint32_t p = 1; p <= cap_; ++p) {
      if (p <= d) tree_[p] += 1;
      const uint64_t parent = static_cast<uint64_t>(p) + (p & (~p + 1));
      if (parent <= cap_) tree_[parent] += tree_[p];
    }
    next_ = d + 1;
    run_pos_ = 0;  // positions were renumbered
    ++compactions_;
  }

  bool distances_;
  uint32_t min_positions_;
  KeyMap index_{8, KeyMap::Fill::kDense};  // key -> slot (slots dense, in first-access order)
  std::vector<int32_t> slots_;      // scratch: the slots of one batch's keys
  std::vector<Key> keys_;           // [slot] its key
  std::vector<double> last_t_;      // [slot] time of the last access (s)
  std::vector<uint32_t> last_pos_;  // [slot] position of the last access (with stack distances)
  std::vector<int32_t> tree_;       // Fenwick tree over positions 1..cap_
  std::vector<int32_t> at_;         // [position] slot whose last access is there, or -1
  uint32_t cap_ = 0;
  uint32_t next_ = 1;               // the next free position
  uint32_t run_pos_ = 0;            // the previous reuse's old position (0: none) ...
  int32_t run_prefix_ = 0;          // ... and its prefix count before it moved
  std::vector<int64_t> hist_;       // [d] reuses with stack distance d
  std::vector<int64_t> prefix_hist_;  // [d] lookup weight whose running max distance is d
  ReuseHistogram all_;
  std::vector<std::unique_ptr<ReuseHistogram>> labels_;
  int64_t accesses_ = 0;
  int64_t reuses_ = 0;
  int64_t compactions_ = 0;
};

}  // namespace wakman
