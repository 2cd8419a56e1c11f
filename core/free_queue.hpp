// FreeQueue: vLLM's free-block queue, ordered by a wakman Policy (the vLLM plugin's hot path).
//
// vLLM's BlockPool keeps its free blocks in one FreeKVCacheBlockQueue and asks it for victims; the
// plugin replaces that object as a unit. This class holds what the queue needs, by block id:
//   - key_of_[b]: block b's policy key while it is cached (has_key_[b]); block_of_ maps key -> b;
//     hash_of_[b]: the hash its key was made from. A block is a policy key from its first hash
//     (cached()) until eviction or until it loses that hash (uncached(), or reconcile() seeing it).
//     A free block that loses its hash keeps its place in the policy's order where the policy can
//     rename a key in place (Policy::rekey: LRU, FIFO), as stock vLLM leaves it in its one list: it
//     stays a policy key, now hashless_[b], under a key of its own (hashless_key) that no hash maps
//     to, until it is handed out; under any other policy (and at a switch to one) it leaves the
//     policy for blank's head. Likewise an uncached block released to the tail (vLLM's
//     unpin_blocks): where the policy can rename keys it enters the policy's order at its newest
//     end under such a key (a hashless *page*), as stock appends it to its one list, so cached blocks
//     freed later go behind it; elsewhere (and at a switch to such a policy) it joins reserve.
//   - blank: free blocks without a key, head first (a doubly linked list over block ids). vLLM
//     hands out uncached blocks before cached ones; prepend puts a block at the head, as vLLM does.
//   - the policy: every keyed block, pinned while vLLM holds it (ref_cnt > 0), evictable at 0.
//   - reserve: free blocks without a key released to the queue's tail (append_n; vLLM's
//     unpin_blocks: pages that stay readable until reused, "last-resort eviction candidates")
//     under a policy that cannot rename keys, oldest first; handed out after blank and every
//     evictable policy key.
//
// Invariants: a non-null block is free iff it is in blank, in reserve or an unpinned policy key
// (in one list at most: list_of_); num_free() == blank size + policy.num_evictable() + reserve size;
// every policy key is some block's key_of_; a hashless block is free; the null block never enters a
// list or the policy.
// Steady-state operations allocate nothing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "key_map.hpp"
#include "policy.hpp"

namespace wakman {

class FreeQueue {
 public:
  static constexpr int32_t kNone = -1;

  // `num_blocks` block ids 0..num_blocks-1; `null_block` (or kNone) never becomes free.
  FreeQueue(size_t num_blocks, int32_t null_block, Policy* policy)
      : policy_(policy),
        null_(null_block),
        key_of_(num_blocks, 0),
        hash_of_(num_blocks, 0),
        has_key_(num_blocks, 0),
        hashless_(num_blocks, 0),
        list_of_(num_blocks, kNoList),
        prev_(num_blocks, kNone),
        next_(num_blocks, kNone),
        block_of_(num_blocks) {}

  Policy& policy() { return *policy_; }
  const Policy& policy() const { return *policy_; }
  // Make `p` the live policy; the caller checked the live policy's keys (check_keys) and then handed
  // them over (policy.hpp's handover), so every key of `p` is a block's. Under a policy that does not
  // rename keys, hashless blocks go to blank's head, as their hash loss would have sent them under
  // it, and hashless pages to reserve's tail, oldest first (O(blocks)).
  void set_policy(Policy* p) {
    policy_ = p;
    if (policy_->renames_keys()) return;
    std::vector<Key> order;
    policy_->eviction_order(order);
    for (Key k : order) {
      const int32_t b = block_of_key(k);
      if (!hashless_[b]) continue;
      const bool page = hashless_[b] == kPage;
      drop_key(b);
      push(page ? reserve_ : blank_, page ? kReserve : kBlank, b, !page);
    }
  }

  // Every key the live policy holds (evictable or pinned) is a block's: std::logic_error otherwise
  // (the policy was changed behind the queue's back). O(keys). A switch checks it before it starts.
  void check_keys() const {
    std::vector<Key> keys;
    policy_->eviction_order(keys);
    policy_->pinned_keys(keys);
    for (Key k : keys) block_of_key(k);
  }

