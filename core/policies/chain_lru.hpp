// chain-lru: LRU with a probation queue for the new blocks of chains that are rarely extended,
// learned per chain root from the request stream. Semantics and parameters: chain_lru.py.
//
// Two parts, each owning its fields:
//   ExtensionStats  the request stream's side: per chain root, how often a request's end (its last
//                   full prompt block, its last output block) was extended by a later request within
//                   window_s seconds; open ends wait in a FIFO until they are extended or expire.
//   ChainLRU        the cache's side: probation P and main M (LRU queues; M gives a rarely extended
//                   root's hit blocks second chances), ghost G (FIFO of keys evicted from P), the
//                   insert context (whether the blocks inserted next belong to a rarely extended root)
//                   and its mode (recency or filter).
//                   In the adaptive mode it also owns two miniatures: plain ChainLRUs, one per mode,
//                   fed a sample of every request's blocks; the cache runs the mode whose miniature
//                   has more prefix hits.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "../driver.hpp"
#include "../node_arena.hpp"
#include "../prefix.hpp"

namespace wakman {

class ExtensionStats {
 public:
  static constexpr size_t kMaxRoots = 4096;  // further roots share one entry
  static constexpr double kPriorExtended = 0.5, kPriorResolved = 1.0;
  static constexpr double kHalveAt = 1024.0;  // a root's counts halve when its resolved count reaches it

  explicit ExtensionStats(double window_s) : window_s_(window_s) {}

  // A request arrived at now_s: expire the ends older than the window, count the earlier ends its
  // prompt extends (keys[0 .. full-2]), then register its own ends. Returns its root's slot.
  int32_t observe(const Key* keys, size_t full, const Key* outputs, size_t n_out, double now_s) {
    expire(now_s);
    for (size_t i = 0; i + 1 < full; ++i) {
      int32_t e = end_index_.find(keys[i]);
      if (e >= 0) {
        count(ends_[e].root, true);
        close(e);
      }
    }
    if (full == 0 && n_out == 0) return -1;
    int32_t root = root_slot(full > 0 ? keys[0] : outputs[0]);
    if (full > 0) open(keys[full - 1], root, now_s);
    if (n_out > 0) open(outputs[n_out - 1], root, now_s);
    return root;
  }

  // P(a request's end is extended within the window) for a root, with the prior.
  double extension_rate(int32_t root) const {
    const Counts& c = roots_[root];
    return (c.extended + kPriorExtended) / (c.resolved + kPriorResolved);
  }
  int32_t root_slot(Key root) {
    int32_t r = root_index_.find(root);
    if (r >= 0) return r;
    if (roots_.size() >= kMaxRoots + 1) return 0;  // slot 0: the shared "other" entry
    if (roots_.empty()) roots_.push_back(Counts{});
    r = static_cast<int32_t>(roots_.size());
    roots_.push_back(Counts{});
    root_index_.insert(root, r);
    return r;
  }
  // The slot root_slot(root) would read, without adding the root: its own, the shared entry (slot
  // 0) once the table is full, or -1 for a root not heard while there is room (unknown).
  int32_t find_root(Key root) const {
    const int32_t r = root_index_.find(root);
    return (r >= 0 || roots_.size() < kMaxRoots + 1) ? r : 0;
  }

  size_t open_ends() const { return end_index_.size(); }
  size_t roots() const { return root_index_.size(); }
  void clear() {
    root_index_.clear();
    roots_.clear();
    end_index_.clear();
    ends_.clear();
    free_ends_.clear();
    fifo_.clear();
  }
  size_t bytes() const {
    return root_index_.bytes() + roots_.capacity() * sizeof(Counts) + end_index_.bytes() +
           ends_.capacity() * sizeof(OpenEnd) + free_ends_.capacity() * sizeof(int32_t) +
           fifo_.size() * sizeof(std::pair<int32_t, uint32_t>);
  }

 private:
  struct Counts {
    double extended = 0.0, resolved = 0.0;
  };
  struct OpenEnd {
    Key key;
    double t;
    int32_t root;
    uint32_t gen;  // bumped when the end closes or is registered again: older FIFO items are stale
  };

