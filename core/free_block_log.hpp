// FreeBlockLog: the adaptive manager's record of a pool's free-block count over time, so that each
// window's time-weighted mean is exact (src/wakman/adaptive/estimator.py states what is logged).
//
// A sample (now s, free blocks) says the pool had that many free blocks from `now` on, until the next
// sample; it closes the previous sample's segment [previous now, now) when time moved forward, and a
// second sample at the same time replaces the first's count. A sample back in time is ignored.
// mean(start, end) is the time-weighted mean over the part of [start, end) the samples cover (the
// closed segments, then the last sample's count from its time on; before the first sample nothing
// is covered, and where nothing is, the last sample's count), accumulated segment by segment in
// order. A sample at a time that is not finite, or of a negative count, is refused
// (invalid_argument: it would make every later mean NaN). Memory: one segment (24 bytes) per sample
// since the oldest kept; forget_before(t) drops the segments that end by t. Units: seconds, blocks.
// The serve loops' hook samples, at each event, the count since the previous event at that event's
// time (bind_block_pool.cpp's PyServeHooks): the count read before an event is processed is the one
// that held since the event before it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>

namespace wakman {

class FreeBlockLog {
 public:
  void sample(double now, int64_t free_blocks) {
    if (!std::isfinite(now) || free_blocks < 0)
      throw std::invalid_argument("free-block log: a sample needs a finite time in seconds and a count >= 0, got (" +
                                  std::to_string(now) + " s, " + std::to_string(free_blocks) + " blocks)");
    if (started_ && now > last_t_) segments_.push_back(Segment{last_t_, now, last_free_});
    if (!started_ || now >= last_t_) {
      started_ = true;
      last_t_ = now;
      last_free_ = free_blocks;
    }
  }

  double mean(double start_s, double end_s) const {
    double area = 0.0, covered = 0.0;
    auto add = [&](double start, double end, int64_t free) {
      const double overlap = std::min(end, end_s) - std::max(start, start_s);
      if (overlap > 0) {
        area += static_cast<double>(free) * overlap;
        covered += overlap;
      }
    };
    for (const Segment& s : segments_) add(s.start, s.end, s.free);
    if (started_) add(last_t_, end_s, last_free_);  // the last sample's count holds from its time on
    return covered > 0 ? area / covered : static_cast<double>(last_free_);
  }

  void forget_before(double t) {
    while (!segments_.empty() && segments_.front().end <= t) segments_.pop_front();
  }

  size_t size() const { return segments_.size(); }

 private:
  struct Segment {
    double start, end;
    int64_t free;
  };
  std::deque<Segment> segments_;
  bool started_ = false;
  double last_t_ = 0.0;
  int64_t last_free_ = 0;
};

}  // namespace wakman