  size_t num_blocks() const { return key_of_.size(); }
  size_t num_free() const { return blank_.size + policy_->num_evictable() + reserve_.size; }
  size_t blank_size() const { return blank_.size; }
  size_t reserve_size() const { return reserve_.size; }
  int32_t null_block() const { return null_; }
  bool in_blank(int32_t b) const { return list_of_[check(b)] == kBlank; }
  bool in_reserve(int32_t b) const { return list_of_[check(b)] == kReserve; }
  bool has_key(int32_t b) const { return has_key_[check(b)]; }
  // A free block without a hash that holds a place in the policy's order (a key, no hash): it lost
  // its hash while free, or was released uncached to the tail (a page).
  bool is_hashless(int32_t b) const { return has_key_[check(b)] && hashless_[b]; }
  Key key_of(int32_t b) const { return key_of_[check(b)]; }
  int32_t block_of(Key k) const { return block_of_.find(k); }
  int32_t blank_head() const { return blank_.head; }
  int32_t reserve_head() const { return reserve_.head; }
  // The block after b in its list (blank or reserve), or kNone.
  int32_t next_in_list(int32_t b) const { return next_[b]; }

  // ------------------------------------------------------------ FreeKVCacheBlockQueue's protocol
  // popleft_n: `n` victims, blank blocks first, then the policy's, then reserve's; the victims lose
  // their keys.
  void take_victims(size_t n, std::vector<int32_t>& out) {
    if (n > num_free()) throw std::out_of_range("free queue: " + std::to_string(n) + " blocks asked, " +
                                                std::to_string(num_free()) + " free");
    apply_expected_misses();
    while (n > 0 && blank_.head != kNone) {
      out.push_back(pop_head(blank_));
      --n;
    }
    const size_t from_policy = std::min(n, policy_->num_evictable());
    size_t from_reserve = n - from_policy;
    // The policy picks every victim first, then their blocks are looked up: each victim's block_of_
    // entry starts loading as the policy names it, so the lookups do not wait on memory one by one.
    victims_.clear();
    for (n = from_policy; n > 0; --n) {
      victims_.push_back(policy_->evict());
      block_of_.prefetch(victims_.back());
    }
    for (Key k : victims_) {
      const int32_t b = block_of_key(k);
      block_of_.erase(k);
      has_key_[b] = 0;
      out.push_back(b);
    }
    for (; from_reserve > 0; --from_reserve) out.push_back(pop_head(reserve_));
  }
  // remove: block b leaves the free queue (ref_cnt 0 -> 1); a cached block is pinned, a hashless
  // one loses its key (it holds nothing to keep).
  void take(int32_t b) {
    if (!has_key_[check(b)]) unlink(b);
    else if (hashless_[b]) drop_key(b);
    else policy_->pin(key_of_[b]);
  }
  // append_n: b's ref_cnt reached 0; a cached block re-enters the policy's order, an uncached one
  // (stock vLLM appends only unpin_blocks' pages uncached: its free_blocks prepends every uncached
  // block) enters it at the newest end as a hashless page where the policy renames keys, and joins
  // reserve's tail elsewhere.
  void release_to_tail(int32_t b) {
    if (has_key_[check(b)]) {
      policy_->unpin(key_of_[b]);
    } else if (b != null_ && policy_->renames_keys()) {
      if (list_of_[b] != kNoList) throw std::logic_error("free queue: block " + std::to_string(b) + " is free already");
      const Key own = hashless_key(b);
      policy_->insert(own, false);
      block_of_.insert(own, b);
      key_of_[b] = own;
      has_key_[b] = 1;
      hashless_[b] = kPage;
    } else {
      push(reserve_, kReserve, b, false);
    }
  }
  // append_n as vLLM calls it, for block b: an unkeyed block that has a hash (set on a path no hook
  // saw) becomes a free key; any other goes as release_to_tail. read_hash(Key& h) -> bool reads
  // b's hash (false: none); it is called for an unkeyed block only.
  template <class ReadHash>
  void release(int32_t b, ReadHash&& read_hash) {
    Key h = 0;
    if (!has_key_[check(b)] && read_hash(h)) cached(b, h, false);
    else release_to_tail(b);
  }
  // A free block at start-up (stock queue order): blank's tail.
  void start_free(int32_t b) {
    if (check(b) == null_) throw std::invalid_argument("free queue: the null block is never free");
    push(blank_, kBlank, b, false);
  }
  // prepend_n: a block to hand out first, before any policy key: its key goes, if it has one. Either
  // it lost its hash while in use (a path that removes hashes unseen: its key goes), or vLLM 0.34 frees it with evict_first (`keeps_hash`: its contents live in another
  // tier): it keeps its hash in vLLM's table until it is handed out, and a prefix hit before that
  // takes it from blank; at its next release (append_n) it becomes a key again. Its key leaves
  // through the policy's evict_key, so the policy keeps the ghost its own eviction would (a key that
  // returns from S3-FIFO's ghost goes to M).
  void release_to_head(int32_t b, bool keeps_hash) {
    if (has_key_[check(b)]) {
      if (!keeps_hash) {
        drop_key(b);
      } else {
        const Key k = key_of_[b];
        policy_->evict_key(k);
        block_of_.erase(k);
        has_key_[b] = 0;
      }
    }
    push(blank_, kBlank, b, true);
  }