  void count(int32_t root, bool extended) {
    Counts& c = roots_[root];
    c.extended += extended;
    c.resolved += 1.0;
    if (c.resolved >= kHalveAt) {
      c.extended *= 0.5;
      c.resolved *= 0.5;
    }
  }
  void open(Key key, int32_t root, double now_s) {
    int32_t e = end_index_.find(key);
    if (e < 0) {
      if (!free_ends_.empty()) {
        e = free_ends_.back();
        free_ends_.pop_back();
      } else {
        e = static_cast<int32_t>(ends_.size());
        ends_.push_back(OpenEnd{key, 0.0, 0, 0});
      }
      end_index_.insert(key, e);
    }
    OpenEnd& o = ends_[e];
    o.key = key;
    o.t = now_s;
    o.root = root;
    ++o.gen;
    fifo_.emplace_back(e, o.gen);
  }
  void close(int32_t e) {
    end_index_.erase(ends_[e].key);
    ++ends_[e].gen;
    free_ends_.push_back(e);
  }
  void expire(double now_s) {
    while (!fifo_.empty()) {
      auto [e, gen] = fifo_.front();
      if (ends_[e].gen == gen) {
        if (ends_[e].t > now_s - window_s_) return;
        count(ends_[e].root, false);
        close(e);
      }
      fifo_.pop_front();
    }
  }

  double window_s_;
  KeyMap root_index_;
  std::vector<Counts> roots_;
  KeyMap end_index_;
  std::vector<OpenEnd> ends_;
  std::vector<int32_t> free_ends_;
  std::deque<std::pair<int32_t, uint32_t>> fifo_;
};

class ChainLRU final : public Policy {
 public:
  enum : uint8_t { kProbation, kMain, kGhost, kPending };
  enum class Mode : uint8_t { kRecency, kFilter, kAdaptive };
  // Node::freq: kRare (inserted for a rarely extended root), kHit (hit since its insert, or inserted
  // back from G) and the hits counted in M (at most 3)
  static constexpr uint8_t kRare = 0x80, kHit = 0x40, kCount = 0x3f, kMaxCount = 3;

  // sessions followed at once; a new one past it takes the place of the one heard from longest ago
  // (forgotten as if it had ended, without demoting anything: a client that never marks its end
  // must not stop session mode for good)
  static constexpr size_t kMaxSessions = 4096;

  // The adaptive mode's miniatures: blocks sampled 1 in `sample_every` (a power of two: the largest
  // <= capacity / kMiniBlocks, at least 2, at most 64), each miniature capacity / sample_every blocks.
  static constexpr int64_t kMiniBlocks = 2048, kMinSampleEvery = 2, kMaxSampleEvery = 64;
  static constexpr double kHorizon = 8.0;  // the duel's counts halve every kHorizon * mini capacity blocks
  static constexpr double kMargin = 0.01;   // switch when the other mode's prefix hits lead by this share
  // The floor guard: the live cache's own prefix hits on the sampled blocks against the recency
  // miniature's, over a longer memory (halving every kGuardHorizon * mini capacity blocks). While the
  // live cache trails by more than kGuardMargin of those blocks, the cache runs the recency mode.
  static constexpr double kGuardHorizon = 64.0;
  static constexpr double kGuardMargin = 0.02;
  // The switch walk's default budget: M's blocks examined a request (a bigger M is walked over
  // several requests, so no one request waits on a pass over a million-block cache).
  static constexpr int64_t kSwitchWalk = 65536;

