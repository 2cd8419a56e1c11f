// The thin binding layer: wakman._core exposes the policies of core/policies/ to Python.
//
// Keys cross as Python ints taken modulo 2**64; a batch of keys is any iterable of ints, and a
// C-contiguous buffer of 8-byte integers (numpy uint64 or int64) is read in place (key_batch.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "chains.hpp"
#include "decayed_scores.hpp"
#include "driver.hpp"
#include "key_batch.hpp"
#include "policies/arc.hpp"
#include "policies/belady.hpp"
#include "policies/chain_lru.hpp"
#include "policies/recency.hpp"
#include "policies/s3fifo.hpp"
#include "policies/sieve.hpp"
#include "prefix.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace wakman;
using wakman::py::KeyBatch;
using wakman::py::to_key;

namespace {

nb::list key_list(const std::vector<Key>& keys) {
  nb::list out;
  for (Key k : keys) out.append(nb::steal(PyLong_FromUnsignedLongLong(k)));
  return out;
}

// Python's handle on a shared BeladyFuture.
struct FutureHandle {
  std::shared_ptr<const BeladyFuture> future;
  std::optional<bool> deepest_first;  // of_requests' order; unknown for a sequence given as is
};

// A policy that serves a pool (vLLM's free queue) changes through that host only: a key inserted,
// pinned or dropped behind the host's back would stand for no block, or for one handed out twice.
// Python's mutators refuse such a policy; its read-only views and its hints stay open.
// A replay that runs without the GIL owns its policy meanwhile (Policy::begin_replay): another
// thread's call that would change it is refused too.
Policy& unhosted(Policy& p) {
  if (p.hosted())
    throw std::invalid_argument(std::string(p.name()) +
                                ": this policy serves a vLLM free queue; it changes through the queue only");
  if (p.replaying())
    throw std::runtime_error(std::string(p.name()) + ": a replay of this policy is running on another thread");
  return p;
}

// A call that changes no decision but may move the policy's tables (reserve): open to a host,
// refused while a replay owns the policy.
Policy& not_replaying(Policy& p) {
  if (p.replaying())
    throw std::runtime_error(std::string(p.name()) + ": a replay of this policy is running on another thread");
  return p;
}

// Holds a policy for one replay without the GIL: taken (or refused) with the GIL held, given back
// as the call returns, exception or not.
class ReplayHold {
 public:
  explicit ReplayHold(Policy& p) : p_(unhosted(p)) {
    if (!p_.begin_replay())
      throw std::runtime_error(std::string(p_.name()) + ": a replay of this policy is running on another thread");
  }
  ~ReplayHold() { p_.end_replay(); }
  ReplayHold(const ReplayHold&) = delete;
  ReplayHold& operator=(const ReplayHold&) = delete;
  Policy& policy() { return p_; }

 private:
  Policy& p_;
};

std::vector<Key> keys_of(nb::handle obj) {
  KeyBatch batch(obj);
  return std::vector<Key>(batch.data(), batch.data() + batch.size());
}

}  // namespace

void bind_block_pool(nb::module_& m);  // bind_block_pool.cpp
void bind_trace_scan(nb::module_& m);  // bind_trace_scan.cpp
void bind_free_queue(nb::module_& m);  // bind_free_queue.cpp
void bind_block_hash(nb::module_& m);  // bind_block_hash.cpp