  // Hints for a batch of calls (they change nothing): start loading what an operation on block b
  // (take, release_to_tail, hit) or a new key `h` (cached) reads, a batch's worth ahead of the calls.
  void prefetch_block(int32_t b) const {
    if (has_key_[check(b)]) policy_->prefetch(key_of_[b]);
  }
  void prefetch_key(Key h) const {
    policy_->prefetch(h);
    block_of_.prefetch(h);
  }

  // ------------------------------------------------------------ what the queue alone cannot see
  // Block b got its first hash, whose policy key is `h` (pinned: vLLM holds the block). While another
  // block holds that key (vLLM allows duplicate blocks) the block takes copy_key(h, 1), (h, 2), ...
  Key cached(int32_t b, Key h, bool pinned) {
    if (has_key_[check(b)]) throw std::logic_error("free queue: block " + std::to_string(b) + " is cached already");
    hash_of_[b] = h;
    const Key k = free_copy_key(h, [this](Key c) { return key_taken(c); });
    if (!pinned && list_of_[b] != kNoList) unlink(b);
    policy_->insert(k, pinned);
    key_of_[b] = k;
    has_key_[b] = 1;
    hashless_[b] = 0;
    block_of_.insert(k, b);
    return k;
  }
  // Block b lost its hash outside eviction (a connector's evict_blocks, a hash move); `free` says
  // whether vLLM holds it no more: it then keeps its place under hashless_key(b) where the policy
  // can rekey, else joins blank's head. O(1); no-op for an uncached or already hashless block.
  void uncached(int32_t b, bool free) {
    if (!has_key_[check(b)] || hashless_[b]) return;
    const Key k = key_of_[b];
    if (free && b != null_) {
      const Key own = hashless_key(b);
      if (policy_->rekey(k, own)) {
        block_of_.erase(k);
        block_of_.insert(own, b);
        key_of_[b] = own;
        hashless_[b] = kLostHash;
        return;
      }
    }
    policy_->remove(k);
    block_of_.erase(k);
    has_key_[b] = 0;
    if (free && b != null_) push(blank_, kBlank, b, true);
  }
  // Bring block b's key in line with its hash (`hashed`: it has one, `h`: that hash; `in_use`:
  // ref_cnt > 0): a new hash makes a key, a lost hash drops it, a changed hash re-keys the block.
  void reconcile(int32_t b, bool hashed, Key h, bool in_use) {
    if (!hashed) {
      if (has_key_[check(b)]) uncached(b, !in_use);
      return;
    }
    if (has_key_[check(b)]) {
      if (!hashless_[b] && hash_of_[b] == h) return;
      drop_key(b);
    }
    cached(b, h, in_use);
  }
  // An admission's lookup missed on these keys (vLLM: a waiting request's full blocks after its
  // cached prefix). The policy hears miss(k) for each one no block holds, at the admission's first
  // take_victims, before any victim is chosen: a ghost hit is seen before the evictions that make
  // room for it (libCacheSim's order, the serve-mode pool's admit). drop_expected_misses() when the
  // admission does not go ahead.
  void expect_misses(std::vector<Key>& keys) { expected_.swap(keys); }
  void drop_expected_misses() { expected_.clear(); }
  void apply_expected_misses() {
    visit_announced(
        expected_.data(), expected_.size(), [this](Key k) { prefetch_key(k); },
        [this](Key k) {
          if (block_of_.find(k) < 0) policy_->miss(k);
        });
    expected_.clear();
  }
  // A prefix hit on block b (free or pinned); an uncached or hashless block is ignored.
  void hit(int32_t b) {
    if (!has_key_[check(b)] || hashless_[b]) return;
    policy_->hit(key_of_[b]);
    ++hits_;
  }
  // Prefix hits passed to the policies so far.
  uint64_t num_hits() const { return hits_; }
  // get_all_free_blocks: every free block in take_victims' order (blank, the policy's, reserve's).
  void free_blocks(std::vector<int32_t>& out) const {
    for (int32_t b = blank_.head; b != kNone; b = next_[b]) out.push_back(b);
    std::vector<Key> order;
    policy_->eviction_order(order);
    for (Key k : order) out.push_back(block_of_key(k));
    for (int32_t b = reserve_.head; b != kNone; b = next_[b]) out.push_back(b);
  }
  // reset_prefix_cache succeeded (every block free): the cached blocks join blank's tail in eviction
  // order, then reserve's blocks, oldest first, and the policy forgets everything, ghosts included.
  void clear_cache() {
    std::vector<Key> order;
    policy_->eviction_order(order);
    for (Key k : order) block_of_key(k);  // every key a block's, checked before anything moves
    for (Key k : order) {
      const int32_t b = block_of_key(k);
      has_key_[b] = 0;
      push(blank_, kBlank, b, false);
    }
    while (reserve_.head != kNone) push(blank_, kBlank, pop_head(reserve_), false);
    for (size_t b = 0; b < has_key_.size(); ++b) has_key_[b] = 0;
    block_of_.clear();
    policy_->reset();
  }