  ChainLRU(int64_t capacity, double window_s, double threshold, double ghost_ratio, bool sessions = false,
           Mode mode = Mode::kAdaptive, double small_ratio = 0.1, int64_t switch_walk = kSwitchWalk)
      : Policy(capacity),
        window_s_(window_s),
        threshold_(threshold),
        ghost_ratio_(ghost_ratio),
        small_ratio_(small_ratio),
        switch_walk_(switch_walk),
        sessions_(sessions),
        stats_(window_s),
        adaptive_(mode == Mode::kAdaptive),
        filter_(mode == Mode::kFilter) {
    if (!(window_s > 0) || !std::isfinite(window_s))
      throw std::invalid_argument("chain-lru: window_s must be finite and > 0 seconds, got " + num(window_s));
    if (!(threshold >= 0 && threshold <= 1))
      throw std::invalid_argument("chain-lru: threshold must be in [0, 1], got " + num(threshold));
    if (!(small_ratio >= 0 && small_ratio <= 1))
      throw std::invalid_argument("chain-lru: small_ratio must be in [0, 1], got " + num(small_ratio));
    if (switch_walk < 1)
      throw std::invalid_argument("chain-lru: switch_walk must be >= 1 block, got " + std::to_string(switch_walk));
    ghost_capacity_ = ghost_capacity("chain-lru", capacity, ghost_ratio);
    if (adaptive_) {
      sample_every_ = kMinSampleEvery;
      while (sample_every_ * 2 <= capacity / kMiniBlocks && sample_every_ < kMaxSampleEvery) sample_every_ *= 2;
      const int64_t mini = std::max<int64_t>(1, capacity / sample_every_);
      for (int m = 0; m < 2; ++m)
        minis_[m] = std::make_unique<ChainLRU>(mini, window_s, threshold, ghost_ratio, false,
                                               m ? Mode::kFilter : Mode::kRecency, small_ratio);
      sampled_.reserve(256);
    }
  }
  const char* name() const override { return "chain-lru"; }
  void reserve() override {
    s_.reserve(static_cast<size_t>(capacity_ + ghost_capacity_));
    if (adaptive_)
      for (auto& mini : minis_) mini->reserve();
  }

  size_t size() const override { return probation_.size() + main_.size() + pinned_; }
  size_t num_pinned() const override { return pinned_; }
  bool contains(Key key) const override { return find_resident(key) >= 0; }
  void prefetch(Key key) const override { s_.index.prefetch(key); }
  bool is_pinned(Key key) const override {
    int32_t i = find_resident(key);
    return i >= 0 && s_.nodes[i].pinned;
  }
  bool in_ghost(Key key) const {
    int32_t i = s_.index.find(key);
    return i >= 0 && s_.nodes[i].where == kGhost;
  }
  bool in_probation(Key key) const {
    int32_t i = find_resident(key);
    return i >= 0 && s_.nodes[i].where == kProbation;
  }
  size_t ghost_size() const { return ghost_.size(); }
  size_t probation_size() const { return probation_.size(); }
  size_t probation_pinned() const { return pinned_in_probation_; }
  const ExtensionStats& stats() const { return stats_; }
  // The extension rate of a root (the prior for an unseen one).
  double extension_rate(Key root) const {
    int32_t r = stats_.find_root(root);
    return r < 0 ? ExtensionStats::kPriorExtended / ExtensionStats::kPriorResolved : stats_.extension_rate(r);
  }
  bool context_rarely_extended() const { return rarely_extended_; }
  // "recency" or "filter": the mode the cache runs now.
  const char* mode() const { return filter_ ? "filter" : "recency"; }
  bool adaptive() const { return adaptive_; }
  int64_t sample_every() const { return sample_every_; }
  int64_t mode_switches() const { return switches_; }
  // Requests heard in the filter mode, and in all (the share of the traffic served filtered).
  int64_t requests_filtered() const { return requests_filtered_; }
  int64_t requests_heard() const { return requests_heard_; }
  // Requests at which the floor guard held the cache in the recency mode (or sent it back there).
  int64_t requests_guarded() const { return requests_guarded_; }

  void begin_access(Key) {}
  int32_t find_resident(Key key) const {
    int32_t i = s_.index.find(key);
    return (i >= 0 && s_.nodes[i].where <= kMain) ? i : -1;
  }
  void hit_node(int32_t i) {
    Node& n = s_.nodes[i];
    if (n.where == kMain && (filter_ || (n.freq & kRare)) && (n.freq & kCount) < kMaxCount) ++n.freq;
    n.freq |= kHit;
    if (n.pinned) {
      pinned_in_probation_ -= (n.where == kProbation);
      n.where = kMain;
    } else {
      (n.where == kMain ? main_ : probation_).unlink(s_.nodes, i);
      n.where = kMain;
      main_.push_head(s_.nodes, i);
    }
  }

