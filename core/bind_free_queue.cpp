// wakman._core.FreeBlockQueue: the FreeQueue of free_queue.hpp over vLLM's KVCacheBlock objects.
//
// It fills the protocol vLLM's BlockPool uses on its free_block_queue (popleft, popleft_n, remove,
// append_n, prepend_n, num_free_blocks, get_all_free_blocks, iter_blocks_after) and the calls the
// plugin's BlockPool hooks make (sync, hit, clear_cache, switch). A block is read through its
// block_id, ref_cnt, is_null and block_hash attributes only; nothing is written to it (its free-list
// slots stay None, so vLLM's repr of a block works). The blocks are the pool's `blocks` (index = id).
#include <nanobind/nanobind.h>

#ifndef Py_T_OBJECT_EX  // Python < 3.12 names it in structmember.h
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

#include <algorithm>
#include <string>
#include <vector>

#include "free_queue.hpp"
#include "vllm_key.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace wakman;

namespace {

PyObject* interned(const char* s) {
  PyObject* out = PyUnicode_InternFromString(s);
  if (out == nullptr) throw nb::python_error();
  return out;
}

// One attribute of vLLM's KVCacheBlock, a slots dataclass: read straight from its member slot, as
// the interpreter's own LOAD_ATTR_SLOT does, while the block's type keeps it in one; through getattr
// otherwise (another type, an unset slot). Where `name` is not a member itself but a property,
// `slot` names the member behind it (vLLM 0.32/0.33's block_hash over _block_hash; 0.34 made
// block_hash the member); a type with neither is read through getattr(name).
class Field {
 public:
  explicit Field(const char* name, const char* slot = nullptr)
      : name_(interned(name)), slot_(slot != nullptr ? interned(slot) : nullptr) {}

  nb::object get(PyObject* obj) {
    PyTypeObject* t = Py_TYPE(obj);
    if (reinterpret_cast<PyObject*>(t) != type_.ptr()) learn(t);
    if (offset_ >= 0) {
      PyObject* v = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset_);
      if (v != nullptr) return nb::borrow(v);
    }
    PyObject* v = PyObject_GetAttr(obj, name_);
    if (v == nullptr) throw nb::python_error();
    return nb::steal(v);
  }

  long get_int(PyObject* obj) {
    nb::object v = get(obj);
    long out = PyLong_AsLong(v.ptr());
    if (out == -1 && PyErr_Occurred()) throw nb::python_error();
    return out;
  }

 private:
  void learn(PyTypeObject* t) {
    type_ = nb::borrow(reinterpret_cast<PyObject*>(t));
    offset_ = member_offset(t, name_);
    if (offset_ < 0 && slot_ != nullptr) offset_ = member_offset(t, slot_);
  }

  // The offset of t's object member `attr`, or -1 (no such attribute, or not an object member).
  static Py_ssize_t member_offset(PyTypeObject* t, PyObject* attr) {
    PyObject* d = PyObject_GetAttr(reinterpret_cast<PyObject*>(t), attr);
    if (d == nullptr) {
      PyErr_Clear();
      return -1;
    }
    Py_ssize_t out = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {  // a slot of t's own layout (a descriptor taken from
      auto* member = reinterpret_cast<PyMemberDescrObject*>(d);  // another class would read past it)
      PyMemberDef* m = member->d_member;
      if (m->type == Py_T_OBJECT_EX && PyType_IsSubtype(t, member->d_common.d_type)) out = m->offset;
    }
    Py_DECREF(d);
    return out;
  }

  PyObject* name_;
  PyObject* slot_;
  nb::object type_;
  Py_ssize_t offset_ = -1;
};

Field& block_id_field() {
  static Field f("block_id");
  return f;
}
Field& ref_cnt_field() {
  static Field f("ref_cnt");
  return f;
}
Field& is_null_field() {
  static Field f("is_null");
  return f;
}
Field& hash_field() {
  static Field f("block_hash", "_block_hash");
  return f;
}

int32_t block_id(PyObject* block) {
  const long id = block_id_field().get_int(block);
  if (id < 0 || id > INT32_MAX)  // narrowed, 2**32 + 1 would be block 1
    throw std::out_of_range("free queue: no block " + std::to_string(id));
  return static_cast<int32_t>(id);
}
long ref_cnt(PyObject* block) { return ref_cnt_field().get_int(block); }
bool is_null_block(PyObject* block) { return is_null_field().get(block).ptr() == Py_True; }

