// What serve mode's two loops share: the trace in flat arrays, the controller's hooks, the figures
// they count, per-interval cells, the free-block integral, and each request's block keys.
//
// ServeLoop (serve.hpp: continuous time, one prefill lane) and StepLoop (steps.hpp: vLLM's scheduler,
// step by step) both derive from LoopState, so a request's keys, what is measured and how time
// integrates the free blocks are written once. Units: seconds (times), tokens (lengths), blocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <vector>

#include "block_pool.hpp"
#include "policies/belady.hpp"
#include "prefix.hpp"

namespace wakman {

// The key of block `block` (0-based, over prompt and output) of request `request` when the trace
// has none: what vLLM computes from tokens no other request shares (splitmix64 of both numbers
// under a fixed tag; a collision with a trace key has probability about 2^-64 per pair).
inline Key unique_output_key(uint64_t request, uint64_t block) {
  Key z = 0x5EEDC0DE00000000ULL ^ (request * 0x9E3779B97F4A7C15ULL) ^ (block + 0xD1B54A32D192ED03ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The key of block j of request `request`, whose first `full` blocks have the trace keys `prompt` and
// whose next blocks have the trace's output keys `outputs[0:n_out]`: a prompt key, an output key, or
// unique_output_key(request, j) (a block no trace key names: vLLM hashes tokens only it has).
inline Key request_block_key(const Key* prompt, int64_t full, const Key* outputs, int64_t n_out, uint64_t request,
                             int64_t j) {
  if (j < full) return prompt[j];
  if (j - full < n_out) return outputs[j - full];
  return unique_output_key(request, static_cast<uint64_t>(j));
}

// One request of the trace; its keys are keys[key_at : key_at + n_keys] and outputs[out_at : out_at + n_out]
// of the loop's flat arrays.
struct ServeRequest {
  double arrival_s;
  int64_t prompt_tokens, output_tokens, block_size;
  size_t key_at, n_keys, out_at, n_out;
};

struct IntervalCell {
  double start_s;
  int64_t admissions = 0, prompt_tokens = 0, hit_tokens = 0, evictions = 0;
  double free_block_seconds = 0.0, seconds = 0.0;
  int32_t policy = -1;  // Hooks::policy_tag of the live policy
};

struct ServeTotals {
  int64_t measured_requests = 0, prompt_tokens = 0, hit_tokens = 0, block_lookups = 0, block_hits = 0;
  int64_t preemptions = 0, rejected = 0;  // rejected: after the warm-up, as measured_requests
  std::vector<double> queueing_delays_s, ttfts_s;
  std::vector<double> measured_arrivals_s;  // arrival of each measured admission, in queueing_delays_s order
  std::vector<int64_t> first_hit_tokens;    // per request: hit tokens at its first admission, -1 if never admitted
  double prefill_busy_s = 0.0;              // seconds of the measured requests' prefill work, re-admissions included
  int64_t backlog_at_last_arrival = -1;     // requests waiting (to be admitted, or for the prefill lane)
                                            // once the last arrival was admitted or queued
  std::vector<IntervalCell> intervals;
  double now = 0.0, t0 = 0.0, free_area = 0.0;
  bool started = false;
};

class ServeHooks {
 public:
  virtual ~ServeHooks() = default;
  virtual void on_arrival(double /*now*/, size_t /*request*/) {}
  virtual void on_time(double /*now*/) {}
  // An integration reached now without a controller call (the step loop, at a step's end).
  virtual void on_end(double /*now*/) {}
  // Request `request` has sampled `generated` output tokens (the step loop, after each sample).
  virtual void on_sampled(size_t /*request*/, int64_t /*generated*/) {}
  // A tag for the pool's live policy (called when the pool's policy object changes).
  virtual int32_t policy_tag() = 0;
};

// Python's float floor division (CPython float_floor_div), bit for bit.
inline double py_floor_div(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) div -= 1.0;
  }
  if (div != 0.0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, vx / wx);
}

class LoopState {
 protected:
  // belady_offsets: empty, or each request's start offset in a Belady policy's future (size n + 1).
  LoopState(BlockPool& pool, std::vector<ServeRequest> requests, std::vector<Key> keys, std::vector<Key> outputs,
            std::vector<uint8_t> measured, double interval_s, std::vector<int64_t> belady_offsets, ServeHooks& hooks)
      : pool_(pool),
        reqs_(std::move(requests)),
        keys_(std::move(keys)),
        outputs_(std::move(outputs)),
        measured_(std::move(measured)),
        interval_s_(interval_s),
        belady_offsets_(std::move(belady_offsets)),
        hooks_(hooks),
        full_(reqs_.size()) {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const ServeRequest& r = reqs_[i];
      full_[i] = full_blocks(static_cast<int64_t>(r.n_keys), r.prompt_tokens, r.block_size);
    }
    pool_.reserve_runs(reqs_.size());
    out_.first_hit_tokens.assign(reqs_.size(), -1);
  }