  void on_request(const Key* keys, size_t full, const Key* outputs, size_t n_out, double now_s) override {
    if (sessions_ && has_session_) follow_session(keys, full, outputs, n_out);
    has_session_ = false;
    int32_t root = stats_.observe(keys, full, outputs, n_out, now_s);
    rarely_extended_ = root >= 0 && stats_.extension_rate(root) < threshold_;
    if (adaptive_) {
      duel(keys, full, outputs, n_out);
      if (walk_left_ > 0) walk_main();
    }
  }
  bool learns_from_requests() const override { return true; }
  void in_session(Key session) override {
    session_ = session;
    has_session_ = true;
  }
  // Session mode: the session sends no more requests. Its own blocks in its last request (those
  // it brought, that no other followed session has asked for since: owner_) go to P's oldest end,
  // the deepest last (evicted first, never before a block under it); the session is no longer
  // followed (its slot is freed; its serial is not given again until serials wrap, so a later
  // session that asks for one of its blocks makes it shared).
  void end_session(Key session) override {
    if (!sessions_) return;
    const int32_t slot = session_index_.find(session);
    if (slot < 0) return;
    const auto at = static_cast<size_t>(slot);
    for (Key k : followed_[at].last)
      if (owner_.find(k) == followed_[at].serial) demote(k);
    forget_session(at);
    ++sessions_ended_;
  }
  size_t sessions_followed() const { return session_index_.size(); }
  int64_t sessions_ended() const { return sessions_ended_; }
  int64_t demoted() const { return demoted_; }
  void inserting_for(Key root) override {
    int32_t r = stats_.find_root(root);
    rarely_extended_ = r >= 0 && stats_.extension_rate(r) < threshold_;
  }

  // A ghost hit leaves G now (before the evictions that make room for it) and waits in `pending_`
  // until its insert puts it in M.
  void miss(Key key) override {
    int32_t i = s_.index.find(key);
    if (i < 0 || s_.nodes[i].where != kGhost) return;
    ghost_.unlink(s_.nodes, i);
    s_.nodes[i].where = kPending;
    pending_.push_head(s_.nodes, i);
    if (static_cast<int64_t>(pending_.size()) > pending_bound(capacity_ + ghost_capacity_)) s_.drop(s_.pop_tail(pending_));
  }

  Key evict() override {
    if (!probation_.empty() &&
        (!filter_ || main_.empty() ||
         static_cast<double>(probation_.size() + pinned_in_probation_) >=
             small_ratio_ * static_cast<double>(bound_))) {
      int32_t i = s_.pop_tail(probation_);
      Key key = s_.nodes[i].key;
      to_ghost(i);
      return key;
    }
    if (main_.empty()) no_evictable();
    while (true) {
      int32_t i = s_.pop_tail(main_);
      Node& n = s_.nodes[i];
      if (n.freq & kCount) {  // a block of a rarely extended root, hit in M: a second chance
        --n.freq;
        main_.push_head(s_.nodes, i);
        continue;
      }
      Key key = n.key;
      s_.drop(i);
      return key;
    }
  }

