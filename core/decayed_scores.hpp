// DecayedScores: the persistent shadows' per-request scores over the last window (wakman-plus;
// src/wakman/adaptive/manager.py states the rule). Per request: its arrival (s), its prompt tokens
// and each candidate's hit tokens under vLLM's first-miss rule. rates(half_life) weighs a request
// by 0.5 ** ((newest arrival - its arrival) / half_life) (1 without a half-life) and returns, per
// candidate, weighted hit tokens / weighted prompt tokens (0 when no prompt tokens), summed in
// arrival order as the Python loop it replaced did, so the figures are the same bit for bit.
// Memory: 16 + 8 * candidates bytes per request in the window.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

namespace wakman {

class DecayedScores {
 public:
  explicit DecayedScores(size_t candidates) : candidates_(candidates) {}

  size_t candidates() const { return candidates_; }
  size_t size() const { return arrivals_.size(); }

  // hits[i]: candidate i's hit tokens for this request (candidates() of them).
  void add(double arrival_s, int64_t prompt_tokens, const int64_t* hits) {
    arrivals_.push_back(arrival_s);
    prompts_.push_back(prompt_tokens);
    hits_.insert(hits_.end(), hits, hits + candidates_);
  }

  // Drop the requests that arrived before horizon_s (the oldest first).
  void forget_before(double horizon_s) {
    while (!arrivals_.empty() && arrivals_.front() < horizon_s) {
      arrivals_.pop_front();
      prompts_.pop_front();
      hits_.erase(hits_.begin(), hits_.begin() + static_cast<std::ptrdiff_t>(candidates_));
    }
  }

  // Per candidate, the weighted hit rate; has_half_life false: every request weighs 1.
  std::vector<double> rates(bool has_half_life, double half_life_s) const {
    std::vector<double> out(candidates_, 0.0);
    if (arrivals_.empty()) return out;
    const double newest = arrivals_.back();
    weights_.resize(arrivals_.size());
    double prompt = 0.0;
    for (size_t j = 0; j < arrivals_.size(); ++j) {
      weights_[j] = has_half_life ? std::pow(0.5, (newest - arrivals_[j]) / half_life_s) : 1.0;
      prompt += weights_[j] * static_cast<double>(prompts_[j]);
    }
    if (prompt == 0.0) return out;
    for (size_t i = 0; i < candidates_; ++i) {
      double hit = 0.0;
      for (size_t j = 0; j < arrivals_.size(); ++j) hit += weights_[j] * static_cast<double>(hits_[j * candidates_ + i]);
      out[i] = hit / prompt;
    }
    return out;
  }

 private:
  size_t candidates_;
  std::deque<double> arrivals_;
  std::deque<int64_t> prompts_;
  std::deque<int64_t> hits_;  // candidates_ per request, in arrival order
  mutable std::vector<double> weights_;
};

}  // namespace wakman