NB_MODULE(_core, m) {
  m.doc() = "wakman's compiled policy core: the policies and their per-block loops (see core/policy.hpp)";
  // vLLM's engine freezes the garbage collector's heap after start-up (gc.freeze), so objects alive
  // then are never collected and would be reported as leaks at every engine's exit.
  nb::set_leak_warnings(false);
  nb::exception<NoEvictable>(m, "NoEvictableKey", PyExc_LookupError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const BadKey& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    }
  });

  m.attr("MAX_CAPACITY") = Policy::kMaxCapacity;  // blocks: node slots are 32-bit
  nb::class_<Policy>(m, "Policy", "The one event protocol every eviction policy implements (core/policy.hpp).")
      .def_prop_ro("capacity", &Policy::capacity, "Capacity in blocks.")
      .def("__len__", &Policy::size, "Resident keys, pinned ones included.")
      .def("__contains__", [](const Policy& p, nb::handle k) { return p.contains(to_key(k)); })
      .def_prop_ro("num_pinned", &Policy::num_pinned)
      .def_prop_ro("num_evictable", &Policy::num_evictable)
      .def_prop_ro("memory_bytes", &Policy::bytes, "Bytes held by the policy's tables.")
      .def("is_pinned", [](const Policy& p, nb::handle k) { return p.is_pinned(to_key(k)); })
      .def(
          "access", [](Policy& p, nb::handle k) { return unhosted(p).access(to_key(k)); },
          "Look a key up as a plain cache: True on a hit; a miss evicts while full, then inserts.")
      .def(
          "replay",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            ReplayHold hold(p);
            nb::gil_scoped_release release;  // a shadow's replay: the scheduler's thread may run meanwhile
            return hold.policy().replay(batch.data(), batch.size());
          },
          "keys"_a, "Access every key in order (numpy uint64 read in place); return the number of hits.")
      .def(
          "miss", [](Policy& p, nb::handle k) { unhosted(p).miss(to_key(k)); },
          "A lookup missed on the key: a ghost hit is recorded before any eviction.")
      .def(
          "miss_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            Policy& q = unhosted(p);
            for (size_t i = 0; i < batch.size(); ++i) q.miss(batch.data()[i]);
          },
          "keys"_a)
      .def(
          "insert", [](Policy& p, nb::handle k, bool pinned) { unhosted(p).insert(to_key(k), pinned); }, "key"_a,
          "pinned"_a = false, "A new key becomes resident (the caller made room).")
      .def("insert_pinned", [](Policy& p, nb::handle k) { unhosted(p).insert(to_key(k), true); })
      .def("hit", [](Policy& p, nb::handle k) { unhosted(p).hit(to_key(k)); }, "A lookup found the resident key.")
      .def("pin", [](Policy& p, nb::handle k) { unhosted(p).pin(to_key(k)); }, "The key leaves the eviction order.")
      .def(
          "hit_pin", [](Policy& p, nb::handle k, bool pin_too) { unhosted(p).hit_pin(to_key(k), pin_too); }, "key"_a,
          "pin_too"_a = true, "A request takes the resident key: hit, then pin when pin_too (one lookup).")
      .def("unpin", [](Policy& p, nb::handle k) { unhosted(p).unpin(to_key(k)); },
           "The key re-enters the order at its segment's newest position.")
      .def(
          "hit_pin_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            Policy& q = unhosted(p);
            for (size_t i = 0; i < batch.size(); ++i) q.hit_pin(batch.data()[i], true);
          },
          "keys"_a)
      .def(
          "unpin_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            Policy& q = unhosted(p);
            for (size_t i = 0; i < batch.size(); ++i) q.unpin(batch.data()[i]);
          },
          "keys"_a)
      .def("evict", [](Policy& p) { return unhosted(p).evict(); }, "Remove and return a victim among the unpinned keys.")
      .def(
          "evict_many",
          [](Policy& p, size_t n) {
            std::vector<Key> out;
            out.reserve(std::min(n, p.num_evictable()));  // more victims than that: evict_many raises
            evict_many(unhosted(p), n, out);
            return key_list(out);
          },
          "n"_a)
      .def("remove", [](Policy& p, nb::handle k) { unhosted(p).remove(to_key(k)); },
           "Drop a resident key outside eviction in O(1); the others keep their metadata.")
      .def("discard", [](Policy& p, nb::handle k) { unhosted(p).remove(to_key(k)); }, "Alias of remove.")
      .def("evict_key", [](Policy& p, nb::handle k) { unhosted(p).evict_key(to_key(k)); }, "key"_a,
           "A resident key (pinned or not) leaves as the policy's own eviction of it would: its ghost "
           "entry stays where the policy keeps one (S3-FIFO from S, ARC, chain-lru from P); O(1).")
      .def(
          "adopt",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            Policy& q = unhosted(p);
            for (size_t i = 0; i < batch.size(); ++i) q.adopt(batch.data()[i]);
          },
          "keys"_a, "Take over unpinned keys, oldest (first victim) first.")
      .def(
          "rekey", [](Policy& p, nb::handle from, nb::handle to) { return unhosted(p).rekey(to_key(from), to_key(to)); },
          "key"_a, "new_key"_a,
          "A resident key is known as new_key (unknown to the policy) from now on, in place (position,\n"
          "segment, counters, pin). True where the policy does this (LRU, FIFO: one queue); else False,\n"
          "nothing changed.")
      .def("reset", [](Policy& p) { unhosted(p).reset(); }, "Forget everything: resident keys, pins, ghosts, adaptive state.")
      .def("reserve", [](Policy& p) { not_replaying(p).reserve(); },
           "Allocate now the tables for every key the policy can hold at once (resident and ghosts), so "
           "no later call waits on a table's growth; reset() keeps the room. Changes no decision.")
      .def(
          "on_request",
          [](Policy& p, nb::handle keys, size_t full, nb::handle outputs, double now_s) {
            KeyBatch k(keys), o(outputs);
            p.on_request(k.data(), std::min(full, k.size()), o.data(), o.size(), now_s);
          },
          "keys"_a, "full"_a, "outputs"_a, "now_s"_a,
          "Hint: a request arrived at now_s (s) with these block keys (keys[:full] its full prompt blocks) and "
          "output keys; the inserts that follow are its blocks. Policies that do not learn from requests ignore it.")
      .def(
          "in_session", [](Policy& p, nb::handle session) { p.in_session(to_key(session)); }, "session"_a,
          "Hint: the on_request that follows belongs to this session (a 64-bit key).")
      .def(
          "end_session", [](Policy& p, nb::handle session) { p.end_session(to_key(session)); }, "session"_a,
          "Hint: this session (a 64-bit key) sends no more requests. Policies that do not follow sessions "
          "ignore it.")
      .def_prop_ro("learns_from_requests", &Policy::learns_from_requests,
                   "Whether on_request changes anything (a host may skip building its keys otherwise).")
      .def_prop_ro("hears_misses", &Policy::hears_misses,
                   "Whether miss() changes anything (it finds ghosts): vLLM's queue skips misses otherwise.")
      .def(
          "inserting_for", [](Policy& p, nb::handle root) { p.inserting_for(to_key(root)); }, "root"_a,
          "Hint: the inserts that follow belong to the chain whose first block key is root.")
      .def("eviction_order",
           [](const Policy& p) {
             std::vector<Key> out;
             p.eviction_order(out);
             return key_list(out);
           })
      .def("pinned_keys",
           [](const Policy& p) {
             std::vector<Key> out;
             p.pinned_keys(out);
             return key_list(out);
           })
      .def("__repr__", [](nb::handle self) {
        const Policy& p = nb::cast<const Policy&>(self);
        return nb::cast<std::string>(self.type().attr("__name__")) + "(capacity=" + std::to_string(p.capacity()) +
               ", resident=" + std::to_string(p.size()) + ", pinned=" + std::to_string(p.num_pinned()) + ")";
      });

  nb::class_<LRU, Policy>(m, "LRU").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<FIFO, Policy>(m, "FIFO").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<Sieve, Policy>(m, "Sieve").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<Infinite, Policy>(m, "Infinite").def(nb::init<int64_t>(), "capacity"_a = 1);
  nb::class_<ARC, Policy>(m, "ARC")
      .def(nb::init<int64_t>(), "capacity"_a)
      .def_prop_ro("p", &ARC::p, "T1's target size (blocks, a float).")
      .def_prop_ro("ghost_size", &ARC::ghost_size);
  nb::class_<S3FIFO, Policy>(m, "S3FIFO")
      .def(nb::init<int64_t, double, double, int, int, bool>(), "capacity"_a, "small_ratio"_a = 0.10,
           "ghost_ratio"_a = 0.90, "promote_threshold"_a = 2, "freq_cap"_a = 3, "warmup_to_main"_a = true)
      .def("in_ghost", [](const S3FIFO& p, nb::handle k) { return p.in_ghost(to_key(k)); })
      .def(
          "segment", [](const S3FIFO& p, nb::handle k) { return p.segment(to_key(k)); }, "key"_a,
          "(in_small, freq) of a resident key; (False, -1) otherwise.")
      .def_prop_ro("ghost_size", &S3FIFO::ghost_size)
      .def_ro("small_ratio", &S3FIFO::small_ratio_)
      .def_ro("ghost_ratio", &S3FIFO::ghost_ratio_)
      .def_ro("promote_threshold", &S3FIFO::promote_threshold_)
      .def_ro("freq_cap", &S3FIFO::freq_cap_)
      .def_ro("warmup_to_main", &S3FIFO::warmup_to_main_)
      .def_ro("small_capacity", &S3FIFO::small_capacity_)
      .def_ro("main_capacity", &S3FIFO::main_capacity_)
      .def_ro("ghost_capacity", &S3FIFO::ghost_capacity_);
  nb::class_<ChainLRU, Policy>(m, "ChainLRU")
      .def(
          "__init__",
          [](ChainLRU* self, int64_t capacity, double window_s, double threshold, double ghost_ratio,
             bool sessions, const std::string& mode, double small_ratio, int64_t switch_walk) {
            ChainLRU::Mode m = mode == "adaptive"  ? ChainLRU::Mode::kAdaptive
                               : mode == "recency" ? ChainLRU::Mode::kRecency
                               : mode == "filter"  ? ChainLRU::Mode::kFilter
                                                   : throw std::invalid_argument(
                                                         "chain-lru: mode must be adaptive, recency or filter, not " + mode);
            new (self) ChainLRU(capacity, window_s, threshold, ghost_ratio, sessions, m, small_ratio, switch_walk);
          },
          "capacity"_a, "window_s"_a = 120.0, "threshold"_a = 0.2, "ghost_ratio"_a = 1.0, "sessions"_a = false,
          "mode"_a = "adaptive", "small_ratio"_a = 0.1, "switch_walk"_a = ChainLRU::kSwitchWalk)
      .def_prop_ro("mode", &ChainLRU::mode, "The mode the cache runs now: recency or filter.")
      .def_prop_ro("adaptive", &ChainLRU::adaptive, "Whether the duel of two miniatures chooses the mode.")
      .def_prop_ro("sample_every", &ChainLRU::sample_every, "The duel samples one block key in this many.")
      .def_prop_ro("mode_switches", &ChainLRU::mode_switches)
      .def_prop_ro("requests_heard", &ChainLRU::requests_heard, "Requests heard through on_request.")
      .def_prop_ro("requests_filtered", &ChainLRU::requests_filtered, "Of them, those heard in the filter mode.")
      .def_prop_ro("requests_guarded", &ChainLRU::requests_guarded,
                   "Of them, those at which the floor guard held the cache in the recency mode.")
      .def_ro("small_ratio", &ChainLRU::small_ratio_)
      .def_ro("switch_walk", &ChainLRU::switch_walk_, "M's blocks the switch walk examines a request.")
      .def_ro("sessions", &ChainLRU::sessions_)
      .def_prop_ro("sessions_followed", &ChainLRU::sessions_followed)
      .def_prop_ro("demoted", &ChainLRU::demoted,
                   "Blocks moved to P's oldest end (an abandoned branch, an ended session's own blocks).")
      .def_prop_ro("sessions_ended", &ChainLRU::sessions_ended, "Followed sessions that end_session ended.")
      .def("in_ghost", [](const ChainLRU& p, nb::handle k) { return p.in_ghost(to_key(k)); })
      .def("in_probation", [](const ChainLRU& p, nb::handle k) { return p.in_probation(to_key(k)); })
      .def("extension_rate", [](const ChainLRU& p, nb::handle k) { return p.extension_rate(to_key(k)); }, "root"_a,
           "P(a request's end is extended within window_s), with the prior, for a chain root.")
      .def_prop_ro("ghost_size", &ChainLRU::ghost_size)
      .def_prop_ro("probation_size", &ChainLRU::probation_size, "Unpinned keys in P.")
      .def_prop_ro("probation_pinned", &ChainLRU::probation_pinned, "Pinned keys whose segment is P.")
      .def_prop_ro("open_ends", [](const ChainLRU& p) { return p.stats().open_ends(); })
      .def_prop_ro("roots", [](const ChainLRU& p) { return p.stats().roots(); })
      .def_ro("window_s", &ChainLRU::window_s_)
      .def_ro("threshold", &ChainLRU::threshold_)
      .def_ro("ghost_ratio", &ChainLRU::ghost_ratio_)
      .def_ro("ghost_capacity", &ChainLRU::ghost_capacity_);
  nb::class_<FutureHandle>(m, "BeladyFuture",
                           "A key sequence and each access's next use, built once; Belady(capacity, future=it) at "
                           "any number of capacities shares it.")
      .def(
          "__init__",
          [](FutureHandle* self, nb::handle keys) {
            new (self) FutureHandle{std::make_shared<const BeladyFuture>(keys_of(keys)), std::nullopt};
          },
          "keys"_a)
      .def_static(
          "of_requests",
          [](nb::handle requests, bool deepest_first) {
            // One pass to size the sequence, one to fill it: the future is the only copy of its keys.
            std::vector<Key> scratch, scratch_out;
            std::vector<size_t> fulls;
            std::vector<int64_t> offsets{0};
            for (nb::handle r : requests) {
              fulls.push_back(nb::cast<size_t>(r.attr("full_blocks")));
              const size_t outputs = nb::len(nb::object(r.attr("output_keys")));
              offsets.push_back(offsets.back() + static_cast<int64_t>(fulls.back() + outputs));
            }
            std::vector<Key> sequence;
            sequence.reserve(static_cast<size_t>(offsets.back()));
            size_t index = 0;
            for (nb::handle r : requests) {
              if (index == fulls.size()) throw nb::value_error("BeladyFuture.of_requests: needs a sequence, not an iterator");
              const size_t full = fulls[index++];
              py::Keys keys(r.attr("block_keys"), scratch), outputs(r.attr("output_keys"), scratch_out);
              if (full > keys.size()) throw nb::value_error("BeladyFuture.of_requests: full_blocks > len(block_keys)");
              if (deepest_first) {  // cache mode's access order
                for_each_released(keys.data(), full, outputs.data(), outputs.size(),
                                  [&sequence](Key k) { sequence.push_back(k); });
              } else {  // the serve loops' order: the prompt, then the outputs
                sequence.insert(sequence.end(), keys.data(), keys.data() + full);
                sequence.insert(sequence.end(), outputs.data(), outputs.data() + outputs.size());
              }
            }
            if (index != fulls.size() || static_cast<int64_t>(sequence.size()) != offsets.back())
              throw nb::value_error("BeladyFuture.of_requests: needs a sequence of requests that does not change");
            FutureHandle handle{std::make_shared<const BeladyFuture>(std::move(sequence)), deepest_first};
            return nb::make_tuple(std::move(handle), nb::cast(offsets));
          },
          "requests"_a, "deepest_first"_a = false,
          "Belady's future of a trace and each request's start offset in it (the last = its length): every "
          "cacheable key in request order (its full prompt blocks, then its output blocks; reversed within a "
          "request when deepest_first, cache mode's access order).")
      .def_prop_ro(
          "deepest_first",
          [](const FutureHandle& f) { return f.deepest_first; },
          "of_requests' order (True: cache mode's, each request reversed); None for a sequence given as is.")
      .def("__len__", [](const FutureHandle& f) { return f.future->keys.size(); });

  nb::class_<Belady, Policy>(m, "Belady")
      .def(
          "__init__",
          [](Belady* self, int64_t capacity, nb::handle future) {
            if (future.is_none())
              throw std::invalid_argument("belady: needs future=, the whole key sequence it will be given, in order");
            std::shared_ptr<const BeladyFuture> f = nb::isinstance<FutureHandle>(future)
                                                        ? nb::cast<FutureHandle&>(future).future
                                                        : std::make_shared<const BeladyFuture>(keys_of(future));
            new (self) Belady(capacity, std::move(f));
          },
          "capacity"_a, "future"_a = nb::none())
      .def("seek", [](Belady& b, int64_t position) { static_cast<Belady&>(unhosted(b)).seek(position); }, "position"_a, "Accesses before position (an index into future) are past.")
      .def_prop_ro("clock", &Belady::clock);

  m.def(
      "handover", [](const Policy& src, Policy& dst) { handover(src, unhosted(dst)); }, "src"_a, "dst"_a, "Reset dst, then give it src's cached blocks: unpinned in src's eviction order, pinned as pinned.");
  m.def(
      "take_over",
      [](Policy& dst, nb::handle order, nb::handle pinned) {
        KeyBatch unpinned(order), held(pinned);
        take_over(unhosted(dst), unpinned.data(), unpinned.size(),
                  std::vector<Key>(held.data(), held.data() + held.size()));
      },
      "dst"_a, "order"_a, "pinned"_a,
      "Reset dst, then adopt the unpinned keys in `order` (first victim first) and insert `pinned` "
      "pinned, in increasing key order.");

  m.def(
      "cached_prefix",
      [](const Policy& p, nb::handle keys, size_t limit) {
        KeyBatch batch(keys);
        return cached_prefix(p, batch.data(), std::min(limit, batch.size()));
      },
      "policy"_a, "keys"_a, "limit"_a,
      "vLLM's first-miss rule: blocks of the longest prefix of keys[:limit] resident in policy.");
  m.def("full_blocks", &full_blocks, "num_keys"_a, "tokens"_a, "block_size"_a,
        "Blocks of a prompt vLLM caches: min(num_keys, tokens // block_size), only full blocks hashed.");
  m.def("hit_limit", &hit_limit, "num_keys"_a, "tokens"_a, "block_size"_a,
      "Blocks that may hit: min(num_keys, (tokens - 1) // block_size); the last token is always computed.");

  nb::class_<DecayedScores>(m, "DecayedScores",
                            "wakman-plus's per-request shadow scores over the last window (core/decayed_scores.hpp).")
      .def(nb::init<size_t>(), "candidates"_a)
      .def(
          "add",
          [](DecayedScores& d, double arrival_s, int64_t prompt_tokens, const std::vector<int64_t>& hits) {
            if (hits.size() != d.candidates()) throw nb::value_error("DecayedScores.add: one hit count per candidate");
            d.add(arrival_s, prompt_tokens, hits.data());
          },
          "arrival_s"_a, "prompt_tokens"_a, "hit_tokens"_a, "One request: its arrival (s), prompt tokens, hit tokens per candidate.")
      .def("forget_before", &DecayedScores::forget_before, "horizon_s"_a, "Drop the requests that arrived before horizon_s.")
      .def(
          "rates",
          [](const DecayedScores& d, std::optional<double> half_life_s) {
            return d.rates(half_life_s.has_value(), half_life_s.value_or(0.0));
          },
          "half_life_s"_a.none(),
          "Per candidate: hit tokens / prompt tokens, each request weighed 0.5 ** (age / half_life_s) (1 if None).")
      .def("__len__", &DecayedScores::size, "Requests in the window.");

  nb::class_<StrandedCount>(m, "StrandedCount",
                            "Stranded blocks of a plain cache after a run: walk every request's chain, then count.")
      .def(nb::init<>())
      .def(
          "walk",
          [](StrandedCount& c, const Policy& cached, nb::handle keys, size_t full, nb::handle outputs) {
            KeyBatch k(keys), o(outputs);
            c.walk(cached, k.data(), std::min(full, k.size()), o.data(), o.size());
          },
          "cached"_a, "keys"_a, "full"_a, "outputs"_a,
          "One request's chain (keys[:full], then outputs) against cached's resident keys now.")
      .def("count", &StrandedCount::count,
           "Resident keys that no walked chain reaches through resident blocks only.");

  m.def(
      "replay_request",
      [](Policy& p, nb::handle keys, size_t limit, size_t full, nb::handle outputs, double arrival_s) {
        KeyBatch k(keys), o(outputs);
        full = std::min(full, k.size());
        RequestReplay r;
        {
          // Shadow replays run on a thread beside vLLM's scheduler: the keys are read (outputs copied)
          // above; the per-block loop lets the scheduler's thread take the GIL meanwhile.
          ReplayHold hold(p);
          nb::gil_scoped_release release;
          r = hold.policy().replay_request(k.data(), std::min(limit, full), full, o.data(), o.size(), arrival_s);
        }
        return nb::make_tuple(r.prefix_hits, r.accessed, r.access_hits);
      },
      "policy"_a, "keys"_a, "limit"_a, "full"_a, "outputs"_a, "arrival_s"_a = 0.0,
      "One request through a plain cache, vLLM's way: (prefix hit blocks, blocks accessed, of which hits).");

  bind_block_pool(m);
  bind_trace_scan(m);
  bind_free_queue(m);
  bind_block_hash(m);
}