  void insert(Key key, bool pinned) override {
    int32_t i = s_.index.find(key);
    uint8_t where = (rarely_extended_ || filter_) ? kProbation : kMain;
    const bool back = i >= 0;  // it came back after its eviction from P: to M, as if hit
    if (back) {
      Node& n = s_.nodes[i];
      if (n.where <= kMain) bad_key("insert of a resident key", key);
      (n.where == kGhost ? ghost_ : pending_).unlink(s_.nodes, i);
      where = kMain;
    } else {
      i = s_.add(key, where);
    }
    Node& n = s_.nodes[i];
    n.where = where;
    n.freq = (rarely_extended_ ? kRare : 0) | (back ? kHit : 0);
    if (pinned) {
      n.pinned = 1;
      ++pinned_;
      pinned_in_probation_ += (where == kProbation);
    } else {
      queue(where).push_head(s_.nodes, i);
    }
  }
  void hit(Key key) override { hit_node(resident(key)); }
  void pin(Key key) override { pin_node(resident(key)); }
  void pin_node(int32_t i) {
    Node& n = s_.nodes[i];
    if (n.pinned) return;
    queue(n.where).unlink(s_.nodes, i);
    n.pinned = 1;
    ++pinned_;
    pinned_in_probation_ += (n.where == kProbation);
  }
  void unpin(Key key) override {
    int32_t i = resident(key);
    Node& n = s_.nodes[i];
    if (!n.pinned) bad_key("unpin of an unpinned key", key);
    n.pinned = 0;
    --pinned_;
    pinned_in_probation_ -= (n.where == kProbation);
    queue(n.where).push_head(s_.nodes, i);
  }
  void remove(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.pinned) {
      --pinned_;
      pinned_in_probation_ -= (n.where == kProbation);
    } else {
      queue(n.where).unlink(s_.nodes, i);
    }
    s_.drop(i);
  }
  // A key in P enters G as evict()'s victim from P does (G's oldest goes when G is full); one in M goes.
  void evict_key(Key key) override {
    int32_t i = find_resident(key);
    if (i < 0) return;
    Node& n = s_.nodes[i];
    if (n.pinned) {
      n.pinned = 0;
      --pinned_;
      pinned_in_probation_ -= (n.where == kProbation);
    } else {
      queue(n.where).unlink(s_.nodes, i);
    }
    if (n.where == kProbation) to_ghost(i);
    else s_.drop(i);
  }
  // Inherited blocks go to M, oldest first.
  void adopt(Key key) override {
    if (s_.index.find(key) >= 0) bad_key("adopt of a known key", key);
    int32_t i = s_.add(key, kMain);
    main_.push_head(s_.nodes, i);
  }
  void reset() override {
    s_.clear();
    probation_.clear();
    main_.clear();
    ghost_.clear();
    pending_.clear();
    pinned_ = pinned_in_probation_ = 0;
    stats_.clear();
    rarely_extended_ = false;
    session_index_.clear();
    followed_.clear();
    owner_.clear();
    owner_epoch_ = 0;
    next_serial_ = kShared + 1;
    sessions_ended_ = demoted_ = 0;
    heard_ = 0;
    has_session_ = false;
    if (adaptive_) {
      for (auto& mini : minis_) mini->reset();
      filter_ = false;
      duel_blocks_ = duel_hits_[0] = duel_hits_[1] = 0.0;
      guard_blocks_ = guard_live_ = guard_recency_ = 0.0;
      switches_ = requests_heard_ = requests_filtered_ = requests_guarded_ = 0;
      walk_left_ = 0;
    }
  }
  // evict()'s order if nothing else happened: its rules run on a dry run of P and M (M's second
  // chances after its own nodes) and of P's resident count; no node changes.
  void eviction_order(std::vector<Key>& out, size_t limit) const override {
    DryQueue probation(s_.nodes, probation_), main(s_.nodes, main_);
    size_t in_probation = probation_.size() + pinned_in_probation_;
    while (out.size() < limit && !(probation.empty() && main.empty())) {
      if (!probation.empty() &&
          (!filter_ || main.empty() ||
           static_cast<double>(in_probation) >= small_ratio_ * static_cast<double>(bound_))) {
        out.push_back(s_.nodes[probation.pop().node].key);
        --in_probation;
        continue;
      }
      while (true) {
        const DryQueue::Entry e = main.pop();
        const int count = e.count >= 0 ? e.count : (s_.nodes[e.node].freq & kCount);
        if (count == 0) {
          out.push_back(s_.nodes[e.node].key);
          break;
        }
        main.push(e.node, count - 1);
      }
    }
  }
  void pinned_keys(std::vector<Key>& out) const override { s_.pinned_keys(out); }
  size_t bytes() const override {
    size_t held = session_index_.bytes() + owner_.bytes() + followed_.capacity() * sizeof(FollowedSession);
    for (const auto& f : followed_) held += f.last.capacity() * sizeof(Key);
    if (adaptive_) held += minis_[0]->bytes() + minis_[1]->bytes() + sampled_.capacity() * sizeof(Key);
    return s_.bytes() + stats_.bytes() + held;
  }
  WAKMAN_DRIVEN(ChainLRU)