 private:
  // The block of a key the live policy holds: every policy key is a block's (a key no block holds
  // means the policy was changed behind the queue's back: refused before any index is read).
  int32_t block_of_key(Key k) const {
    const int32_t b = block_of_.find(k);
    if (b < 0)
      throw std::logic_error("free queue: the policy holds key " + std::to_string(k) +
                             ", no block's (was the live policy changed outside the queue?)");
    return b;
  }
  int32_t check(int32_t b) const {
    if (b < 0 || static_cast<size_t>(b) >= key_of_.size())
      throw std::out_of_range("free queue: no block " + std::to_string(b));
    return b;
  }
  // A doubly linked list of block ids over prev_ / next_ (a block is in one list at most: list_of_).
  struct BlockList {
    int32_t head = kNone, tail = kNone;
    size_t size = 0;
  };
  static constexpr uint8_t kNoList = 0, kBlank = 1, kReserve = 2;
  // hashless_[b] of a keyed block: 0 (cached), or why it holds a hashless key
  static constexpr uint8_t kLostHash = 1, kPage = 2;

  void push(BlockList& list, uint8_t which, int32_t b, bool at_head) {
    if (list_of_[b] != kNoList) throw std::logic_error("free queue: block " + std::to_string(b) + " is free already");
    list_of_[b] = which;
    ++list.size;
    if (at_head) {
      prev_[b] = kNone;
      next_[b] = list.head;
      if (list.head != kNone) prev_[list.head] = b;
      else list.tail = b;
      list.head = b;
    } else {
      next_[b] = kNone;
      prev_[b] = list.tail;
      if (list.tail != kNone) next_[list.tail] = b;
      else list.head = b;
      list.tail = b;
    }
  }
  void unlink(int32_t b) {
    if (list_of_[b] == kNoList) throw std::logic_error("free queue: block " + std::to_string(b) + " is not free");
    BlockList& list = list_of_[b] == kBlank ? blank_ : reserve_;
    if (prev_[b] != kNone) next_[prev_[b]] = next_[b];
    else list.head = next_[b];
    if (next_[b] != kNone) prev_[next_[b]] = prev_[b];
    else list.tail = prev_[b];
    prev_[b] = next_[b] = kNone;
    list_of_[b] = kNoList;
    --list.size;
  }
  int32_t pop_head(BlockList& list) {
    int32_t b = list.head;
    unlink(b);
    return b;
  }
  // Some block holds policy key c.
  bool key_taken(Key c) const { return block_of_.find(c) >= 0; }
  // Block b's key leaves the policy outside eviction (O(1)); b joins no list.
  void drop_key(int32_t b) {
    const Key k = key_of_[b];
    policy_->remove(k);
    block_of_.erase(k);
    has_key_[b] = 0;
  }
  // The key a hashless block b keeps its place under: one no block holds (and, 64-bit keys apart,
  // no hash gives: a hash's key starts from a BlockHash's bytes, this one from the block id).
  Key hashless_key(int32_t b) const {
    return free_copy_key(splitmix64(kHashlessSeed ^ static_cast<Key>(b)),
                         [this](Key c) { return key_taken(c); });
  }
  static constexpr Key kHashlessSeed = 0x686173686C657373ULL;  // "hashless"