// The key of a hash key's bytes object (vllm_key.hpp's rule); another object's: Python's hash.
Key object_key(PyObject* obj) {
  if (PyBytes_Check(obj))
    return hash_key_bytes(PyBytes_AS_STRING(obj), static_cast<size_t>(PyBytes_GET_SIZE(obj)));
  Py_hash_t h = PyObject_Hash(obj);
  if (h == -1 && PyErr_Occurred()) throw nb::python_error();
  return static_cast<Key>(h);
}

// Reads the block's hash (KVCacheBlock.block_hash, from its slot): false if
// it has none, else true with `out` = its policy key.
bool block_hash(PyObject* block, Key& out) {
  nb::object v = hash_field().get(block);
  if (v.is_none()) return false;
  out = object_key(v.ptr());
  return true;
}

// The policy key of a vLLM BlockHash in KV-cache group `group`, what block_hash() reads from a block
// cached under make_block_hash_with_group_id(block_hash, group), without building that bytes object.
Key group_key(PyObject* block_hash, uint32_t group) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(block_hash, &data, &size) < 0) throw nb::python_error();
  return block_hash_key(data, static_cast<size_t>(size), group);
}

// append_n for one block (id b): FreeQueue::release, reading the block's hash.
void release(FreeQueue& q, int32_t b, PyObject* block) {
  q.release(b, [block](Key& h) { return block_hash(block, h); });
}

// blocks[start:stop] (stop < 0: to the end) of an iterable of blocks, to range over (a list is read
// without a copy; the range keeps it alive). Each step re-reads the sequence's size and holds a
// reference to the block it yields: a block attribute read may run Python code that changes the
// list, which then ends the walk early or shows it other blocks, never a freed one.
class Blocks {
 public:
  explicit Blocks(nb::handle blocks, Py_ssize_t start = 0, Py_ssize_t stop = -1) {
    PyObject* seq = PySequence_Fast(blocks.ptr(), "free queue: expected an iterable of blocks");
    if (seq == nullptr) throw nb::python_error();
    owner_ = nb::steal(seq);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    stop_ = (stop < 0 || stop > n) ? n : stop;
    start_ = std::min(std::max<Py_ssize_t>(start, 0), stop_);
  }

  class Iterator {
   public:
    Iterator(PyObject* seq, Py_ssize_t i, Py_ssize_t stop) : seq_(seq), i_(i), stop_(stop) {}
    nb::object operator*() const { return nb::borrow(PySequence_Fast_ITEMS(seq_)[i_]); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    // The walk ends at stop or at the sequence's current end, whichever comes first.
    bool operator!=(const Iterator&) const { return i_ < std::min(stop_, PySequence_Fast_GET_SIZE(seq_)); }

   private:
    PyObject* seq_;
    Py_ssize_t i_, stop_;
  };
  Iterator begin() const { return Iterator(owner_.ptr(), start_, stop_); }
  Iterator end() const { return Iterator(owner_.ptr(), stop_, stop_); }

 private:
  nb::object owner_;
  Py_ssize_t start_ = 0, stop_ = 0;
};

// A scratch vector borrowed from its owner for one call: swapped out and cleared, swapped back at
// the end, so its capacity is reused (no allocation in steady state) and a call re-entered from
// Python code that a block's attribute read may run gets a vector of its own.
template <class T>
class Scratch {
 public:
  explicit Scratch(std::vector<T>& home) : home_(home) {
    items.swap(home_);
    items.clear();
  }
  ~Scratch() { home_.swap(items); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::vector<T> items;

 private:
  std::vector<T>& home_;
};

// Calls fn(block) for each of blocks[start:stop].
template <class Fn>
void each_block(nb::handle blocks, Fn&& fn, Py_ssize_t start = 0, Py_ssize_t stop = -1) {
  for (nb::object b : Blocks(blocks, start, stop)) fn(b.ptr());
}

Policy& as_policy(nb::handle policy) {
  if (!nb::isinstance<Policy>(policy)) throw nb::type_error("free queue: the policy must be a wakman policy");
  return nb::cast<Policy&>(policy);
}

struct PyFreeQueue {
  nb::object policy_obj;
  std::vector<nb::object> blocks;  // index = block id
  FreeQueue queue;
  std::vector<int32_t> ids;  // reused by popleft_n

