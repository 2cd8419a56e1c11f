// ServeLoop: serve mode's discrete-event loop over a BlockPool. The semantics (FCFS admission,
// one prefill lane, decode block events, preemption of the most recently admitted request, what is
// counted) are stated once, in src/wakman/simulation/serve.py; this is their only implementation.
//
// Units: seconds (times), tokens (lengths), blocks (pool). Float arithmetic follows serve.py's
// formulas operation for operation (Python's float floor division included), so the figures are
// those of the Python loop it replaced, bit for bit. A controller (the adaptive manager, test
// checkers) is reached through Hooks at every arrival and every event.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <queue>
#include <vector>

#include "block_pool.hpp"
#include "policies/belady.hpp"

namespace wakman {

struct ServerParams {
  double prefill_tokens_per_s, prefill_overhead_s, decode_tokens_per_s;
  int64_t max_running;
  // vLLM hashes and caches every block its generated tokens fill. A block past the trace's output
  // keys gets unique_output_key(request, block): cached, taking room, never looked up again.
  bool cache_outputs = true;
  // vLLM admits (looks up, allocates) a waiting request only when it schedules its prefill: with
  // this set, admission waits until the prefill lane is free instead of queueing on the lane.
  bool admit_when_lane_free = false;
  double prefill_s(int64_t uncached_tokens) const {
    return prefill_overhead_s + static_cast<double>(uncached_tokens) / prefill_tokens_per_s;
  }
  double decode_s(int64_t tokens) const { return static_cast<double>(tokens) / decode_tokens_per_s; }
};

// The key of block `block` (0-based, over prompt and output) of request `request` when the trace
// has none: what vLLM computes from tokens no other request shares (splitmix64 of both numbers
// under a fixed tag; a collision with a trace key has probability about 2^-64 per pair).
inline Key unique_output_key(uint64_t request, uint64_t block) {
  Key z = 0x5EEDC0DE00000000ULL ^ (request * 0x9E3779B97F4A7C15ULL) ^ (block + 0xD1B54A32D192ED03ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
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
  int64_t preemptions = 0, rejected = 0;
  std::vector<double> queueing_delays_s, ttfts_s;
  std::vector<double> measured_arrivals_s;  // arrival of each measured admission, in queueing_delays_s order
  std::vector<int64_t> first_hit_tokens;    // per request: hit tokens at its first admission, -1 if never admitted
  double prefill_busy_s = 0.0;              // the prefill lane's busy time over every admission (re-admissions too)
  int64_t backlog_at_last_arrival = -1;     // requests waiting once the last arrival was admitted or queued
  std::vector<IntervalCell> intervals;
  double now = 0.0, t0 = 0.0, free_area = 0.0;
  bool started = false;
};

class ServeHooks {
 public:
  virtual ~ServeHooks() = default;
  virtual void on_arrival(double /*now*/, size_t /*request*/) {}
  virtual void on_time(double /*now*/) {}
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

class ServeLoop {
 public:
  // belady_offsets: empty, or each request's start offset in a Belady policy's future (size n + 1).
  ServeLoop(BlockPool& pool, const ServerParams& server, std::vector<ServeRequest> requests, std::vector<Key> keys,
            std::vector<Key> outputs, std::vector<uint8_t> measured, double interval_s,
            std::vector<int64_t> belady_offsets, ServeHooks& hooks)
      : pool_(pool),
        server_(server),
        reqs_(std::move(requests)),
        keys_(std::move(keys)),
        outputs_(std::move(outputs)),
        measured_(std::move(measured)),
        interval_s_(interval_s),
        belady_offsets_(std::move(belady_offsets)),
        hooks_(hooks),
        runs_(reqs_.size()) {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const ServeRequest& r = reqs_[i];
      Run& run = runs_[i];
      run.total = (r.prompt_tokens + r.block_size - 1) / r.block_size;
      run.full = std::min<int64_t>(static_cast<int64_t>(r.n_keys), r.prompt_tokens / r.block_size);
      run.max_hit = std::min<int64_t>(static_cast<int64_t>(r.n_keys), (r.prompt_tokens - 1) / r.block_size);
      run.last = r.prompt_tokens + std::max<int64_t>(r.output_tokens, 1) - 1;
    }
    pool_.reserve_runs(reqs_.size());
    out_.first_hit_tokens.assign(reqs_.size(), -1);
  }

  ServeTotals& run() {
    const size_t n = reqs_.size();
    size_t i = 0;
    while (i < n || !events_.empty()) {
      double next_arrival = i < n ? reqs_[i].arrival_s : std::numeric_limits<double>::infinity();
      if (!events_.empty() && events_.top().t <= next_arrival) {
        Event e = events_.top();
        events_.pop();
        advance(e.t);
        if (e.kind == kLane) {
          lane_event_pending_ = false;
        } else if (e.version != runs_[e.index].version) {
          continue;
        } else if (e.kind == kBlock) on_block(e.index);
        else on_finish(e.index);
      } else {
        advance(next_arrival);
        hooks_.on_arrival(next_arrival, i);
        {
          const ServeRequest& r = reqs_[i];
          pool_.policy().on_request(keys_.data() + r.key_at, static_cast<size_t>(runs_[i].full),
                                    outputs_.data() + r.out_at, r.n_out, next_arrival);
        }
        waiting_.push_back(static_cast<uint32_t>(i));
        ++i;
        try_admit();
        if (i == n) out_.backlog_at_last_arrival = static_cast<int64_t>(waiting_.size());
        continue;
      }
      try_admit();
    }
    return out_;
  }

  ServeTotals& totals() { return out_; }

 private:
  enum : uint8_t { kBlock = 0, kFinish = 1, kLane = 2 };
  struct Event {
    double t;
    uint64_t seq;
    uint8_t kind;
    uint32_t index, version;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.t > b.t || (a.t == b.t && a.seq > b.seq); }
  };
  struct Run {
    int64_t blocks = 0;  // held now
    int64_t total = 0, full = 0, max_hit = 0, last = 0;  // prompt blocks, cacheable, may hit; KV tokens at the end
    uint32_t version = 0;
    bool started = false;
    double prefill_end = 0.0;
  };

  IntervalCell& interval(double t) {
    size_t index = static_cast<size_t>(py_floor_div(t, interval_s_));
    auto& cells = out_.intervals;
    while (cells.size() <= index) {
      IntervalCell c;
      c.start_s = static_cast<double>(cells.size()) * interval_s_;
      cells.push_back(c);
    }
    return cells[index];
  }

  // Integrate the free-block count from now to t (time-weighted means), then tell the controller.
  void advance(double t) {
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
      cell.free_block_seconds += free * (end - start);
      cell.seconds += end - start;
      start = end > start ? end : t;
    }
    if (t > out_.now) {
      out_.free_area += free * (t - out_.now);
      out_.now = t;
    }
    hooks_.on_time(t);
  }

