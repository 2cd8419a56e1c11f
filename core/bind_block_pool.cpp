// wakman._core.BlockPool: the serve-mode pool (block_pool.hpp) for Python.
//
// The pool holds its policy as a Python object, so a policy given to it (or swapped in by
// replace_policy) lives as long as the pool uses it. Two ways in:
// - per block (tests, tools): touch/allocate/cache/release with a request's held blocks as a list
//   of keys, None for an anonymous block;
// - per request (serve.py): the pool keeps each run's held blocks itself, indexed by run number;
//   admit/fill_last/extend/release_run are one call each and allocate nothing in steady state.
// Keys cross as Python ints (modulo 2**64) or numpy 8-byte integers; a numpy uint64/int64 array
// of keys is read in place, a list is read into a reused buffer.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bind_numpy.hpp"
#include "block_pool.hpp"
#include "free_block_log.hpp"
#include "key_batch.hpp"
#include "serve.hpp"
#include "steps.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace wakman;

namespace {

using wakman::py::KeyBatch;
using wakman::py::Keys;
constexpr auto as_key = wakman::py::to_key;

nb::object key_or_none(Key k, bool present) {
  return present ? nb::steal(PyLong_FromUnsignedLongLong(k)) : nb::none();
}

// The pool, its policy's Python object, and every run's held blocks.
struct PyBlockPool {
  nb::object policy_obj;
  BlockPool pool;

  PyBlockPool(int64_t capacity, nb::object policy) : policy_obj(policy), pool(capacity, as_policy(policy)) {}

  // A policy that serves a vLLM free queue, or that a replay holds, is no pool's to change.
  static Policy& as_policy(nb::handle policy) {
    if (!nb::isinstance<Policy>(policy)) throw nb::type_error("block pool: the policy must be a wakman policy");
    Policy& p = nb::cast<Policy&>(policy);
    if (p.hosted() || p.replaying())
      throw std::invalid_argument(std::string("block pool: this ") + p.name() +
                                  " serves a vLLM free queue or a running replay; give the pool its own policy");
    return p;
  }

  nb::list held_list(const BlockPool::Held& held) const {
    nb::list out;
    for (int32_t s : held) out.append(key_or_none(s >= 0 ? pool.policy_key_of(s) : 0, s >= 0));
    return out;
  }
};

// The loop's view of a Python controller (on_arrival(now, request), on_time(now, pool)) and of the
// pool's policy names. A controller's optional `free_log` (a FreeBlockLog) gets the pool's free
// blocks at every event from here, without a call into Python (the count read before an event is
// logged from the previous event's time: it held since then); its optional `wake_s` (seconds,
// re-read after each call) holds on_time back until simulated time reaches it
// (wakman.simulation.controller states the protocol).
class PyServeHooks final : public ServeHooks {
 public:
  PyServeHooks(nb::handle pool, nb::handle requests, nb::handle controller, int64_t* sampled = nullptr)
      : pool_(pool), requests_(requests), controller_(controller), py_pool_(nb::cast<PyBlockPool&>(pool)),
        sampled_(sampled) {
    if (!controller.is_none()) {
      on_arrival_ = controller.attr("on_arrival");
      on_time_ = controller.attr("on_time");
      if (nb::hasattr(controller, "free_log")) {
        nb::object log = controller.attr("free_log");
        if (!nb::isinstance<FreeBlockLog>(log)) throw nb::type_error("serve: a controller's free_log must be a FreeBlockLog");
        free_log_ = &nb::cast<FreeBlockLog&>(log);
        free_log_obj_ = log;
      }
      has_wake_ = nb::hasattr(controller, "wake_s");
      if (has_wake_) wake_s_ = nb::cast<double>(controller.attr("wake_s"));
    }
  }
  void on_arrival(double now, size_t request) override {
    if (!on_arrival_.is_valid()) return;
    nb::object req = nb::steal(PySequence_GetItem(requests_.ptr(), static_cast<Py_ssize_t>(request)));
    if (!req.is_valid()) throw nb::python_error();
    on_arrival_(now, req);
  }
  void on_time(double now) override {
    log_free(now);
    if (!on_time_.is_valid() || (has_wake_ && now < wake_s_)) return;
    on_time_(now, pool_);
    if (has_wake_) wake_s_ = nb::cast<double>(controller_.attr("wake_s"));
  }
  void on_end(double now) override { log_free(now); }
  void on_sampled(size_t request, int64_t generated) override {
    if (sampled_ != nullptr) sampled_[request] = generated;
  }
  int32_t policy_tag() override {
    nb::object policy = py_pool_.policy_obj;
    nb::object name = nb::hasattr(policy, "name") ? policy.attr("name")
                                                  : nb::str(nb::cast<Policy&>(policy).name());
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i].equal(name)) return static_cast<int32_t>(i);
    names_.push_back(name);
    return static_cast<int32_t>(names_.size() - 1);
  }
  nb::object name(int32_t tag) const { return tag >= 0 ? names_[tag] : nb::str(""); }

 private:
  // The pool's count read at `now`, before what happens then is processed, held since the
  // previous event: logged from that event's time.
  void log_free(double now) {
    if (free_log_ != nullptr) free_log_->sample(previous_event_s_, py_pool_.pool.free());
    previous_event_s_ = now;
  }

  nb::handle pool_, requests_, controller_;
  PyBlockPool& py_pool_;
  nb::object on_arrival_, on_time_, free_log_obj_;
  double previous_event_s_ = 0.0;  // the time of the previous on_time (0 before the first: the pool starts empty)
  FreeBlockLog* free_log_ = nullptr;
  int64_t* sampled_ = nullptr;  // output tokens each request has sampled, for the controller to read
  bool has_wake_ = false;
  double wake_s_ = 0.0;
  std::vector<nb::object> names_;
};