  PyFreeQueue(nb::handle all_blocks, nb::handle free_blocks, nb::object policy)
      : policy_obj(policy), queue(0, FreeQueue::kNone, &as_policy(policy)) {
    static PyObject* prev_slot = interned("prev_free_block");
    static PyObject* next_slot = interned("next_free_block");
    int32_t null_block = FreeQueue::kNone;
    each_block(all_blocks, [&](PyObject* b) {
      if (block_id(b) != static_cast<int32_t>(blocks.size()))
        throw std::invalid_argument("free queue: blocks must be listed by id, from 0");
      if (is_null_block(b)) null_block = block_id(b);
      blocks.push_back(nb::borrow(b));
    });
    // Every refusal comes before the pool's blocks change: a refused install leaves the pool as stock.
    const int64_t usable = static_cast<int64_t>(blocks.size()) - (null_block != FreeQueue::kNone);
    check_fits(as_policy(policy), usable);
    if (as_policy(policy).size() != 0)
      throw std::invalid_argument("free queue: the policy must start empty (every block of the pool is free)");
    if (!as_policy(policy).claim(this))
      throw std::invalid_argument("free queue: the policy already serves another pool (or a running replay); give each pool its own");
    try {
      queue = FreeQueue(blocks.size(), null_block, &as_policy(policy));
      queue.policy().reset();    // a ghost a used policy kept would stand for no block of this pool
      queue.policy().reserve();  // a serving pool: no table grows while it serves
      each_block(free_blocks, [&](PyObject* b) { queue.start_free(block_id(b)); });
      // Last, once nothing above can refuse: the stock queue's links are dropped with it, so no
      // block points into a queue any more.
      for (const nb::object& b : blocks)
        if (PyObject_SetAttr(b.ptr(), prev_slot, Py_None) < 0 || PyObject_SetAttr(b.ptr(), next_slot, Py_None) < 0)
          throw nb::python_error();
    } catch (...) {
      as_policy(policy).release(this);  // no destructor runs for a constructor that throws
      throw;
    }
  }

  ~PyFreeQueue() { release_policy(); }
  PyFreeQueue(const PyFreeQueue&) = delete;
  PyFreeQueue& operator=(const PyFreeQueue&) = delete;

  // The policy may outlive the queue (a caller holds it): it serves no pool any more.
  void release_policy() {
    if (policy_obj.is_valid()) as_policy(policy_obj).release(this);
  }

  PyObject* block(int32_t id) const { return blocks[static_cast<size_t>(id)].ptr(); }

  // The policy's capacity is the pool's usable blocks (every block but the null block).
  static void check_fits(const Policy& policy, int64_t usable) {
    if (policy.capacity() != usable)
      throw std::invalid_argument("free queue: the policy's capacity (" + std::to_string(policy.capacity()) +
                                  " blocks) must be the pool's usable blocks (" + std::to_string(usable) + ")");
  }

  nb::list as_list(const std::vector<int32_t>& ids_) const {
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(ids_.size()));
    if (out == nullptr) throw nb::python_error();
    for (size_t i = 0; i < ids_.size(); ++i) {
      PyObject* b = block(ids_[i]);
      Py_INCREF(b);
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), b);
    }
    return nb::steal<nb::list>(out);
  }

  std::vector<int32_t> batch;  // hit's and append_n's scratch: the batch's block ids

  // Block id b, whose policy entry starts loading (FreeQueue::prefetch_block): a batch's calls
  // read their ids first, then act on them.
  int32_t ahead(int32_t b) const {
    queue.prefetch_block(b);
    return b;
  }

  // What sync read of one block: its id, whether it has a hash (and that hash's policy key), and
  // whether vLLM holds it (ref_cnt > 0).
  struct Read {
    int32_t block;
    bool hashed;
    bool in_use;
    Key key;
  };
  std::vector<Read> reads_;  // sync's scratch

  // FreeQueue::reconcile for blocks[start:stop], the null block skipped. Every block is read first,
  // its index entries starting to load, then the queue reconciles them in order.
  void sync(nb::handle blocks_, Py_ssize_t start, Py_ssize_t stop) {
    Scratch<Read> reads(reads_);
    for (nb::object held : Blocks(blocks_, start, stop)) {
      PyObject* b = held.ptr();
      Read r{block_id(b), false, false, 0};
      if (r.block == queue.null_block()) continue;
      r.hashed = block_hash(b, r.key);
      r.in_use = ref_cnt(b) > 0;
      if (r.hashed) queue.prefetch_key(r.key);
      reads.items.push_back(r);
    }
    for (const Read& r : reads.items) queue.reconcile(r.block, r.hashed, r.key, r.in_use);
  }

  std::vector<Key> expected;  // reused by expect_misses

  void expect_misses(nb::handle block_hashes, Py_ssize_t start, nb::handle groups) {
    if (!queue.policy().hears_misses()) {  // no ghosts: the misses would change nothing
      queue.drop_expected_misses();
      return;
    }
    std::vector<uint32_t> ids;
    for (nb::handle g : groups) ids.push_back(nb::cast<uint32_t>(g));
    expected.clear();
    each_block(
        block_hashes,
        [&](PyObject* h) {
          for (uint32_t g : ids) expected.push_back(group_key(h, g));
        },
        start);
    queue.expect_misses(expected);
  }

  std::vector<Key> arrived;  // reused by request_arrived

  // The policy's request hint (Policy::on_request) for a vLLM request at its arrival: its full
  // prompt blocks' keys in KV-cache group `group`; vLLM does not know its outputs yet.
  void request_arrived(nb::handle block_hashes, uint32_t group, double now_s) {
    if (!queue.policy().learns_from_requests()) return;
    arrived.clear();
    each_block(block_hashes, [&](PyObject* h) { arrived.push_back(group_key(h, group)); });
    queue.policy().on_request(arrived.data(), arrived.size(), nullptr, 0, now_s);
  }

  nb::list popleft_n(size_t n) {
    ids.clear();
    queue.take_victims(n, ids);
    return as_list(ids);
  }

  nb::list all_free() const {
    std::vector<int32_t> out;
    queue.free_blocks(out);
    return as_list(out);
  }
};