  // The prompt blocks of request `index` that have trace keys (they can be cached and hit).
  int64_t full(uint32_t index) const { return full_[index]; }

  // The key of block j of request index: a prompt key, the trace's output key, or a unique one.
  Key block_key(uint32_t index, int64_t j) const {
    const ServeRequest& r = reqs_[index];
    return request_block_key(keys_.data() + r.key_at, full_[index], outputs_.data() + r.out_at,
                             static_cast<int64_t>(r.n_out), index, j);
  }

  // The session hints where the trace has session ids: each request's session key (0: none; empty:
  // no request has one); with end_after_s >= 0 (seconds), each session's end is told that long after
  // its last-arriving request is done (at the first arrival or finish at or after that time).
  void set_sessions(std::vector<Key> sessions, double end_after_s) {
    sessions_ = std::move(sessions);
    end_after_s_ = end_after_s;
    last_of_session_.assign(sessions_.size(), 0);
    if (end_after_s < 0 || sessions_.empty()) return;
    KeyMap seen;
    for (size_t i = sessions_.size(); i-- > 0;) {
      if (sessions_[i] == 0 || seen.find(sessions_[i]) >= 0) continue;
      seen.insert(sessions_[i], 0);
      last_of_session_[i] = 1;
    }
  }

  // The policy hears of request i's arrival: first the session ends now due, then its session
  // (in_session) where it has one, then its full prompt blocks' keys (a short-keyed prompt's past its
  // trace keys are the keys only it has, block_key, as vLLM's plugin passes every full block's hash),
  // and its output keys when the host knows them (vLLM does not: its plugin passes none).
  void announce(size_t i, double now, bool with_outputs) {
    const ServeRequest& r = reqs_[i];
    tell_due_ends(now);
    Policy& policy = pool_.policy();
    if (!sessions_.empty() && sessions_[i] != 0) policy.in_session(sessions_[i]);
    const Key* prompt = keys_.data() + r.key_at;
    int64_t n = full_[i];
    if (const int64_t cacheable = r.prompt_tokens / r.block_size; n < cacheable) {
      announced_.clear();
      for (int64_t j = 0; j < cacheable; ++j) announced_.push_back(block_key(static_cast<uint32_t>(i), j));
      prompt = announced_.data();
      n = cacheable;
    }
    policy.on_request(prompt, static_cast<size_t>(n), outputs_.data() + r.out_at, with_outputs ? r.n_out : 0, now);
  }

  // vLLM's max_model_len: request i's prompt and outputs (at least one token) exceed the pool's
  // tokens. Both loops refuse it at its arrival with this: counted (after the warm-up only, so
  // measured + rejected = those requests) and done, so its session's end can come; it never waits
  // and never reaches the hooks or the policy's request hint. Returns whether it was refused.
  bool refuse_if_too_large(uint32_t i, double now) {
    const ServeRequest& r = reqs_[i];
    if (r.prompt_tokens + std::max<int64_t>(r.output_tokens, 1) <= pool_.capacity() * r.block_size) return false;
    out_.rejected += measured_[i];
    request_done(i, now);
    tell_due_ends(now);
    return true;
  }

  // Request i is done at now (finished, its blocks released; or refused as larger than the pool):
  // the last-arriving request of its session sets the session's end due end_after_s later. The
  // loop tells the ends due (tell_due_ends) once the requests done at the same moment are released.
  void request_done(size_t i, double now) {
    if (last_of_session_.empty() || !last_of_session_[i]) return;
    ends_.push({now + end_after_s_, ends_told_ + ends_.size(), sessions_[i]});
  }
  // Tells the policy every session end due at or before now.
  void tell_due_ends(double now) {
    for (; !ends_.empty() && ends_.top().due_s <= now; ++ends_told_) {
      pool_.policy().end_session(ends_.top().session);
      ends_.pop();
    }
  }

  // An admission of request index at out_.now with `hits` hit blocks: at its first admission, the
  // interval's counts and first_hit_tokens; returns whether that first admission is measured (not in the
  // warm-up), counted in the totals (prompt and hit tokens, lookups, queueing delay).
  bool count_admission(uint32_t index, int64_t hits, bool first) {
    const ServeRequest& r = reqs_[index];
    const int64_t hit_tokens = hits * r.block_size;
    if (first) {  // the interval series counts first admissions (a re-admission is work done again)
      IntervalCell& cell = interval(out_.now);
      ++cell.admissions;
      cell.prompt_tokens += r.prompt_tokens;
      cell.hit_tokens += hit_tokens;
      out_.first_hit_tokens[index] = hit_tokens;
    }
    const bool counted = first && measured_[index];
    if (counted) {
      ++out_.measured_requests;
      out_.prompt_tokens += r.prompt_tokens;
      out_.hit_tokens += hit_tokens;
      out_.block_lookups += static_cast<int64_t>(r.n_keys);
      out_.block_hits += hits;
      out_.queueing_delays_s.push_back(out_.now - r.arrival_s);
      out_.measured_arrivals_s.push_back(r.arrival_s);
    }
    return counted;
  }