// A trace read once into the flat arrays the loops take.
struct FlatTrace {
  std::vector<ServeRequest> reqs;
  std::vector<Key> keys, outputs;
  std::vector<uint8_t> measured;
  std::vector<int64_t> belady_offsets;
};

FlatTrace flat_trace(nb::handle requests, double warmup_s, int64_t warmup_requests, nb::handle belady_offsets) {
  FlatTrace t;
  std::vector<Key> scratch;
  Py_ssize_t n = PyObject_Length(requests.ptr());
  if (n < 0) throw nb::python_error();
  t.reqs.reserve(static_cast<size_t>(n));
  t.measured.reserve(static_cast<size_t>(n));
  size_t i = 0;
  for (nb::handle r : requests) {
    ServeRequest q;
    q.arrival_s = nb::cast<double>(r.attr("arrival_s"));
    q.prompt_tokens = nb::cast<int64_t>(r.attr("prompt_tokens"));
    q.output_tokens = nb::cast<int64_t>(r.attr("output_tokens"));
    q.block_size = nb::cast<int64_t>(r.attr("block_size"));
    if (q.block_size < 1 || q.prompt_tokens < 1) throw nb::value_error("serve: a request needs block_size >= 1 and a prompt");
    {
      Keys k(r.attr("block_keys"), scratch);
      q.key_at = t.keys.size();
      q.n_keys = k.size();
      t.keys.insert(t.keys.end(), k.data(), k.data() + k.size());
    }
    {
      Keys k(r.attr("output_keys"), scratch);
      q.out_at = t.outputs.size();
      q.n_out = k.size();
      t.outputs.insert(t.outputs.end(), k.data(), k.data() + k.size());
    }
    t.measured.push_back(q.arrival_s >= warmup_s && static_cast<int64_t>(i) >= warmup_requests);
    t.reqs.push_back(q);
    ++i;
  }
  if (!belady_offsets.is_none())
    for (nb::handle o : belady_offsets) t.belady_offsets.push_back(nb::cast<int64_t>(o));
  if (!t.belady_offsets.empty() && t.belady_offsets.size() != t.reqs.size() + 1)
    throw nb::value_error("serve: belady_offsets needs one offset per request, plus the end");
  return t;
}

// The session hints for a loop (set_sessions): `sessions` (None, or one 64-bit key per request, 0 for
// none) and `session_ends_after_s` (None: no ends told; else seconds after a session's last request
// finishes).
template <class Loop>
void read_sessions(Loop& loop, nb::handle sessions, nb::handle session_ends_after_s, size_t n) {
  std::vector<Key> keys;
  if (!sessions.is_none()) {
    for (nb::handle k : sessions) keys.push_back(as_key(k));
    if (keys.size() != n) throw nb::value_error("serve: sessions needs one key per request");
  }
  double after_s = -1.0;
  if (!session_ends_after_s.is_none()) {
    after_s = nb::cast<double>(session_ends_after_s);
    if (!(after_s >= 0)) throw nb::value_error("serve: session_ends_after_s must be >= 0 seconds");
  }
  loop.set_sessions(std::move(keys), after_s);
}

