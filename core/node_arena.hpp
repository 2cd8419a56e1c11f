// NodeArena and List: the per-key records every policy keeps, and intrusive doubly linked lists.
//
// A node is one key's record: its key, its links (owned by the List it is on), the list it belongs to
// (`where`, a policy-defined segment id), a small counter (`freq`: frequency or visited bit) and
// `pinned`. A pinned node is on no list but keeps `where` and `freq`. Slots are reused through a free
// stack, so a steady-state cache allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "key_map.hpp"

namespace wakman {

struct Node {
  Key key;
  int32_t older;  // towards the tail (the next victim); -1 at the tail
  int32_t newer;  // towards the head (the newest); -1 at the head
  uint8_t where;
  uint8_t freq;
  uint8_t pinned;
};

class NodeArena {
 public:
  int32_t alloc(Key key, uint8_t where) {
    int32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[i] = Node{key, -1, -1, where, 0, 0};
    return i;
  }
  void release(int32_t i) { free_.push_back(i); }
  void clear() {
    nodes_.clear();
    free_.clear();
  }
  void reserve(size_t n) {  // room for n nodes, and as many free slots
    nodes_.reserve(n);
    free_.reserve(n);
  }
  // Starts loading node i into the CPU's cache (a hint; changes nothing).
  void prefetch(int32_t i) const {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&nodes_[i]);
#else
    (void)i;
#endif
  }
  Node& operator[](int32_t i) { return nodes_[i]; }
  const Node& operator[](int32_t i) const { return nodes_[i]; }
  size_t bytes() const { return nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(int32_t); }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> free_;
};

// A list from tail (oldest) to head (newest) threaded through a NodeArena. It keeps one optional walk
// point (a node on the list, or -1): a walk over the list that spans many calls (chain-lru's switch
// walk) reads it, and unlinking the node it points at moves it to that node's newer neighbour (-1
// at the head), so the walk survives every change to the list in between.
class List {
 public:
  int32_t head() const { return head_; }
  int32_t tail() const { return tail_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void push_head(NodeArena& a, int32_t i) {
    Node& n = a[i];
    n.older = head_;
    n.newer = -1;
    if (head_ >= 0) a[head_].newer = i;
    else tail_ = i;
    head_ = i;
    ++size_;
  }

  void push_tail(NodeArena& a, int32_t i) {
    Node& n = a[i];
    n.newer = tail_;
    n.older = -1;
    if (tail_ >= 0) a[tail_].older = i;
    else head_ = i;
    tail_ = i;
    ++size_;
  }

  void unlink(NodeArena& a, int32_t i) {
    Node& n = a[i];
    if (i == walk_) walk_ = n.newer;
    if (n.older >= 0) a[n.older].newer = n.newer;
    else tail_ = n.newer;
    if (n.newer >= 0) a[n.newer].older = n.older;
    else head_ = n.older;
    n.older = n.newer = -1;
    --size_;
  }

  int32_t pop_tail(NodeArena& a) {
    int32_t i = tail_;
    unlink(a, i);
    return i;
  }

  void move_to_head(NodeArena& a, int32_t i) {
    if (head_ == i) return;
    unlink(a, i);
    push_head(a, i);
  }

  void clear() {
    head_ = tail_ = walk_ = -1;
    size_ = 0;
  }

  // The walk point: start_walk puts it at the tail (-1 on an empty list); step_walk returns the node
  // it points at (precondition: >= 0) and moves it to the next newer node; end_walk drops it.
  int32_t walk_point() const { return walk_; }
  void start_walk() { walk_ = tail_; }
  int32_t step_walk(const NodeArena& a) {
    const int32_t i = walk_;
    walk_ = a[i].newer;
    return i;
  }
  void end_walk() { walk_ = -1; }

  // Keys from tail to head, until `out` holds `limit` keys.
  void append_keys(const NodeArena& a, std::vector<Key>& out, size_t limit) const {
    for (int32_t i = tail_; i >= 0 && out.size() < limit; i = a[i].newer) out.push_back(a[i].key);
  }

 private:
  int32_t head_ = -1, tail_ = -1, walk_ = -1;
  size_t size_ = 0;
};

// A dry run of a queue whose oldest node is either taken or put back at the head with a counter
// (S3-FIFO's and chain-lru's main queues): the list's nodes from the tail, then the nodes put back,
// in turn. It writes no node; a node taken from the list carries count -1 (its own counter).
// For eviction_order, not a hot path: the nodes put back go in a vector.
class DryQueue {
 public:
  struct Entry {
    int32_t node;
    int count;  // -1: the node's own counter, unchanged
  };
  DryQueue(const NodeArena& a, const List& list) : a_(&a), next_(list.tail()) {}
  bool empty() const { return next_ < 0 && taken_ == put_back_.size(); }
  Entry pop() {
    if (next_ >= 0) {
      const int32_t i = next_;
      next_ = (*a_)[i].newer;
      return {i, -1};
    }
    return put_back_[taken_++];
  }
  void push(int32_t node, int count) { put_back_.push_back({node, count}); }

