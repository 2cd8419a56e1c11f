// StepLoop: serve mode on a vLLM configuration, engine step by engine step, as vLLM's V1 scheduler
// runs its block pool. The semantics (what a step schedules, admits, preempts, caches and counts)
// are stated once, in src/wakman/simulation/steps.py; this is their only implementation.
//
// Units: seconds (times), tokens (lengths), blocks (pool). Shares the trace, the figures and the
// free-block integral with ServeLoop (serve_state.hpp); a controller is reached through the same
// hooks, at every accepted arrival and at the start of every step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "serve_state.hpp"

namespace wakman {

struct StepParams {
  int64_t max_num_batched_tokens;  // tokens a step schedules at most (vLLM's token budget)
  int64_t max_num_seqs;            // running requests at most
  double step_s;                   // seconds per step
  double token_s = 0.0;            // plus seconds per token the step schedules (0: every step takes step_s)
  // vLLM hashes and caches every block its generated tokens fill (unique_output_key past the trace's
  // output keys); false leaves those blocks uncached.
  bool cache_outputs = true;
};

class StepLoop : LoopState {
 public:
  using LoopState::set_sessions;
  StepLoop(BlockPool& pool, const StepParams& params, std::vector<ServeRequest> requests, std::vector<Key> keys,
           std::vector<Key> outputs, std::vector<uint8_t> measured, double interval_s,
           std::vector<int64_t> belady_offsets, ServeHooks& hooks)
      : LoopState(pool, std::move(requests), std::move(keys), std::move(outputs), std::move(measured), interval_s,
                  std::move(belady_offsets), hooks),
        params_(params),
        runs_(reqs_.size()) {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      runs_[i].prompt = reqs_[i].prompt_tokens;
      runs_[i].max_tokens = std::max<int64_t>(reqs_[i].output_tokens, 1);
    }
  }

  ServeTotals& run() {
    const size_t n = reqs_.size();
    size_t i = 0;
    double clock = n > 0 ? reqs_[0].arrival_s : 0.0;
    while (i < n || !waiting_.empty() || !running_.empty()) {
      if (waiting_.empty() && running_.empty()) clock = std::max(clock, reqs_[i].arrival_s);
      advance(clock);
      for (; i < n && reqs_[i].arrival_s <= clock; ++i) arrive(static_cast<uint32_t>(i), clock);
      const double took = step(clock);
      if (i == n && out_.backlog_at_last_arrival < 0)
        out_.backlog_at_last_arrival = static_cast<int64_t>(waiting_.size());
      clock += took;
    }
    if (out_.started) advance(clock, false);  // the free blocks after the last step's releases
    return out_;
  }

 private:
  struct Run {
    int64_t prompt = 0, max_tokens = 0;  // tokens: the prompt, the outputs to generate (>= 1)
    int64_t generated = 0;               // output tokens sampled so far
    int64_t computed = 0;                // tokens with KV (computed or scheduled)
    int64_t cached = 0;                  // held blocks dealt with by caching (the first `cached`)
    int32_t preemptions = 0;
    bool counted = false;                // its first admission is measured
    bool first_token = false;
    bool done = false;                   // it generated its last token
  };
  struct Scheduled {
    uint32_t index;
    int64_t tokens;
  };

  int64_t tokens(const Run& r) const { return r.prompt + r.generated; }
  int64_t block_size(uint32_t index) const { return reqs_[index].block_size; }
  static int64_t blocks_for(int64_t tokens, int64_t bs) { return (tokens + bs - 1) / bs; }

  // A request the engine accepts waits at the tail (one larger than the pool is refused at once and
  // never reaches the scheduler or its hooks: refuse_if_too_large).
  void arrive(uint32_t index, double now) {
    if (refuse_if_too_large(index, now)) return;
    hooks_.on_arrival(now, index);
    announce(index, now, false);
    waiting_.push_back(index);
  }

  // One engine step at `now`; returns its duration (seconds).
  double step(double now) {
    int64_t budget = params_.max_num_batched_tokens;
    int64_t prefill_tokens = 0;  // the measured requests' prefill tokens this step (saturation)
    scheduled_.clear();
    bool preempted = false;
    // the running requests first, in admission order; one that cannot grow preempts the last
    for (size_t at = 0; at < running_.size() && budget > 0;) {
      const uint32_t index = running_[at];
      Run& r = runs_[index];
      // (never 0: a running request has sampled a token it has not computed; the rejection rule keeps
      // it under vLLM's max_model_len)
      const int64_t want = std::min(tokens(r) - r.computed, budget);
      bool grown = false;
      while (!(grown = grow(index, want))) {
        const uint32_t victim = running_.back();
        running_.pop_back();
        preempt(victim);
        preempted = true;
        if (victim == index) break;
      }
      if (!grown) break;
      if (measured_[index]) prefill_tokens += is_decode(r, want) ? 0 : want;
      scheduled_.push_back({index, want});
      budget -= want;
      ++at;
    }
    // then the waiting ones, first come first served, unless this step preempted
    while (!preempted && budget > 0 && !waiting_.empty() &&
           static_cast<int64_t>(running_.size()) < params_.max_num_seqs) {
      const uint32_t index = waiting_.front();
      const int64_t took = admit(index, budget);
      if (took < 0) break;
      waiting_.pop_front();
      running_.push_back(index);
      if (measured_[index]) prefill_tokens += took;
      scheduled_.push_back({index, took});
      budget -= took;
    }
    const int64_t scheduled_tokens = params_.max_num_batched_tokens - budget;
    const double took = params_.step_s + params_.token_s * static_cast<double>(scheduled_tokens);
    out_.prefill_busy_s +=
        took * static_cast<double>(prefill_tokens) / static_cast<double>(params_.max_num_batched_tokens);
    for (const Scheduled& s : scheduled_) runs_[s.index].computed += s.tokens;
    // the step holds its blocks until its end: integrate them over it, before any is released
    advance(now + took, false);
    // the model's answer: a token for each request whose tokens are all computed
    bool finished = false;
    for (const Scheduled& s : scheduled_) {
      Run& r = runs_[s.index];
      if (r.computed < tokens(r)) continue;  // a prefill chunk
      ++r.generated;
      hooks_.on_sampled(s.index, r.generated);
      if (!r.first_token) {
        r.first_token = true;
        if (r.counted) out_.ttfts_s.push_back(now + took - reqs_[s.index].arrival_s);
      }
      if (r.generated >= r.max_tokens) {
        pool_.release_run(s.index);
        r.done = finished = true;
        request_done(s.index, now + took);
      }
    }
    if (finished) {
      running_.erase(std::remove_if(running_.begin(), running_.end(), [this](uint32_t k) { return runs_[k].done; }),
                     running_.end());
      tell_due_ends(now + took);  // once every request finishing in this step has released its blocks
    }
    return took;
  }