  double window_s_, threshold_, ghost_ratio_, small_ratio_;
  int64_t switch_walk_;  // M's blocks the switch walk examines a request
  bool sessions_;
  int64_t ghost_capacity_ = 0;

 private:
  // The adaptive mode's duel, at each request. Its sampled blocks (splitmix64(key) divisible by
  // sample_every), in prefix order, go through both miniatures as a plain cache would take the whole
  // request, in the cache's insert context (a miniature has no pinned blocks: the cache's pinned
  // blocks are resident and hit too): the first-miss rule over the sampled full prompt blocks counts
  // each miniature's prefix hits, then the sampled outputs and prompt blocks are accessed deepest
  // first. The counts halve every kHorizon * mini capacity sampled prompt blocks; the cache switches
  // mode when the other miniature's hits lead by more than kMargin of those blocks, unless the floor
  // guard holds it in (or sends it back to) the recency mode: the live cache's own prefix hits on the
  // sampled blocks (before the request's accesses) trail the recency miniature's by more than
  // kGuardMargin of them, counted over kGuardHorizon miniatures' worth of sampled prompt blocks.
  void duel(const Key* keys, size_t full, const Key* outputs, size_t n_out) {
    ++requests_heard_;
    requests_filtered_ += filter_;
    const uint64_t mask = static_cast<uint64_t>(sample_every_ - 1);
    sampled_.clear();
    for (size_t i = 0; i < full; ++i)
      if (!(splitmix64(keys[i]) & mask)) sampled_.push_back(keys[i]);
    const size_t sampled_full = sampled_.size();
    for (size_t i = 0; i < n_out; ++i)
      if (!(splitmix64(outputs[i]) & mask)) sampled_.push_back(outputs[i]);
    if (sampled_.empty()) return;
    const auto blocks = static_cast<double>(sampled_full);
    guard_live_ += static_cast<double>(cached_prefix(*this, sampled_.data(), sampled_full));
    for (int m = 0; m < 2; ++m) {
      ChainLRU& mini = *minis_[m];
      mini.rarely_extended_ = rarely_extended_;
      const auto hits = static_cast<double>(cached_prefix(mini, sampled_.data(), sampled_full));
      duel_hits_[m] += hits;
      if (m == 0) guard_recency_ += hits;
      for (size_t i = sampled_.size(); i-- > 0;) drive_access<ChainLRU>(mini, sampled_[i]);
    }
    const auto mini_capacity = static_cast<double>(minis_[0]->capacity_);
    duel_blocks_ += blocks;
    if (duel_blocks_ >= kHorizon * mini_capacity) {
      duel_blocks_ *= 0.5;
      duel_hits_[0] *= 0.5;
      duel_hits_[1] *= 0.5;
    }
    guard_blocks_ += blocks;
    if (guard_blocks_ >= kGuardHorizon * mini_capacity) {
      guard_blocks_ *= 0.5;
      guard_live_ *= 0.5;
      guard_recency_ *= 0.5;
    }
    const int now = filter_ ? 1 : 0;
    const bool guarded = guard_live_ < guard_recency_ - kGuardMargin * guard_blocks_;
    requests_guarded_ += guarded;
    if (guarded ? filter_ : duel_hits_[1 - now] - duel_hits_[now] > kMargin * duel_blocks_) {
      filter_ = !filter_;
      ++switches_;
      if (filter_) {  // the switch walk starts at M's oldest block (walk_main)
        main_.start_walk();
        walk_left_ = main_.size();
      } else {  // a walk still under way ends
        main_.end_walk();
        walk_left_ = 0;
      }
    }
  }
  // The switch walk, from the switch to the filter mode on, switch_walk_ blocks a request: M's
  // unpinned blocks that were never hit since their insert go to P's newest end, M's oldest first (so
  // P evicts them in M's order, after P's own blocks), as if they had been inserted in the filter
  // mode; recency mode had put them in M. Its point is main_'s walk point (a block that leaves M
  // while the walk points at it passes the point to the next newer block); it ends past M's newest
  // block, after as many blocks as M held at the switch, or at a switch back to recency.
  void walk_main() {
    for (int64_t budget = switch_walk_; budget > 0 && walk_left_ > 0 && main_.walk_point() >= 0; --budget) {
      --walk_left_;
      const int32_t i = main_.step_walk(s_.nodes);
      Node& n = s_.nodes[i];
      if (!(n.freq & kHit)) {
        main_.unlink(s_.nodes, i);
        n.where = kProbation;
        probation_.push_head(s_.nodes, i);
      }
    }
    if (walk_left_ == 0 || main_.walk_point() < 0) {
      walk_left_ = 0;
      main_.end_walk();
    }
  }