// A loop's figures for Python (serve.py's fill_result reads them).
nb::dict totals_dict(const ServeTotals& t, const PyServeHooks& hooks) {
  nb::dict out;
  out["measured_requests"] = t.measured_requests;
  out["prompt_tokens"] = t.prompt_tokens;
  out["hit_tokens"] = t.hit_tokens;
  out["block_lookups"] = t.block_lookups;
  out["block_hits"] = t.block_hits;
  out["preemptions"] = t.preemptions;
  out["rejected"] = t.rejected;
  out["now"] = t.now;
  out["t0"] = t.started ? nb::cast(t.t0) : nb::none();
  out["free_area"] = t.free_area;
  out["prefill_busy_s"] = t.prefill_busy_s;
  out["backlog_at_last_arrival"] = t.backlog_at_last_arrival;
  nb::list delays, ttfts, cells, arrivals;
  for (double d : t.queueing_delays_s) delays.append(d);
  for (double a : t.measured_arrivals_s) arrivals.append(a);
  out["measured_arrivals_s"] = arrivals;
  for (double d : t.ttfts_s) ttfts.append(d);
  for (const IntervalCell& c : t.intervals)
    cells.append(nb::make_tuple(c.start_s, c.admissions, c.prompt_tokens, c.hit_tokens, c.evictions,
                                c.free_block_seconds, c.seconds, hooks.name(c.policy)));
  nb::list first_hits;
  for (int64_t h : t.first_hit_tokens) first_hits.append(h);
  out["first_hit_tokens"] = first_hits;
  out["queueing_delays_s"] = delays;
  out["ttfts_s"] = ttfts;
  out["intervals"] = cells;
  return out;
}

// serve.py's run(): read the requests once into flat arrays, run the loop, hand back the figures.
nb::dict serve(nb::handle pool, nb::handle requests, double prefill_tokens_per_s, double prefill_overhead_s,
               double decode_tokens_per_s, int64_t max_running, double warmup_s, int64_t warmup_requests,
               double interval_s, nb::handle controller, nb::handle belady_offsets, bool cache_outputs,
               nb::handle sessions, nb::handle session_ends_after_s) {
  PyBlockPool& p = nb::cast<PyBlockPool&>(pool);
  FlatTrace t = flat_trace(requests, warmup_s, warmup_requests, belady_offsets);
  ServerParams server{prefill_tokens_per_s, prefill_overhead_s, decode_tokens_per_s, max_running, cache_outputs};
  PyServeHooks hooks(pool, requests, controller);
  const size_t n = t.reqs.size();
  ServeLoop loop(p.pool, server, std::move(t.reqs), std::move(t.keys), std::move(t.outputs), std::move(t.measured),
                 interval_s, std::move(t.belady_offsets), hooks);
  read_sessions(loop, sessions, session_ends_after_s, n);
  return totals_dict(loop.run(), hooks);
}

// steps.py's run(): the same, step by step on a vLLM configuration.
nb::dict serve_steps(nb::handle pool, nb::handle requests, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                     double step_s, double token_s, double warmup_s, int64_t warmup_requests, double interval_s,
                     nb::handle controller, nb::handle belady_offsets, bool cache_outputs,
                     std::optional<nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>> sampled,
                     nb::handle sessions, nb::handle session_ends_after_s) {
  if (max_num_batched_tokens < 1 || max_num_seqs < 1 || !(step_s > 0) || !(token_s >= 0))
    throw nb::value_error("serve_steps: max_num_batched_tokens and max_num_seqs must be >= 1, step_s > 0, token_s >= 0");
  PyBlockPool& p = nb::cast<PyBlockPool&>(pool);
  FlatTrace t = flat_trace(requests, warmup_s, warmup_requests, belady_offsets);
  StepParams params{max_num_batched_tokens, max_num_seqs, step_s, token_s, cache_outputs};
  if (sampled && sampled->shape(0) != t.reqs.size())
    throw nb::value_error("serve_steps: sampled_tokens needs one entry per request");
  PyServeHooks hooks(pool, requests, controller, sampled ? sampled->data() : nullptr);
  const size_t n = t.reqs.size();
  StepLoop loop(p.pool, params, std::move(t.reqs), std::move(t.keys), std::move(t.outputs), std::move(t.measured),
                interval_s, std::move(t.belady_offsets), hooks);
  read_sessions(loop, sessions, session_ends_after_s, n);
  return totals_dict(loop.run(), hooks);
}