  Policy* policy_;
  int32_t null_;
  std::vector<Key> key_of_, hash_of_;
  std::vector<uint8_t> has_key_, hashless_, list_of_;
  std::vector<int32_t> prev_, next_;
  BlockList blank_, reserve_;
  uint64_t hits_ = 0;
  KeyMap block_of_;
  std::vector<Key> expected_;  // misses of the admission under way (expect_misses)
  std::vector<Key> victims_;   // reused by take_victims
};

// FreeOrder: a walk over a FreeQueue's free blocks in take_victims' order (blank blocks, then the
// policy's eviction order, then reserve's), read lazily: vLLM's iter_blocks_after. The policy's order
// is read in chunks that double, so the first k blocks cost O(k) and the keys the order's dry run
// passes over, not O(free blocks); after a cursor in the policy's order, LRU and FIFO walk on from
// its key (Policy::eviction_order_after), other policies run their order from its start. Like the
// stock queue's walk it reads the live queue: the queue must not change while walking.
class FreeOrder {
 public:
  static constexpr int32_t kNone = FreeQueue::kNone;

  // From the head.
  explicit FreeOrder(const FreeQueue& q) : q_(&q), next_blank_(q.blank_head()) {}

  // The blocks after free block b (none after a block that is not free).
  static FreeOrder after(const FreeQueue& q, int32_t b) {
    FreeOrder walk(q);
    walk.next_blank_ = kNone;
    if (q.in_blank(b)) walk.next_blank_ = q.next_in_list(b);
    else if (q.in_reserve(b)) walk.continue_in_reserve(q.next_in_list(b));
    else if (!q.has_key(b) || !walk.seek_after(q.key_of(b))) walk.continue_in_reserve(kNone);
    return walk;
  }

  // The next free block's id, or kNone past the last.
  int32_t next() {
    if (next_blank_ != kNone) {
      const int32_t b = next_blank_;
      next_blank_ = q_->next_in_list(b);
      return b;
    }
    while (!in_reserve_) {
      if (pos_ >= order_.size()) {
        if (!fetch_more()) continue_in_reserve(q_->reserve_head());
        continue;
      }
      const int32_t b = q_->block_of(order_[pos_++]);
      if (b >= 0) return b;
    }
    const int32_t b = next_reserve_;
    if (b != kNone) next_reserve_ = q_->next_in_list(b);
    return b;
  }

 private:
  // The walk goes on in reserve, at block `first` (kNone: nothing more).
  void continue_in_reserve(int32_t first) {
    order_.clear();
    complete_ = in_reserve_ = true;
    next_reserve_ = first;
  }

  // The next chunk of the policy's order (twice the last); false once it was all read.
  bool fetch_more() {
    if (complete_) return false;
    limit_ = std::max<size_t>(64, 2 * limit_);
    if (walks_on_) {
      if (!order_.empty()) last_ = order_.back();
      order_.clear();
      pos_ = 0;
      q_->policy().eviction_order_after(last_, order_, limit_);
    } else {
      order_.clear();
      q_->policy().eviction_order(order_, limit_);
    }
    complete_ = order_.size() < limit_;
    return true;
  }

  // Position just after `key` in the policy's order (false if the key is not there): O(the keys
  // after it that are read) where the policy walks on from a key, else O(its depth).
  bool seek_after(Key key) {
    const Policy& policy = q_->policy();
    if (policy.is_pinned(key)) return false;  // in use: not in the order
    order_.clear();
    if (policy.eviction_order_after(key, order_, limit_ = 64)) {
      walks_on_ = true;
      last_ = key;
      complete_ = order_.size() < limit_;
      return true;
    }
    limit_ = 0;
    for (size_t i = 0;; ++i) {
      while (i >= order_.size())
        if (!fetch_more()) return false;
      if (order_[i] == key) {
        pos_ = i + 1;
        return true;
      }
    }
  }

  const FreeQueue* q_;
  int32_t next_blank_;          // the next blank block, or kNone: then the policy's order
  size_t pos_ = 0;              // index in order_ of the next key
  std::vector<Key> order_;      // a chunk of the policy's order
  size_t limit_ = 0;            // the chunk's size asked
  bool complete_ = false;       // order_ holds the rest of the policy's order
  bool in_reserve_ = false;     // past the policy's order: next_reserve_ is the next block
  int32_t next_reserve_ = kNone;
  bool walks_on_ = false;       // order_ holds the keys after last_, not the order from its start
  Key last_ = 0;
};

}  // namespace wakman