  List& queue(uint8_t where) { return where == kProbation ? probation_ : main_; }
  // Node i, off every queue, lives on as G's newest entry (G's oldest goes when G is full); without
  // a ghost queue it goes.
  void to_ghost(int32_t i) { s_.to_ghost(ghost_, ghost_capacity_, i, kGhost); }

  // Session mode: the session's previous request (its full prompt blocks, then its outputs) against
  // this one; the blocks after their common prefix are the session's abandoned branch (a compacted
  // or edited context): each resident, unpinned one the session owns (brought, and held by no other
  // followed session since: a sub-agent extending it makes it shared) goes to P's oldest end, the
  // deepest last, so it is evicted first and never before a block under it.
  // Ownership: the common prefix's blocks were owned at the session's previous request, and owner_
  // can since only have made them shared, unless a sweep or a wrap (owner_epoch_) dropped entries:
  // without one, only the blocks past the prefix are owned now (the same owner_ either way).
  void follow_session(const Key* keys, size_t full, const Key* outputs, size_t n_out) {
    int32_t slot = session_index_.find(session_);
    size_t shared = 0;
    if (slot < 0) {
      if (followed_.size() >= kMaxSessions) forget_session(least_recent_session());
      slot = static_cast<int32_t>(followed_.size());
      session_index_.insert(session_, slot);
      if (next_serial_ == INT32_MAX) {  // serials wrap: no ownership survives from before
        owner_.clear();
        ++owner_epoch_;
        next_serial_ = kShared + 1;
      }
      followed_.push_back(FollowedSession{{}, session_, next_serial_++, owner_epoch_, 0});
    } else {
      const FollowedSession& was = followed_[static_cast<size_t>(slot)];
      const std::vector<Key>& last = was.last;
      auto now_at = [&](size_t j) { return j < full ? keys[j] : outputs[j - full]; };
      while (shared < last.size() && shared < full + n_out && last[shared] == now_at(shared)) ++shared;
      for (size_t j = shared; j < last.size(); ++j)  // its own blocks: not one another session holds
        if (owner_.find(last[j]) == was.serial) demote(last[j]);
    }
    FollowedSession& f = followed_[static_cast<size_t>(slot)];
    f.heard = ++heard_;
    f.last.resize(shared);  // the common prefix stays; the rest of this request follows it
    for (size_t j = shared; j < full; ++j) f.last.push_back(keys[j]);
    for (size_t j = std::max(shared, full) - full; j < n_out; ++j) f.last.push_back(outputs[j]);
    if (owner_.size() > kOwnerEntries * static_cast<size_t>(capacity_)) sweep_owners();
    const size_t first_new = f.epoch == owner_epoch_ ? shared : 0;
    f.epoch = owner_epoch_;
    for (size_t j = first_new; j < f.last.size(); ++j) own(f.last[j], f.serial);
  }
  // The followed session in slot `at` is followed no more; the last slot fills the freed one.
  void forget_session(size_t at) {
    session_index_.erase(followed_[at].session);
    const size_t moved = followed_.size() - 1;
    if (at != moved) {
      followed_[at] = std::move(followed_[moved]);
      *session_index_.value_of(followed_[at].session) = static_cast<int32_t>(at);
    }
    followed_.pop_back();
  }
  // The slot of the followed session heard from longest ago (O(kMaxSessions), only when the table
  // is full and a new session arrives).
  size_t least_recent_session() const {
    size_t at = 0;
    for (size_t i = 1; i < followed_.size(); ++i)
      if (followed_[i].heard < followed_[at].heard) at = i;
    return at;
  }
  // A followed session (serial) holds key in a request: a block no one owns becomes its own,
  // unless it is already cached (another brought it); one another session owns becomes shared.
  void own(Key key, int32_t serial) {
    bool inserted = false;
    int32_t& owner = owner_.find_or_insert(key, kShared, inserted);
    if (!inserted) {
      if (owner != serial) owner = kShared;
    } else if (find_resident(key) < 0) {
      owner = serial;
    }
  }
  // Before a request's blocks are owned, once owner_ holds more than kOwnerEntries * C entries:
  // those of blocks no longer cached go (at most C stay, so the sweep is amortized O(1) a block).
  void sweep_owners() {
    std::vector<Key> gone;
    owner_.for_each([&](Key k, int32_t) {
      if (find_resident(k) < 0) gone.push_back(k);
    });
    for (Key k : gone) owner_.erase(k);
    ++owner_epoch_;
  }
  void demote(Key key) {
    int32_t i = find_resident(key);
    if (i < 0 || s_.nodes[i].pinned) return;
    Node& n = s_.nodes[i];
    queue(n.where).unlink(s_.nodes, i);
    n.where = kProbation;
    probation_.push_tail(s_.nodes, i);
    ++demoted_;
  }
  int32_t resident(Key key) const {
    int32_t i = find_resident(key);
    if (i < 0) bad_key("not resident", key);
    return i;
  }