  // Decoding: past its first token, computing one token, its last (prefill_busy_s leaves these out).
  bool is_decode(const Run& r, int64_t want) const {
    return r.first_token && want == 1 && r.computed + 1 == tokens(r);
  }

  // A running request computes `want` more tokens: it needs blocks for computed + want tokens
  // (false, nothing done, if the free blocks fall short); its blocks full of known tokens are cached.
  bool grow(uint32_t index, int64_t want) {
    Run& r = runs_[index];
    const int64_t bs = block_size(index);
    const int64_t need = blocks_for(r.computed + want, bs);
    const int64_t held = static_cast<int64_t>(pool_.run_blocks(index));
    if (need > held && need - held > pool_.free()) return false;
    hint_root(index);
    pool_.grow_run(index, static_cast<size_t>(need));
    cache_through(index, std::min(r.computed + want, tokens(r)) / bs);
    return true;
  }

  // Admission of the head waiting request (fresh, or preempted: its outputs so far are tokens too):
  // lookup, then, if its whole sequence fits (new blocks plus the free hit blocks), misses, touch,
  // the first chunk's blocks and their caching. Returns the tokens scheduled, or -1 (nothing done).
  int64_t admit(uint32_t index, int64_t budget) {
    Run& r = runs_[index];
    const ServeRequest& q = reqs_[index];
    const int64_t bs = q.block_size, total = tokens(r);
    const int64_t known = total / bs;
    chain_.clear();
    for (int64_t j = 0; j < known; ++j) chain_.push_back(block_key(index, j));
    int64_t limit = hit_limit(known, total, bs);  // (known >= it: the prompt and the tokens since)
    // a first admission hits the trace's keys only; a re-admission (preempted, maybe before its
    // first token) also its own blocks past them, which it cached under keys only it has, as vLLM
    // hashes its tokens
    if (r.preemptions == 0) limit = std::min(limit, full(index));
    seek_belady(index);
    const int64_t hits = static_cast<int64_t>(pool_.look_up(chain_.data(), static_cast<size_t>(limit)));
    const int64_t need = blocks_for(total, bs) - hits + static_cast<int64_t>(pool_.evictable_looked_up());
    if (need > pool_.free()) return -1;
    const int64_t want = std::min(total - hits * bs, budget);
    hint_root(index);
    pool_.start_run(index, chain_.data(), static_cast<size_t>(hits), static_cast<size_t>(known));
    r.computed = hits * bs;
    r.cached = hits;
    pool_.grow_run(index, static_cast<size_t>(blocks_for(r.computed + want, bs)));
    cache_through(index, std::min(r.computed + want, total) / bs);
    const bool counted = count_admission(index, hits, r.preemptions == 0);
    if (r.preemptions == 0) r.counted = counted;
    return want;
  }

  // Blocks cached..upto-1 of the run are full of known tokens: each becomes a cached copy under its
  // key (a block past the prompt's full blocks and the trace's output keys only with cache_outputs;
  // a short-keyed prompt's blocks past its keys are prompt blocks, always cached).
  void cache_through(uint32_t index, int64_t upto) {
    Run& r = runs_[index];
    const ServeRequest& q = reqs_[index];
    for (int64_t j = r.cached; j < upto; ++j) {
      const int64_t out = j - q.prompt_tokens / q.block_size;
      if (out >= static_cast<int64_t>(q.n_out) && !params_.cache_outputs) continue;
      pool_.fill_at(index, static_cast<size_t>(j), block_key(index, j), j > 0 ? block_key(index, j - 1) : 0, j > 0);
    }
    r.cached = std::max(r.cached, upto);
  }

  // The blocks cached next belong to the request's chain, named by its first block once its tokens
  // fill one (chain-lru's hint, as vLLM's plugin gives it before each allocation: its first block hash).
  void hint_root(uint32_t index) {
    if (tokens(runs_[index]) >= block_size(index)) pool_.policy().inserting_for(block_key(index, 0));
  }

  // vLLM's preemption: the request frees its blocks (deepest first), forgets its computed tokens
  // (it keeps its outputs) and waits at the head of the queue.
  void preempt(uint32_t index) {
    pool_.release_run(index);
    Run& r = runs_[index];
    r.computed = 0;
    r.cached = 0;
    ++r.preemptions;
    waiting_.push_front(index);
    ++out_.preemptions;
  }

  StepParams params_;
  std::vector<Run> runs_;
  std::deque<uint32_t> waiting_;
  std::vector<uint32_t> running_;
  std::vector<Scheduled> scheduled_;
  std::vector<Key> chain_;  // the admitted request's block keys (reused)
};

}  // namespace wakman
