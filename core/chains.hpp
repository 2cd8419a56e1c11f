// StrandedCount: the stranded blocks of a plain cache at the end of a run (cache mode): resident keys
// that no lookup can reach, because in every request chain that holds them an earlier block is not
// resident (vLLM's first-miss rule stops before them). Each request's chain (its full prompt blocks,
// then its output blocks) is walked once after the run. Block keys are hashes of their prefix, so a
// key has the same ancestors in every chain; the "every chain" wording only fixes the count for a
// trace that breaks that. Memory: two key sets, each at most the resident keys (24 bytes a key at
// worst), whatever the trace's length.
#pragma once

#include <cstddef>

#include "key_map.hpp"
#include "policy.hpp"

namespace wakman {

class StrandedCount {
 public:
  // One chain: keys[:full], then outputs[:num_outputs], against `cached`'s residents now.
  void walk(const Policy& cached, const Key* keys, size_t full, const Key* outputs, size_t num_outputs) {
    bool reachable = true;
    for (size_t i = 0; i < full + num_outputs; ++i) {
      const Key key = i < full ? keys[i] : outputs[i - full];
      if (!cached.contains(key)) {
        reachable = false;
        continue;
      }
      KeyMap& into = reachable ? reachable_ : unreached_;
      if (into.find(key) < 0) into.insert(key, 0);
    }
  }

  // Resident keys seen after a non-resident block in some chain and at the head of none.
  size_t count() const {
    size_t n = 0;
    unreached_.for_each([&](Key key, int32_t) { n += reachable_.find(key) < 0; });
    return n;
  }

 private:
  KeyMap reachable_{8, KeyMap::Fill::kDense}, unreached_{8, KeyMap::Fill::kDense};
};

}  // namespace wakman