  Store s_;
  List probation_, main_, ghost_, pending_;
  size_t pinned_ = 0;
  size_t pinned_in_probation_ = 0;  // of pinned_, those whose segment is P
  ExtensionStats stats_;
  bool rarely_extended_ = false;  // the insert context: blocks inserted now go to P
  bool adaptive_;                 // the duel chooses filter_
  bool filter_;                   // the filter mode: every new block goes to P, P kept near small_ratio
  int64_t sample_every_ = 1;
  std::unique_ptr<ChainLRU> minis_[2];  // the adaptive mode's miniatures: recency, filter
  std::vector<Key> sampled_;            // one request's sampled blocks (scratch)
  double duel_blocks_ = 0.0, duel_hits_[2] = {0.0, 0.0};
  double guard_blocks_ = 0.0, guard_live_ = 0.0, guard_recency_ = 0.0;  // the floor guard's counts
  int64_t switches_ = 0, requests_heard_ = 0, requests_filtered_ = 0, requests_guarded_ = 0;
  size_t walk_left_ = 0;  // blocks the switch walk may still examine (0: no walk under way)
  bool has_session_ = false;      // in_session came before this on_request
  Key session_ = 0;
  // A followed session: its last request's keys (full prompt blocks, then outputs), its session key,
  // its serial (owner_'s values) and owner_epoch_ when those keys were last owned.
  struct FollowedSession {
    std::vector<Key> last;
    Key session;
    int32_t serial;
    uint64_t epoch;
    uint64_t heard;  // heard_ at its latest request
  };
  KeyMap session_index_;                   // session key -> its slot in followed_
  std::vector<FollowedSession> followed_;  // the followed sessions, by slot
  static constexpr int32_t kShared = 0;    // owner_'s value for a block two sessions asked for
  static constexpr size_t kOwnerEntries = 4;  // owner_ is swept when it holds more than this * C
  KeyMap owner_;  // key -> the serial of the followed session that brought it, or kShared
  uint64_t owner_epoch_ = 0;  // bumped when owner_ loses entries (a sweep, serials wrapping)
  int32_t next_serial_ = kShared + 1;
  int64_t demoted_ = 0, sessions_ended_ = 0;
  uint64_t heard_ = 0;  // requests of followed sessions so far (their order, for the table's limit)
};

}  // namespace wakman
