// wakman._core.TraceScan: the one-pass trace scan of core/stack_distance.hpp (stack distances, reuse
// counts and reuse times), fed one request's keys per call.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "bind_numpy.hpp"
#include "key_batch.hpp"
#include "prefix.hpp"
#include "stack_distance.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using wakman::ReuseHistogram;
using wakman::TraceScan;
using wakman::to_numpy;
using wakman::py::KeyBatch;

void bind_trace_scan(nb::module_& m) {
  nb::class_<TraceScan>(m, "TraceScan",
                        "One pass over a trace's block keys in access order: distinct keys, reuses, Mattson "
                        "stack distances (O(distinct) memory) and reuse-time histograms (core/stack_distance.hpp).")
      .def(nb::init<bool, uint32_t>(), "stack_distances"_a = true, "min_positions"_a = 1u << 16,
           "min_positions: the smallest Fenwick position range; small values force frequent compaction.")
      .def(
          "scan",
          [](TraceScan& s, nb::handle keys, double time_s, int32_t label) {
            KeyBatch batch(keys);
            return s.scan(batch.data(), batch.size(), time_s, label);
          },
          "keys"_a, "time_s"_a, "label"_a = -1,
          "Access keys in order at time_s (s), filing reuse times under label (>= 0) too; return the reuses "
          "(accesses whose key was seen before).")
      .def_prop_ro("distinct", &TraceScan::distinct, "Distinct keys seen.")
      .def_prop_ro("accesses", &TraceScan::accesses, "Keys scanned.")
      .def_prop_ro("reuses", &TraceScan::reuses, "Accesses whose key was seen before.")
      .def_prop_ro("compactions", &TraceScan::compactions, "Times the Fenwick positions were renumbered.")
      .def_prop_ro("memory_bytes", &TraceScan::bytes, "Bytes held by the scan's tables.")
      .def(
          "distance_histogram",
          [](const TraceScan& s) {
            if (!s.has_distances()) throw std::logic_error("TraceScan built with stack_distances=False");
            return to_numpy(s.distance_histogram());
          },
          "int64 array, [d] = reuses with stack distance d, d < distinct: LRU with C blocks hits the sum "
          "over d < C.")
      .def(
          "replay_request",
          [](TraceScan& s, nb::handle keys, size_t limit, size_t full, nb::handle outputs, double time_s,
             int64_t weight) {
            KeyBatch batch(keys), out(outputs);
            const size_t n = batch.size();
            const size_t hit = s.lookup(batch.data(), std::min(limit, n), weight);
            full = std::min(full, n);
            std::vector<wakman::Key> order;
            order.reserve(out.size() + full);
            wakman::for_each_released(batch.data(), full, out.data(), out.size(),
                                      [&order](wakman::Key k) { order.push_back(k); });
            s.scan(order.data(), order.size(), time_s, -1);
            return hit;
          },
          "keys"_a, "limit"_a, "full"_a, "outputs"_a, "time_s"_a, "weight"_a = 1,
          "One request as cache mode replays it (wakman.drivers.replay_request): the lookup of keys[:limit] "
          "filed in prefix_histogram() with weight per block, then outputs and keys[:full] accessed deepest "
          "first. Returns the blocks an infinite cache would hit.")
      .def(
          "prefix_histogram",
          [](const TraceScan& s) {
            if (!s.has_distances()) throw std::logic_error("TraceScan built with stack_distances=False");
            return to_numpy(s.prefix_histogram());
          },
          "int64 array, [d] = lookup weight (tokens) of blocks whose prefix's largest stack distance is d: "
          "LRU with C blocks hits the sum over d < C, vLLM's first-miss rule included.")
      .def(
          "reuse_count", [](const TraceScan& s, int32_t label) { return s.reuse_times(label).count(); },
          "label"_a = -1, "Reuse times recorded (all accesses for label -1).")
      .def(
          "reuse_percentiles",
          [](const TraceScan& s, const std::vector<double>& qs, int32_t label) {
            const ReuseHistogram& h = s.reuse_times(label);
            std::vector<double> out;
            out.reserve(qs.size());
            for (double q : qs) out.push_back(h.percentile(q));
            return out;
          },
          "qs"_a, "label"_a = -1,
          "Reuse-time percentiles (s), numpy's linear rule, each within 0.049 % (or 2**-20 s below that) of "
          "the exact value; NaN when none.");
}