// iter_blocks_after's iterator: free_queue.hpp's FreeOrder, its block ids as the pool's blocks.
struct FreeBlockIter {
  nb::object owner;  // the FreeBlockQueue
  PyFreeQueue* q;
  FreeOrder walk;

  nb::object next() {
    const int32_t b = walk.next();
    if (b == FreeQueue::kNone) throw nb::stop_iteration();
    return nb::borrow(q->block(b));
  }
};

// The queue holds the pool's blocks, and each block holds its pool (KVCacheBlock.pool; a weak
// reference from vLLM 0.34 on, but the pool's hooks still refer to it): a cycle
// that Python's collector can only break if it sees these references.
int queue_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  PyFreeQueue* q = nb::inst_ptr<PyFreeQueue>(self);
  for (const nb::object& b : q->blocks) Py_VISIT(b.ptr());
  Py_VISIT(q->policy_obj.ptr());
  return 0;
}

int queue_clear(PyObject* self) {
  PyFreeQueue* q = nb::inst_ptr<PyFreeQueue>(self);
  q->blocks.clear();
  q->release_policy();
  q->policy_obj.reset();
  return 0;
}

int iter_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<FreeBlockIter>(self)->owner.ptr());
  return 0;
}

int iter_clear(PyObject* self) {
  nb::inst_ptr<FreeBlockIter>(self)->owner.reset();
  return 0;
}

PyType_Slot queue_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(queue_traverse)},
                             {Py_tp_clear, reinterpret_cast<void*>(queue_clear)},
                             {0, nullptr}};
PyType_Slot iter_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(iter_traverse)},
                            {Py_tp_clear, reinterpret_cast<void*>(iter_clear)},
                            {0, nullptr}};

}  // namespace

