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
#include <cstdint>
#include <deque>
#include <limits>
#include <queue>
#include <vector>

#include "serve_state.hpp"

namespace wakman {

struct ServerParams {
  double prefill_tokens_per_s, prefill_overhead_s, decode_tokens_per_s;
  int64_t max_running;
  // vLLM hashes and caches every block its generated tokens fill. A block past the trace's output
  // keys gets unique_output_key(request, block): cached, taking room, never looked up again.
  bool cache_outputs = true;
  double prefill_s(int64_t uncached_tokens) const {
    return prefill_overhead_s + static_cast<double>(uncached_tokens) / prefill_tokens_per_s;
  }
  double decode_s(int64_t tokens) const { return static_cast<double>(tokens) / decode_tokens_per_s; }
};

class ServeLoop : LoopState {
 public:
  using LoopState::set_sessions;
  // belady_offsets: empty, or each request's start offset in a Belady policy's future (size n + 1).
  ServeLoop(BlockPool& pool, const ServerParams& server, std::vector<ServeRequest> requests, std::vector<Key> keys,
            std::vector<Key> outputs, std::vector<uint8_t> measured, double interval_s,
            std::vector<int64_t> belady_offsets, ServeHooks& hooks)
      : LoopState(pool, std::move(requests), std::move(keys), std::move(outputs), std::move(measured), interval_s,
                  std::move(belady_offsets), hooks),
        server_(server),
        runs_(reqs_.size()) {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const ServeRequest& r = reqs_[i];
      Run& run = runs_[i];
      run.total = (r.prompt_tokens + r.block_size - 1) / r.block_size;
      run.full = r.prompt_tokens / r.block_size;
      run.max_hit = hit_limit(static_cast<int64_t>(r.n_keys), r.prompt_tokens, r.block_size);
      run.last = r.prompt_tokens + std::max<int64_t>(r.output_tokens, 1) - 1;
    }
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
        if (e.version != runs_[e.index].version) {
          continue;
        } else if (e.kind == kBlock) on_block(e.index);
        else on_finish(e.index);
      } else {
        advance(next_arrival);
        arrive(static_cast<uint32_t>(i), next_arrival);
        ++i;
        try_admit();
        if (i == n) out_.backlog_at_last_arrival = backlog();
        continue;
      }
      try_admit();
    }
    return out_;
  }

  ServeTotals& totals() { return out_; }

 private:
  enum : uint8_t { kBlock = 0, kFinish = 1 };
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
    // prompt blocks, its full ones (all cached at admission), blocks that may hit; KV tokens at the end
    int64_t total = 0, full = 0, max_hit = 0, last = 0;
    uint32_t version = 0;
    bool started = false;
    double prefill_start = 0.0, prefill_end = 0.0;  // its (last) prefill on the lane
    int64_t ttft_slot = -1;     // its entry in ttfts_s (measured requests), or -1
    bool ttft_pending = false;  // preempted before its first token: its next admission's prefill sets it
    bool first_token = false;   // a prefill of an earlier admission ended: its first token came then
    int64_t resume_blocks = 0;  // preempted: the free blocks its re-admission waits for (0: none)
  };

  void push(double t, uint8_t kind, uint32_t index) {
    events_.push(Event{t, ++seq_, kind, index, runs_[index].version});
  }

  // A request the server accepts waits at the tail (one larger than the pool is refused at once:
  // refuse_if_too_large).
  void arrive(uint32_t index, double now) {
    if (refuse_if_too_large(index, now)) return;
    hooks_.on_arrival(now, index);
    announce(index, now, true);
    waiting_.push_back(index);
  }

  void try_admit() {
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < server_.max_running) {
      uint32_t index = waiting_.front();
      if (!admit(index)) return;
      waiting_.pop_front();
    }
  }

  bool admit(uint32_t index) {
    Run& run = runs_[index];
    const ServeRequest& r = reqs_[index];
    if (pool_.free() < run.resume_blocks) return false;
    seek_belady(index);
    hint_root(index, run.full > 0);
    // every full prompt block is cached, as vLLM hashes each; where the trace keys fewer (a
    // short-keyed prompt), the rest get keys only this request has (block_key)
    const Key* keys = keys_.data() + r.key_at;
    if (full(index) < run.full) {
      chain_.clear();
      for (int64_t j = 0; j < run.full; ++j) chain_.push_back(block_key(index, j));
      keys = chain_.data();
    }
    // a re-admission may also hit those (its first admission cached them), as in vLLM
    const int64_t max_hit =
        run.started && full(index) < run.full ? hit_limit(run.full, r.prompt_tokens, r.block_size) : run.max_hit;
    int64_t hits = pool_.admit_run(index, keys, static_cast<size_t>(max_hit), static_cast<size_t>(run.total),
                                   static_cast<size_t>(run.full));
    if (hits < 0) return false;
    run.blocks = run.total;
    bool first = !run.started;
    run.started = true;
    running_.push_back(index);
    const int64_t hit_tokens = hits * r.block_size;
    const bool counted = count_admission(index, hits, first);
    double start = std::max(out_.now, lane_free_);
    if (counted) out_.queueing_delays_s.back() = start - r.arrival_s;  // until its prefill starts
    const double prefill = server_.prefill_s(r.prompt_tokens - hit_tokens);
    if (measured_[index]) out_.prefill_busy_s += prefill;  // the measured requests' work (saturation)
    run.prefill_start = start;
    run.prefill_end = start + prefill;
    lane_free_ = run.prefill_end;
    if (counted) {  // its first token comes at the end of this prefill, unless preempted before it
      run.ttft_slot = static_cast<int64_t>(out_.ttfts_s.size());
      out_.ttfts_s.push_back(run.prefill_end - r.arrival_s);
    } else if (run.ttft_slot >= 0 && run.ttft_pending) {  // re-admitted before its first token came
      out_.ttfts_s[static_cast<size_t>(run.ttft_slot)] = run.prefill_end - r.arrival_s;
    }
    run.ttft_pending = false;
    run.resume_blocks = 0;
    schedule_next(index);
    return true;
  }

  // chain-lru's hint before blocks are cached: the request's chain, named by its first block: its
  // first trace key, or, for a request with none, once a block is full (`block_full`), the key only
  // it has (block_key), as vLLM's plugin names it by its first block hash.
  void hint_root(uint32_t index, bool block_full) {
    const ServeRequest& r = reqs_[index];
    if (r.n_keys > 0) pool_.policy().inserting_for(keys_[r.key_at]);
    else if (block_full) pool_.policy().inserting_for(block_key(index, 0));
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
    int64_t out = j - full(index);
    if (out >= 0 && (out < static_cast<int64_t>(r.n_out) || server_.cache_outputs)) {
      bool has_parent = j > 0;
      Key parent = j > 0 ? block_key(index, j - 1) : 0;
      hint_root(index, true);
      pool_.fill_last(index, block_key(index, j), parent, has_parent);
    }
    if ((j + 1) * r.block_size >= run.last) {  // no token left needs a new block
      push(run.prefill_end + server_.decode_s(std::max<int64_t>(r.output_tokens, 1)), kFinish, index);
      return;
    }
    while (pool_.free() < 1) {
      uint32_t victim = running_.back();
      preempt(victim, index);
      if (victim == index) return;
    }
    run.blocks = static_cast<int64_t>(pool_.extend_run(index));
    schedule_next(index);
  }

  void drop_running(uint32_t index) { running_.erase(std::find(running_.begin(), running_.end(), index)); }

  // Requests waiting now: for admission, or admitted and waiting for the prefill lane.
  int64_t backlog() const {
    int64_t lane = 0;
    for (uint32_t index : running_) lane += runs_[index].prefill_start > out_.now;
    return static_cast<int64_t>(waiting_.size()) + lane;
  }

  // The victim frees its blocks and waits at the queue's head; it restarts from its prompt (this
  // model keeps no sampled output, where vLLM keeps them: the step loop models that), but, as vLLM's
  // victim must fit the tokens it has sampled, it is re-admitted only once as many blocks are free
  // as it held, plus the one it was waiting for where it is the request that needed a block (else it
  // would be re-admitted at once into the blocks it just freed, and preempt itself again at the same
  // point). Preempted before the prefill of its first admission ended, it has had no first token:
  // its TTFT is its next admission's.
  void preempt(uint32_t index, uint32_t requester) {
    Run& run = runs_[index];
    const int64_t usable = pool_.capacity();
    run.resume_blocks = std::min(run.blocks + (index == requester ? 1 : 0), usable);
    if (out_.now >= run.prefill_end) run.first_token = true;
    if (out_.now < run.prefill_end) {
      if (!run.first_token && run.ttft_slot >= 0) run.ttft_pending = true;
      if (lane_free_ == run.prefill_end) {  // its prefill was the last booked: the lane gets back what is undone
        const double resume = std::max(out_.now, run.prefill_start);
        if (measured_[index]) out_.prefill_busy_s -= run.prefill_end - resume;
        lane_free_ = resume;
      }
    }
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
    request_done(index, out_.now);
    tell_due_ends(out_.now);
  }

  ServerParams server_;
  std::vector<Run> runs_;
  std::vector<Key> chain_;  // a short-keyed request's full prompt blocks' keys at its admission (reused)
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::deque<uint32_t> waiting_;
  std::vector<uint32_t> running_;
  double lane_free_ = 0.0;
  uint64_t seq_ = 0;
};

}  // namespace wakman
