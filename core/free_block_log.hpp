// FreeBlockLog: the adaptive manager's record of a pool's free-block count over time, so that each
// window's time-weighted mean is exact (src/wakman/adaptive/estimator.py states what is logged).
//
// A sample (now s, free blocks) says the pool had that many free blocks from `now` on; it closes the
// previous sample's segment [previous now, now) when time moved forward. A sample back in time is
// ignored. mean(start, end) is the time-weighted mean over the part of [start, end) the segments
// cover (the last sample's count where they cover none), accumulated segment by segment in order,
// as the Python loop it replaced did, so the figures are the same bit for bit. Memory: one segment
// (24 bytes) per sample since the oldest kept; forget_before(t) drops the segments that end by t.
// Units: seconds, blocks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>

namespace wakman {

class FreeBlockLog {
 public:
  void sample(double now, int64_t free_blocks) {
    if (started_ && now > last_t_) segments_.push_back(Segment{last_t_, now, last_free_});
    if (!started_ || now >= last_t_) {
      started_ = true;
      last_t_ = now;
      last_free_ = free_blocks;
    }
  }

  double mean(double start_s, double end_s) const {
    double area = 0.0, covered = 0.0;
    for (const Segment& s : segments_) {
      const double overlap = std::min(s.end, end_s) - std::max(s.start, start_s);
      if (overlap > 0) {
        area += static_cast<double>(s.free) * overlap;
        covered += overlap;
      }
    }
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