// Keys of blocks first, ..., first + count - 1 of request `request` (its trace index), as the serve loops
// key them (request_block_key), as a numpy uint64 array.
nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>> request_block_keys(nb::handle block_keys, int64_t full,
                                                                 nb::handle output_keys, uint64_t request,
                                                                 int64_t first, size_t count) {
  std::vector<Key> prompt_scratch, output_scratch;
  Keys prompt(block_keys, prompt_scratch), outputs(output_keys, output_scratch);
  if (full < 0 || static_cast<size_t>(full) > prompt.size() || first < 0 ||
      count > static_cast<size_t>(INT64_MAX - first))
    throw nb::value_error("request_block_keys: need 0 <= full <= len(block_keys), first >= 0 and first + count < 2**63");
  std::vector<uint64_t> keys(count);
  for (size_t i = 0; i < count; ++i)
    keys[i] = request_block_key(prompt.data(), full, outputs.data(), static_cast<int64_t>(outputs.size()), request,
                                first + static_cast<int64_t>(i));
  return wakman::to_numpy(std::move(keys));
}

}  // namespace

void bind_block_pool(nb::module_& m) {
  nb::class_<FreeBlockLog>(m, "FreeBlockLog",
                           "A pool's free blocks over time, for exact time-weighted window means (seconds, blocks).")
      .def(nb::init<>())
      .def("sample", &FreeBlockLog::sample, "now"_a, "free_blocks"_a,
           "The pool has free_blocks free blocks from now on (a sample back in time is ignored).")
      .def("mean", &FreeBlockLog::mean, "start_s"_a, "end_s"_a,
           "Time-weighted mean free blocks over the covered part of [start_s, end_s); the last sample if none.")
      .def("forget_before", &FreeBlockLog::forget_before, "t"_a, "Drop the segments that end by t.")
      .def("__len__", &FreeBlockLog::size, "Segments kept.");
  nb::exception<PoolExhausted>(m, "PoolExhausted", PyExc_RuntimeError);
  nb::exception<PoolBroken>(m, "PoolInvariantError", PyExc_AssertionError);

  nb::class_<PyBlockPool>(m, "BlockPool", "vLLM 0.32's block pool, counted (semantics: wakman.simulation.pool).")
      .def(nb::init<int64_t, nb::object>(), "capacity"_a, "policy"_a)
      .def_prop_ro("capacity", [](const PyBlockPool& p) { return p.pool.capacity(); }, "Blocks in the pool.")
      .def_prop_ro("blank", [](const PyBlockPool& p) { return p.pool.blank(); }, "Free blocks holding no key.")
      .def_prop_ro("uncached_in_use", [](const PyBlockPool& p) { return p.pool.uncached_in_use(); },
                   "Blocks held by running requests without a key.")
      .def_prop_ro("evictions", [](const PyBlockPool& p) { return p.pool.evictions(); })
      .def_prop_ro("duplicates", [](const PyBlockPool& p) { return p.pool.duplicates(); },
                   "Cached copies beyond the first of their key (vLLM does not deduplicate).")
      .def_prop_ro("free", [](const PyBlockPool& p) { return p.pool.free(); }, "blank + policy.num_evictable.")
      .def_prop_ro("policy", [](const PyBlockPool& p) { return p.policy_obj; })
      .def("cached", [](const PyBlockPool& p, nb::handle k) { return p.pool.cached(as_key(k)); }, "key"_a)
      .def("refs", [](const PyBlockPool& p, nb::handle k) { return p.pool.refs(as_key(k)); }, "key"_a,
           "Running requests holding the key (0 if not cached).")
      .def(
          "longest_hit",
          [](PyBlockPool& p, nb::handle keys, size_t limit) {
            KeyBatch k(keys);  // its own scratch: a key's __index__ may call the pool again
            return p.pool.longest_hit(k.data(), std::min(limit, k.size()));
          },
          "keys"_a, "limit"_a, "Blocks of the longest cached prefix of keys[:limit] (stops at the first miss).")
      .def(
          "evictable_among",
          [](PyBlockPool& p, nb::handle keys) {
            KeyBatch k(keys);  // its own scratch: a key's __index__ may call the pool again
            return p.pool.evictable_among(k.data(), k.size());
          },
          "keys"_a, "How many of these cached keys are free (no reference): admitting them uses them up.")
      .def(
          "touch",
          [](PyBlockPool& p, nb::handle keys) {
            KeyBatch k(keys);  // its own scratch: a key's __index__ may call the pool again
            p.pool.touch(k.data(), k.size());
          },
          "keys"_a, "Hits: each block is a policy hit, then pinned by one more reference (vLLM touch).")
      .def("allocate", [](PyBlockPool& p, int64_t n) { p.pool.allocate(n); }, "n"_a,
           "Take n free blocks: blank ones first, then the policy's victims (evicted now).")
      .def(
          "cache",
          [](PyBlockPool& p, nb::handle key, nb::handle parent) -> nb::object {
            if (key.is_none()) return nb::none();
            Key k = as_key(key);
            bool has_parent = !parent.is_none();
            int32_t s = p.pool.cache(k, has_parent ? as_key(parent) : 0, has_parent);
            return key_or_none(p.pool.policy_key_of(s), true);
          },
          "key"_a.none(), "parent"_a.none(),
          "A held anonymous block became full with key: it becomes a cached copy (pinned by its request).\n"
          "Returns its policy key (key, or copy_key(key, n) for a further copy of a cached key), None for no key.")
      .def(
          "cache_run",
          [](PyBlockPool& p, nb::handle keys, size_t start, size_t stop) {
            KeyBatch k(keys);  // its own scratch: a key's __index__ may call the pool again
            stop = std::min(stop, k.size());
            BlockPool::Held held;
            if (start < stop) p.pool.cache_run(k.data(), start, stop, held);
            return p.held_list(held);
          },
          "keys"_a, "start"_a, "stop"_a,
          "cache(keys[j], keys[j - 1]) for j in range(start, stop): held anonymous blocks of one chain.")
      .def(
          "release",
          [](PyBlockPool& p, nb::handle held) {
            std::vector<int32_t> slots;  // this call's own (a key's __index__ may call the pool again)
            int64_t anonymous = 0;
            for (nb::handle item : held) {
              int32_t s = BlockPool::kAnonymous;
              if (!item.is_none()) {
                Key k = as_key(item);
                s = p.pool.slot_of_policy_key(k);
                if (s < 0 || p.pool.refs_of(s) < 1)
                  throw BadKey("release of a key no request holds: " + std::to_string(k));
              }
              anonymous += s < 0;
              slots.push_back(s);
            }
            // checked before anything changes: no more releases of a block than its references
            if (anonymous > p.pool.uncached_in_use())
              throw BadKey("release of " + std::to_string(anonymous) + " anonymous blocks, " +
                           std::to_string(p.pool.uncached_in_use()) + " held");
            std::vector<int32_t> cached;
            for (int32_t s : slots)
              if (s >= 0) cached.push_back(s);
            std::sort(cached.begin(), cached.end());
            for (size_t i = 0; i < cached.size();) {
              size_t j = i;
              while (j < cached.size() && cached[j] == cached[i]) ++j;
              if (static_cast<int64_t>(j - i) > p.pool.refs_of(cached[i]))
                throw BadKey("release of key " + std::to_string(p.pool.policy_key_of(cached[i])) + " " +
                             std::to_string(j - i) + " times, held " + std::to_string(p.pool.refs_of(cached[i])));
              i = j;
            }
            p.pool.release(slots.data(), slots.size());
          },
          "held"_a, "A request frees its blocks (keys, None for anonymous ones), deepest first.")
      .def(
          "replace_policy",
          [](PyBlockPool& p, nb::object policy) {
            Policy& next = PyBlockPool::as_policy(policy);
            p.pool.replace_policy(next);
            p.policy_obj = policy;
          },
          "policy"_a, "Swap the eviction policy (the adaptive manager's switch, after handover).")
      .def("stranded", [](const PyBlockPool& p) { return p.pool.stranded(); },
           "Cached blocks no lookup can reach: some ancestor of the chain is not cached.")
      .def("check", [](const PyBlockPool& p) { p.pool.check(); }, "Assert the invariants (PoolInvariantError).")
      // ---------------------------------------------------------------- per request (serve.py)
      .def("reserve_runs", [](PyBlockPool& p, size_t n) { p.pool.reserve_runs(n); }, "n"_a, "Room for runs 0..n-1.")
      .def(
          "admit",
          [](PyBlockPool& p, size_t run, nb::handle keys, size_t max_hit, size_t total, size_t full) {
            KeyBatch k(keys);  // its own scratch: a key's __index__ may call the pool again
            max_hit = std::min({max_hit, k.size(), total});
            full = std::min({full, k.size(), total});
            return p.pool.admit_run(run, k.data(), max_hit, total, full);
          },
          "run"_a, "keys"_a, "max_hit"_a, "total"_a, "full"_a,
          "Admit a request as run `run`: prompt of `total` blocks, keys[:full] cacheable, at most max_hit\n"
          "hit. Returns the hit blocks, or -1 (nothing done) if it does not fit. Misses come before evictions.")
      .def(
          "fill_last",
          [](PyBlockPool& p, size_t run, nb::handle key, nb::handle parent) {
            bool has_parent = !parent.is_none();
            p.pool.fill_last(run, as_key(key), has_parent ? as_key(parent) : 0, has_parent);
          },
          "run"_a, "key"_a, "parent"_a.none(), "The run's last block filled up with key: cache it if anonymous.")
      .def("extend", [](PyBlockPool& p, size_t run) { return p.pool.extend_run(run); }, "run"_a,
           "Allocate one more (anonymous) block for the run; returns the blocks it holds.")
      .def("release_run", [](PyBlockPool& p, size_t run) { p.pool.release_run(run); }, "run"_a,
           "The run frees every block it holds, deepest first.")
      .def("held", [](PyBlockPool& p, size_t run) { return p.held_list(p.pool.held(run)); }, "run"_a,
           "The run's held blocks: keys in prefix order, None for anonymous ones.")
      .def("__repr__", [](const PyBlockPool& p) {
        return "BlockPool(capacity=" + std::to_string(p.pool.capacity()) + ", free=" + std::to_string(p.pool.free()) +
               ", policy=" + nb::cast<std::string>(nb::repr(p.policy_obj)) + ")";
      });

  m.def("serve", &serve, "pool"_a, "requests"_a, "prefill_tokens_per_s"_a, "prefill_overhead_s"_a,
        "decode_tokens_per_s"_a, "max_running"_a, "warmup_s"_a, "warmup_requests"_a, "interval_s"_a,
        "controller"_a.none(), "belady_offsets"_a.none(), "cache_outputs"_a = true, "sessions"_a.none() = nb::none(),
        "session_ends_after_s"_a.none() = nb::none(),
        "Serve mode's event loop over pool (semantics: wakman.simulation.serve); returns its figures. sessions: "
        "each request's session key (0: none); session_ends_after_s: tell each session's end that long after its "
        "last request finishes.");
  m.def("serve_steps", &serve_steps, "pool"_a, "requests"_a, "max_num_batched_tokens"_a, "max_num_seqs"_a, "step_s"_a,
        "token_s"_a, "warmup_s"_a, "warmup_requests"_a, "interval_s"_a, "controller"_a.none(), "belady_offsets"_a.none(),
        "cache_outputs"_a = true, "sampled_tokens"_a.noconvert().none() = nb::none(),
        "sessions"_a.none() = nb::none(), "session_ends_after_s"_a.none() = nb::none(),
        "Serve mode step by step on a vLLM configuration (semantics: wakman.simulation.steps); returns its figures. "
        "sampled_tokens (int64, one per request) gets each request's output tokens sampled so far as the loop runs.");
  m.def("request_block_keys", &request_block_keys, "block_keys"_a, "full"_a, "output_keys"_a, "request"_a,
        "first_block"_a, "count"_a,
        "Keys of blocks first_block.. of a request (trace index `request`, `full` prompt blocks with trace keys), as "
        "the serve loops key them: prompt keys, then the trace's output keys, then keys of their own.");
}