void bind_free_queue(nb::module_& m) {
  nb::class_<FreeBlockIter>(m, "FreeBlockIterator", nb::type_slots(iter_slots))
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", &FreeBlockIter::next);

  m.def(
      "policy_key", [](nb::handle key) { return object_key(key.ptr()); }, "hash_key"_a,
      "The core's 64-bit key for a vLLM hash key (BlockHashWithGroupId or OffloadKey bytes: a BlockHash,\n"
      "then the group id as 4 big-endian bytes): splitmix64 chained over the BlockHash's 8-byte big-endian\n"
      "words, then over group | len(BlockHash) << 32 (free_queue.policy_key states it). Another object:\n"
      "Python's hash, mod 2**64.");

  nb::class_<PyFreeQueue>(m, "FreeBlockQueue", nb::type_slots(queue_slots),
                          "vLLM's free-block queue ordered by a wakman policy (core/free_queue.hpp).")
      .def(nb::init<nb::handle, nb::handle, nb::object>(), "blocks"_a, "free_blocks"_a, "policy"_a,
           "blocks: every block of the pool, by id; free_blocks: the free ones in stock order, none cached.")
      .def_prop_ro("policy", [](const PyFreeQueue& q) { return q.policy_obj; })
      .def_prop_ro("num_free_blocks", [](const PyFreeQueue& q) { return q.queue.num_free(); })
      .def_prop_ro("num_blank_blocks", [](const PyFreeQueue& q) { return q.queue.blank_size(); },
                   "Free blocks without a hash, handed out first.")
      .def_prop_ro("num_reserve_blocks", [](const PyFreeQueue& q) { return q.queue.reserve_size(); },
                   "Free blocks without a hash released to the tail (vLLM's unpin_blocks), handed out last.")
      .def_prop_ro("num_hits", [](const PyFreeQueue& q) { return q.queue.num_hits(); },
                   "Prefix hits on cached blocks passed to the policies so far.")
      .def("popleft",
           [](PyFreeQueue& q) {
             if (q.queue.num_free() == 0) throw nb::value_error("No free blocks available");  // as stock
             q.ids.clear();
             q.queue.take_victims(1, q.ids);
             return nb::borrow(q.block(q.ids[0]));
           })
      .def("popleft_n", &PyFreeQueue::popleft_n, "n"_a,
           "n victims: blank blocks first, then the policy's, then reserve's; their keys leave the policy.")
      .def(
          "remove", [](PyFreeQueue& q, nb::handle b) { q.queue.take(block_id(b.ptr())); }, "block"_a,
          "The block leaves the free queue (ref_cnt 0 -> 1): a cached one is pinned, a hashless one loses its key.")
      .def(
          "append",
          [](PyFreeQueue& q, nb::handle b) { release(q.queue, block_id(b.ptr()), b.ptr()); }, "block"_a,
          "One block whose ref_cnt reached 0 (as append_n).")
      .def(
          "append_n",
          [](PyFreeQueue& q, nb::handle blocks) {
            Scratch<int32_t> ids(q.batch);
            for (nb::object b : Blocks(blocks)) ids.items.push_back(q.ahead(block_id(b.ptr())));
            for (int32_t id : ids.items) release(q.queue, id, q.block(id));  // the pool's own block of that id
          },
          "blocks"_a,
          "Blocks whose ref_cnt reached 0: keyed ones are unpinned; an unkeyed one with a hash (set on a path\n"
          "no hook saw) becomes a key; the others join reserve's tail, handed out after every cached block (stock\n"
          "vLLM appends uncached blocks only in unpin_blocks: last-resort eviction candidates).")
      .def(
          "prepend_n",
          [](PyFreeQueue& q, nb::handle blocks) {
            std::vector<int32_t> ids;
            std::vector<uint8_t> keeps_hash;
            each_block(blocks, [&](PyObject* b) {
              const int32_t id = block_id(b);
              Key h = 0;
              ids.push_back(id);
              keeps_hash.push_back(q.queue.has_key(id) && block_hash(b, h));
            });
            for (size_t i = ids.size(); i-- > 0;) q.queue.release_to_head(ids[i], keeps_hash[i]);
          },
          "blocks"_a,
          "Blocks to hand out first, blocks[0] at the head: uncached ones (a keyed one lost its hash: its key\n"
          "goes), and from vLLM 0.34's free_blocks(evict_first=True) cached ones, whose key leaves as the\n"
          "policy's own eviction of it would, ghost kept (they are evicted before any policy key, as stock\n"
          "does; a prefix hit before that re-keys them at release).")
      .def("get_all_free_blocks", &PyFreeQueue::all_free,
           "Head to tail: blank blocks, then cached ones in the policy's eviction order, then reserve's.")
      .def(
          "iter_blocks_after",
          [](nb::handle self, nb::handle cursor) {
            PyFreeQueue& q = nb::cast<PyFreeQueue&>(self);
            nb::object owner = nb::borrow(self);
            if (cursor.is_none()) return FreeBlockIter{owner, &q, FreeOrder(q.queue)};
            return FreeBlockIter{owner, &q, FreeOrder::after(q.queue, block_id(cursor.ptr()))};
          },
          "cursor"_a.none(), "Free blocks in eviction order after cursor (None: from the head), read lazily.")
      .def(
          "sync",
          [](PyFreeQueue& q, nb::handle blocks, Py_ssize_t start, Py_ssize_t stop) { q.sync(blocks, start, stop); },
          "blocks"_a, "start"_a = 0, "stop"_a = -1,
          "Reconcile blocks[start:stop] with their hashes, after a pool call that set or removed some: a\n"
          "first hash makes the block the policy key policy_key(block_hash) (copy_key(key, n) for the\n"
          "first free n while another block holds that key), pinned while ref_cnt > 0; a lost hash takes the key out of\n"
          "the policy in O(1) (a free block keeps its place under a key of its own where the policy can rekey: lru,\n"
          "fifo; else it joins blank's head); a changed hash re-keys the block.")
      .def("expect_misses", &PyFreeQueue::expect_misses, "block_hashes"_a, "start"_a, "groups"_a,
           "An admission is under way whose lookup missed from block_hashes[start] on (vLLM BlockHash\n"
           "bytes of a request's full blocks, in KV-cache groups `groups`): at its first popleft_n,\n"
           "before any victim is chosen, the policy hears a miss for each of those keys no block holds.")
      .def("request_arrived", &PyFreeQueue::request_arrived, "block_hashes"_a, "group"_a, "now_s"_a,
           "A request arrived at now_s (seconds) with these full prompt blocks (vLLM BlockHash bytes, in\n"
           "KV-cache group `group`): the policy's on_request hint, with no outputs (not known yet).")
      .def(
          "inserting_for",
          [](PyFreeQueue& q, nb::handle root_hash, uint32_t group) {
            Policy& policy = q.queue.policy();
            if (policy.learns_from_requests()) policy.inserting_for(group_key(root_hash.ptr(), group));
          },
          "root_hash"_a, "group"_a,
          "The blocks cached next belong to the request whose first full block has this BlockHash\n"
          "(in KV-cache group `group`): the policy's inserting_for hint.")
      .def("drop_expected_misses", [](PyFreeQueue& q) { q.queue.drop_expected_misses(); },
           "The admission did not go ahead (or is done): forget the misses expect_misses announced.")
      .def(
          "hit",
          [](PyFreeQueue& q, nb::handle blocks) {
            Scratch<int32_t> ids(q.batch);
            each_block(blocks, [&](PyObject* b) { ids.items.push_back(q.ahead(block_id(b))); });
            for (int32_t b : ids.items) q.queue.hit(b);
          },
          "blocks"_a, "Prefix hits on these blocks (free or in use); uncached ones are ignored.")
      .def("clear_cache", [](PyFreeQueue& q) { q.queue.clear_cache(); },
           "reset_prefix_cache succeeded: every cached block joins blank, the policy forgets everything.")
      .def(
          "switch",
          [](PyFreeQueue& q, nb::object policy) {
            Policy& next = as_policy(policy);
            PyFreeQueue::check_fits(next, q.queue.policy().capacity());
            q.queue.check_keys();  // refused before anything changes: the live policy stays live
            if (!next.claim(&q))
              throw std::invalid_argument("free queue: switch to a policy that serves no pool (this one or another) and no running replay");
            try {
              next.reserve();
              handover(q.queue.policy(), next);
            } catch (...) {  // the live policy is unchanged; next serves no pool
              next.release(&q);
              throw;
            }
            q.release_policy();
            q.queue.set_policy(&next);
            q.policy_obj = policy;
          },
          "policy"_a, "Make policy the live one: it adopts the cached blocks (O(cached blocks)).")
      .def(
          "key_of",
          [](const PyFreeQueue& q, nb::handle b) -> nb::object {
            int32_t id = block_id(b.ptr());
            if (!q.queue.has_key(id)) return nb::none();
            return nb::steal(PyLong_FromUnsignedLongLong(q.queue.key_of(id)));
          },
          "block"_a,
          "The block's policy key, or None while it is not cached (a hashless block's is its own, see is_hashless).")
      .def(
          "in_blank", [](const PyFreeQueue& q, nb::handle b) { return q.queue.in_blank(block_id(b.ptr())); },
          "block"_a)
      .def(
          "is_hashless", [](const PyFreeQueue& q, nb::handle b) { return q.queue.is_hashless(block_id(b.ptr())); },
          "block"_a,
          "A free block without a hash that holds a place in the policy's order (lru, fifo), as in stock: it lost "
          "its hash while free, or was released uncached to the tail (unpin_blocks' pages).")
      .def(
          "in_reserve", [](const PyFreeQueue& q, nb::handle b) { return q.queue.in_reserve(block_id(b.ptr())); },
          "block"_a)
      .def(
          "block_of",
          [](const PyFreeQueue& q, nb::handle key) -> nb::object {
            int32_t b = q.queue.block_of(nb::cast<Key>(key));
            return b < 0 ? nb::none() : nb::borrow(q.block(b));
          },
          "key"_a, "The block cached under a policy key, or None.");
}