  // Belady's clock moves past request index's accesses before it is admitted.
  void seek_belady(uint32_t index) {
    if (!belady_offsets_.empty())
      if (auto* b = dynamic_cast<Belady*>(&pool_.policy())) b->seek(belady_offsets_[index + 1]);
  }

  // The cell of the interval holding t; cells start at the first event's interval (a trace whose
  // times start late costs no cell before it). A run whose clock passes kMaxIntervalCells intervals
  // (a server far behind its arrivals: the run's end, not the arrivals, sets the series' length)
  // stops with std::length_error (Python's ValueError) before the series fills the memory.
  static constexpr double kMaxIntervalCells = 2'000'000;  // 96 MB of cells
  IntervalCell& interval(double t) {
    const double number = py_floor_div(t, interval_s_);
    auto& cells = out_.intervals;
    if (cells.empty()) first_interval_ = number;
    if (number - first_interval_ >= kMaxIntervalCells)
      throw std::length_error("serve: the run's clock passed " + std::to_string(static_cast<int64_t>(kMaxIntervalCells)) +
                              " intervals of " + num(interval_s_) + " s (its server fell behind the arrivals, to " +
                              num(t) + " s): speed the modelled server up or give a longer interval "
                              "(simulate's --interval-s)");
    size_t index = static_cast<size_t>(number - first_interval_);
    while (cells.size() <= index) {
      IntervalCell c;
      c.start_s = (first_interval_ + static_cast<double>(cells.size())) * interval_s_;
      cells.push_back(c);
    }
    return cells[index];
  }
  double first_interval_ = 0.0;  // the number (start / interval_s) of out_.intervals[0]

  // Integrate the free-block count from now to t (time-weighted means), then tell the controller
  // (unless `tell` is false: the step loop integrating a step's held blocks to its end, and after
  // its last step; the free-block log is sampled then too, through on_end).
  void advance(double t, bool tell = true) {
    if (!out_.started) {
      out_.started = true;
      out_.t0 = out_.now = t;
    }
    if (tag_ < 0 || pool_.generation() != tagged_) {
      tagged_ = pool_.generation();
      tag_ = hooks_.policy_tag();
    }
    {
      IntervalCell& cell = interval(out_.now);
      cell.evictions += pool_.evictions() - counted_evictions_;
      cell.policy = tag_;
      counted_evictions_ = pool_.evictions();
    }
    const double free = static_cast<double>(pool_.free());
    double start = out_.now;
    while (start < t) {
      IntervalCell& cell = interval(start);
      double end = std::min(t, cell.start_s + interval_s_);
      cell.policy = tag_;  // the live policy through the stretch (an interval with no event had none)
      cell.free_block_seconds += free * (end - start);
      cell.seconds += end - start;
      start = end > start ? end : t;
    }
    if (t > out_.now) {
      out_.free_area += free * (t - out_.now);
      out_.now = t;
    }
    if (tell) hooks_.on_time(t);
    else hooks_.on_end(t);
  }

  BlockPool& pool_;
  std::vector<ServeRequest> reqs_;
  std::vector<Key> keys_, outputs_;
  std::vector<uint8_t> measured_;
  double interval_s_;
  std::vector<int64_t> belady_offsets_;
  ServeHooks& hooks_;
  ServeTotals out_;

 private:
  struct SessionEnd {
    double due_s;
    size_t seq;  // ties told in the order they became due
    Key session;
    bool operator>(const SessionEnd& o) const { return due_s != o.due_s ? due_s > o.due_s : seq > o.seq; }
  };
  std::vector<int64_t> full_;
  std::vector<Key> announced_;           // a short-keyed request's full prompt blocks' keys (announce)
  std::vector<Key> sessions_;            // set_sessions
  std::vector<uint8_t> last_of_session_;  // set_sessions: request i is its session's last
  double end_after_s_ = -1.0;
  std::priority_queue<SessionEnd, std::vector<SessionEnd>, std::greater<>> ends_;  // due, not yet told
  size_t ends_told_ = 0;
  int64_t counted_evictions_ = 0;
  uint64_t tagged_ = 0;  // the pool's policy generation that tag_ names
  int32_t tag_ = -1;
};

}  // namespace wakman