 private:
  const NodeArena* a_;
  int32_t next_;
  std::vector<Entry> put_back_;
  size_t taken_ = 0;
};

}  // namespace wakman

namespace wakman {

// The index and the arena together: every key a policy knows (resident or ghost) has one node.
struct Store {
  KeyMap index;
  NodeArena nodes;

  explicit Store(KeyMap::Fill fill = KeyMap::Fill::kSparse) : index(8, fill) {}

  int32_t add(Key key, uint8_t where) {
    int32_t i = nodes.alloc(key, where);
    index.insert(key, i);
    return i;
  }
  void drop(int32_t i) {
    index.erase(nodes[i].key);
    nodes.release(i);
  }
  // Node i (known as its key) is known as `to` from now on; false, nothing changed, if `to` is known.
  bool rekey(int32_t i, Key to) {
    if (index.find(to) >= 0) return false;
    index.erase(nodes[i].key);
    index.insert(to, i);
    nodes[i].key = to;
    return true;
  }
  // list.pop_tail(), then a head start on the next pop: the new tail's index entry and the node after
  // it start loading, so that a run of evictions (or ghost drops) from this list does not wait on
  // memory for each victim's node and index entry (the new tail's node is in the cache: unlinking the
  // popped one has just written it). Returns the popped node.
  int32_t pop_tail(List& list) {
    const int32_t i = list.pop_tail(nodes);
    const int32_t t = list.tail();
    if (t >= 0) {
      index.prefetch(nodes[t].key);
      if (nodes[t].newer >= 0) nodes.prefetch(nodes[t].newer);
    }
    return i;
  }
  // Node i, on no list, becomes `ghost`'s newest entry in segment `where`; ghost's oldest entry goes
  // when it holds `capacity` already. With capacity <= 0 (no ghost list) node i goes.
  void to_ghost(List& ghost, int64_t capacity, int32_t i, uint8_t where) {
    if (capacity <= 0) {
      drop(i);
      return;
    }
    if (static_cast<int64_t>(ghost.size()) >= capacity) drop(pop_tail(ghost));
    nodes[i].where = where;
    ghost.push_head(nodes, i);
  }
  void clear() {
    index.clear();
    nodes.clear();
  }
  // Room for `keys` keys (index entries and nodes) without growing; clear() keeps it.
  void reserve(size_t keys) {
    index.reserve(keys);
    nodes.reserve(keys);
  }
  size_t bytes() const { return index.bytes() + nodes.bytes(); }
  void pinned_keys(std::vector<Key>& out) const {
    index.for_each([&](Key key, int32_t i) {
      if (nodes[i].pinned) out.push_back(key);
    });
  }
};

}  // namespace wakman