  void push(double t, uint8_t kind, uint32_t index) {
    events_.push(Event{t, ++seq_, kind, index, runs_[index].version});
  }

  void try_admit() {
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < server_.max_running) {
      if (server_.admit_when_lane_free && lane_free_ > out_.now) {
        if (!lane_event_pending_) {
          events_.push(Event{lane_free_, ++seq_, kLane, 0, 0});
          lane_event_pending_ = true;
        }
        return;
      }
      uint32_t index = waiting_.front();
      const ServeRequest& r = reqs_[index];
      if ((runs_[index].last + r.block_size - 1) / r.block_size > pool_.capacity()) {
        ++out_.rejected;  // it could never finish (vLLM: max_model_len must fit the cache)
        waiting_.pop_front();
        continue;
      }
      if (!admit(index)) return;
      waiting_.pop_front();
    }
  }

  bool admit(uint32_t index) {
    Run& run = runs_[index];
    const ServeRequest& r = reqs_[index];
    if (!belady_offsets_.empty())
      if (auto* b = dynamic_cast<Belady*>(&pool_.policy())) b->seek(belady_offsets_[index + 1]);
    if (r.n_keys > 0) pool_.policy().inserting_for(keys_[r.key_at]);
    int64_t hits = pool_.admit_run(index, keys_.data() + r.key_at, static_cast<size_t>(run.max_hit),
                                   static_cast<size_t>(run.total), static_cast<size_t>(run.full));
    if (hits < 0) return false;
    run.blocks = run.total;
    bool first = !run.started;
    run.started = true;
    running_.push_back(index);
    const int64_t hit_tokens = hits * r.block_size;
    IntervalCell& cell = interval(out_.now);
    ++cell.admissions;
    cell.prompt_tokens += r.prompt_tokens;
    cell.hit_tokens += hit_tokens;
    if (first) out_.first_hit_tokens[index] = hit_tokens;
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
    double start = std::max(out_.now, lane_free_);
    const double prefill = server_.prefill_s(r.prompt_tokens - hit_tokens);
    out_.prefill_busy_s += prefill;
    run.prefill_end = start + prefill;
    lane_free_ = run.prefill_end;
    if (counted) out_.ttfts_s.push_back(run.prefill_end - r.arrival_s);
    schedule_next(index);
    return true;
  }

  void schedule_next(uint32_t index) {
    const Run& run = runs_[index];
    const ServeRequest& r = reqs_[index];
    int64_t boundary = run.blocks * r.block_size;  // the held blocks are full at this token count
    if (boundary <= run.last && boundary >= r.prompt_tokens)
      push(run.prefill_end + server_.decode_s(boundary - r.prompt_tokens), kBlock, index);
    else
      push(run.prefill_end + server_.decode_s(std::max<int64_t>(r.output_tokens, 1)), kFinish, index);
  }

  void on_block(uint32_t index) {
    Run& run = runs_[index];
    const ServeRequest& r = reqs_[index];
    int64_t j = run.blocks - 1;  // the last held block just filled up
    int64_t out = j - run.full;
    if (out >= 0 && (out < static_cast<int64_t>(r.n_out) || server_.cache_outputs)) {
      bool has_parent = j > 0;
      Key parent = j > 0 ? block_key(index, j - 1) : 0;
      if (r.n_keys > 0) pool_.policy().inserting_for(keys_[r.key_at]);
      pool_.fill_last(index, block_key(index, j), parent, has_parent);
    }
    if ((j + 1) * r.block_size >= run.last) {  // no token left needs a new block
      push(run.prefill_end + server_.decode_s(std::max<int64_t>(r.output_tokens, 1)), kFinish, index);
      return;
    }
    while (pool_.free() < 1) {
      uint32_t victim = running_.back();
      preempt(victim);
      if (victim == index) return;
    }
    run.blocks = static_cast<int64_t>(pool_.extend_run(index));
    schedule_next(index);
  }

  // The key of held block j of request index: a prompt key, the trace's output key, or a unique one.
  Key block_key(uint32_t index, int64_t j) const {
    const ServeRequest& r = reqs_[index];
    const int64_t full = runs_[index].full;
    if (j < full) return keys_[r.key_at + j];
    const int64_t out = j - full;
    if (out < static_cast<int64_t>(r.n_out)) return outputs_[r.out_at + out];
    return unique_output_key(index, static_cast<uint64_t>(j));
  }

  void drop_running(uint32_t index) { running_.erase(std::find(running_.begin(), running_.end(), index)); }

  void preempt(uint32_t index) {
    Run& run = runs_[index];
    pool_.release_run(index);
    run.blocks = 0;
    ++run.version;
    drop_running(index);
    waiting_.push_front(index);
    ++out_.preemptions;
  }

  void on_finish(uint32_t index) {
    pool_.release_run(index);
    runs_[index].blocks = 0;
    drop_running(index);
  }

  BlockPool& pool_;
  ServerParams server_;
  std::vector<ServeRequest> reqs_;
  std::vector<Key> keys_, outputs_;
  bool lane_event_pending_ = false;  // a kLane event is queued at lane_free_
  std::vector<uint8_t> measured_;
  double interval_s_;
  std::vector<int64_t> belady_offsets_;
  ServeHooks& hooks_;
  std::vector<Run> runs_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::deque<uint32_t> waiting_;
  std::vector<uint32_t> running_;
  double lane_free_ = 0.0;
  uint64_t seq_ = 0;
  int64_t counted_evictions_ = 0;
  uint64_t tagged_ = 0;  // the pool's policy generation that tag_ names
  int32_t tag_ = -1;
  ServeTotals out_;
};

}  // namespace wakman
