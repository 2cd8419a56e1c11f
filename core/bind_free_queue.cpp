// wakman._core.FreeBlockQueue: the FreeQueue of free_queue.hpp over vLLM's KVCacheBlock objects.
//
// It fills the protocol vLLM's BlockPool uses on its free_block_queue (popleft, popleft_n, remove,
// append_n, prepend_n, num_free_blocks, get_all_free_blocks, iter_blocks_after) and the three calls
// the plugin's BlockPool hooks make (cached, uncached, hit). A block is read through its block_id,
// ref_cnt and is_null attributes only; nothing is written to it (its free-list slots stay None, so
// vLLM's repr of a block works). The blocks are those of the pool's `blocks` list (index = id).
#include <nanobind/nanobind.h>

#include <algorithm>
#include <string>
#include <vector>

#include "free_queue.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace wakman;

namespace {

PyObject* interned(const char* s) {
  PyObject* out = PyUnicode_InternFromString(s);
  if (out == nullptr) throw nb::python_error();
  return out;
}

long read_int(PyObject* obj, PyObject* name) {
  PyObject* v = PyObject_GetAttr(obj, name);
  if (v == nullptr) throw nb::python_error();
  long out = PyLong_AsLong(v);
  Py_DECREF(v);
  if (out == -1 && PyErr_Occurred()) throw nb::python_error();
  return out;
}

int32_t block_id(PyObject* block) {
  static PyObject* name = interned("block_id");
  return static_cast<int32_t>(read_int(block, name));
}

long ref_cnt(PyObject* block) {
  static PyObject* name = interned("ref_cnt");
  return read_int(block, name);
}

// Whether the block has a hash (its _block_hash slot, which KVCacheBlock.block_hash returns).
bool has_hash(PyObject* block) {
  static PyObject* name = interned("_block_hash");
  PyObject* v = PyObject_GetAttr(block, name);
  if (v == nullptr) throw nb::python_error();
  bool out = v != Py_None;
  Py_DECREF(v);
  return out;
}

bool is_null_block(PyObject* block) {
  static PyObject* name = interned("is_null");
  return read_int(block, name) != 0;
}

// Calls fn(block) for each item of an iterable of blocks (a list is read without a copy).
template <class Fn>
void each_block(nb::handle blocks, Fn&& fn) {
  PyObject* seq = PySequence_Fast(blocks.ptr(), "free queue: expected an iterable of blocks");
  if (seq == nullptr) throw nb::python_error();
  nb::object owner = nb::steal(seq);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) fn(items[i]);
}

Policy& as_policy(nb::handle policy) {
  if (!nb::isinstance<Policy>(policy)) throw nb::type_error("free queue: the policy must be a wakman policy");
  return nb::cast<Policy&>(policy);
}

struct PyFreeQueue {
  nb::object policy_obj;
  std::vector<nb::object> blocks;  // index = block id
  // The pool whose two per-block hash hooks this queue fills (hook_pool), and the stock methods they
  // call: BlockPool._insert_block_hash and BlockPool._remove_cached_block_hashes.
  nb::object pool, stock_insert, stock_remove;
  FreeQueue queue;
  std::vector<int32_t> ids;  // reused by popleft_n

  PyFreeQueue(nb::handle all_blocks, nb::handle free_blocks, nb::object policy)
      : policy_obj(policy), queue(0, FreeQueue::kNone, &as_policy(policy)) {
    static PyObject* is_null = interned("is_null");
    static PyObject* prev_slot = interned("prev_free_block");
    static PyObject* next_slot = interned("next_free_block");
    int32_t null_block = FreeQueue::kNone;
    each_block(all_blocks, [&](PyObject* b) {
      if (block_id(b) != static_cast<int32_t>(blocks.size()))
        throw std::invalid_argument("free queue: blocks must be listed by id, from 0");
      if (read_int(b, is_null)) null_block = block_id(b);
      // The stock queue's links are dropped with it: no block points into a queue any more.
      if (PyObject_SetAttr(b, prev_slot, Py_None) < 0 || PyObject_SetAttr(b, next_slot, Py_None) < 0)
        throw nb::python_error();
      blocks.push_back(nb::borrow(b));
    });
    queue = FreeQueue(blocks.size(), null_block, &as_policy(policy));
    each_block(free_blocks, [&](PyObject* b) { queue.release_to_tail(block_id(b)); });
  }

  PyObject* block(int32_t id) const { return blocks[static_cast<size_t>(id)].ptr(); }

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

  nb::list popleft_n(size_t n) {
    ids.clear();
    queue.take_victims(n, ids);
    return as_list(ids);
  }

  nb::list all_free() const {
    std::vector<int32_t> out;
    for (int32_t b = queue.blank_head(); b != FreeQueue::kNone; b = queue.blank_next(b)) out.push_back(b);
    std::vector<Key> order;
    queue.policy().eviction_order(order);
    for (Key k : order) out.push_back(queue.block_of(k));
    return as_list(out);
  }
};

// iter_blocks_after's iterator: blank blocks, then the policy's eviction order, read in chunks that
// double (the first k blocks cost O(k), not O(free blocks)). Like the stock queue's walk, it reads
// the live queue: do not change the queue while iterating.
struct FreeBlockIter {
  nb::object owner;  // the FreeBlockQueue
  PyFreeQueue* q;
  int32_t next_blank;  // the next blank block to yield, or kNone: then the policy's order
  size_t pos = 0;      // index into the policy's order of the next key to yield
  std::vector<Key> order;
  size_t limit = 0;
  bool complete = false;  // `order` holds the policy's whole order

  FreeBlockIter(nb::object owner_, PyFreeQueue* q_, int32_t first_blank)
      : owner(std::move(owner_)), q(q_), next_blank(first_blank) {}

  bool fetch_more() {
    if (complete) return false;
    limit = std::max<size_t>(64, 2 * limit);
    order.clear();
    q->queue.policy().eviction_order(order, limit);
    complete = order.size() < limit;
    return true;
  }

  // Position just after `key` in the policy's order (false if the key is not there).
  bool seek_after(Key key) {
    for (size_t i = 0;; ++i) {
      while (i >= order.size())
        if (!fetch_more()) return false;
      if (order[i] == key) {
        pos = i + 1;
        return true;
      }
    }
  }

  nb::object next() {
    if (next_blank != FreeQueue::kNone) {
      int32_t b = next_blank;
      next_blank = q->queue.blank_next(b);
      return nb::borrow(q->block(b));
    }
    while (true) {
      while (pos >= order.size())
        if (!fetch_more()) throw nb::stop_iteration();
      int32_t b = q->queue.block_of(order[pos++]);
      if (b >= 0) return nb::borrow(q->block(b));
    }
  }
};

// The queue holds the pool's blocks, and each block holds its pool (KVCacheBlock.pool): a cycle
// that Python's collector can only break if it sees these references.
int queue_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  PyFreeQueue* q = nb::inst_ptr<PyFreeQueue>(self);
  for (const nb::object& b : q->blocks) Py_VISIT(b.ptr());
  Py_VISIT(q->policy_obj.ptr());
  Py_VISIT(q->pool.ptr());
  Py_VISIT(q->stock_insert.ptr());
  Py_VISIT(q->stock_remove.ptr());
  return 0;
}

int queue_clear(PyObject* self) {
  PyFreeQueue* q = nb::inst_ptr<PyFreeQueue>(self);
  q->blocks.clear();
  q->policy_obj.reset();
  q->pool.reset();
  q->stock_insert.reset();
  q->stock_remove.reset();
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

  nb::class_<PyFreeQueue>(m, "FreeBlockQueue", nb::type_slots(queue_slots),
                          "vLLM's free-block queue ordered by a wakman policy (core/free_queue.hpp).")
      .def(nb::init<nb::handle, nb::handle, nb::object>(), "blocks"_a, "free_blocks"_a, "policy"_a,
           "blocks: every block of the pool, by id; free_blocks: the free ones in stock order, none cached.")
      .def_prop_ro("policy", [](const PyFreeQueue& q) { return q.policy_obj; })
      .def_prop_ro("num_free_blocks", [](const PyFreeQueue& q) { return q.queue.num_free(); })
      .def_prop_ro("num_blank_blocks", [](const PyFreeQueue& q) { return q.queue.blank_size(); },
                   "Free blocks without a hash (handed out first).")
      .def_prop_ro("num_hits", [](const PyFreeQueue& q) { return q.queue.num_hits(); },
                   "Prefix hits on cached blocks passed to the policies so far.")
      .def("popleft", [](PyFreeQueue& q) { return q.popleft_n(1)[0]; })
      .def("popleft_n", &PyFreeQueue::popleft_n, "n"_a,
           "n victims: blank blocks first, then the policy's; their keys leave the policy.")
      .def(
          "remove", [](PyFreeQueue& q, nb::handle b) { q.queue.take(block_id(b.ptr())); }, "block"_a,
          "The block leaves the free queue (ref_cnt 0 -> 1): a cached one is pinned.")
      .def(
          "append", [](PyFreeQueue& q, nb::handle b) { q.queue.release_to_tail(block_id(b.ptr())); }, "block"_a,
          "One block whose ref_cnt reached 0 (as append_n).")
      .def(
          "append_n",
          [](PyFreeQueue& q, nb::handle blocks) {
            each_block(blocks, [&](PyObject* b) { q.queue.release_to_tail(block_id(b)); });
          },
          "blocks"_a, "Blocks whose ref_cnt reached 0: cached ones are unpinned, uncached ones join blank's tail.")
      .def(
          "prepend_n",
          [](PyFreeQueue& q, nb::handle blocks) {
            std::vector<int32_t> ids;
            each_block(blocks, [&](PyObject* b) { ids.push_back(block_id(b)); });
            for (auto it = ids.rbegin(); it != ids.rend(); ++it) q.queue.release_to_head(*it);
          },
          "blocks"_a, "Uncached blocks to hand out first, blocks[0] at the head.")
      .def("get_all_free_blocks", &PyFreeQueue::all_free,
           "Head to tail: blank blocks, then cached ones in the policy's eviction order.")
      .def(
          "iter_blocks_after",
          [](nb::handle self, nb::handle cursor) {
            PyFreeQueue& q = nb::cast<PyFreeQueue&>(self);
            nb::object owner = nb::borrow(self);
            if (cursor.is_none()) return FreeBlockIter(owner, &q, q.queue.blank_head());
            int32_t b = block_id(cursor.ptr());
            if (q.queue.in_blank(b)) return FreeBlockIter(owner, &q, q.queue.blank_next(b));
            FreeBlockIter it(owner, &q, FreeQueue::kNone);
            if (!q.queue.has_key(b) || !it.seek_after(q.queue.key_of(b))) {  // not free: nothing after it
              it.order.clear();
              it.complete = true;
            }
            return it;
          },
          "cursor"_a.none(), "Free blocks in eviction order after cursor (None: from the head), read lazily.")
      .def(
          "cached",
          [](PyFreeQueue& q, nb::handle b, nb::handle block_hash) {
            Py_hash_t h = PyObject_Hash(block_hash.ptr());
            if (h == -1 && PyErr_Occurred()) throw nb::python_error();
            return q.queue.cached(block_id(b.ptr()), static_cast<Key>(h), ref_cnt(b.ptr()) > 0);
          },
          "block"_a, "block_hash"_a,
          "The block got its first hash: it becomes the policy key hash(block_hash) mod 2**64 (remixed with\n"
          "the block id while another block holds that key), pinned while its ref_cnt > 0. Returns the key.")
      .def(
          "uncached",
          [](PyFreeQueue& q, nb::handle b) {
            int32_t id = block_id(b.ptr());
            if (q.queue.has_key(id)) q.queue.uncached(id, ref_cnt(b.ptr()) == 0);
          },
          "block"_a, "The block lost its hash outside eviction: its key leaves the policy, O(1).")
      .def(
          "hit",
          [](PyFreeQueue& q, nb::handle blocks) {
            each_block(blocks, [&](PyObject* b) { q.queue.hit(block_id(b)); });
          },
          "blocks"_a, "Prefix hits on these blocks (free or in use); uncached ones are ignored.")
      .def(
          "hook_pool",
          [](PyFreeQueue& q, nb::object pool, nb::object stock_insert, nb::object stock_remove) {
            q.pool = std::move(pool);
            q.stock_insert = std::move(stock_insert);
            q.stock_remove = std::move(stock_remove);
          },
          "pool"_a, "stock_insert"_a, "stock_remove"_a,
          "Remember the pool and the stock methods insert_block_hash / remove_cached_block_hashes call.")
      .def(
          "insert_block_hash",
          [](PyFreeQueue& q, nb::handle block_hash, nb::handle block, nb::handle num_tokens) {
            bool first = !has_hash(block.ptr());
            q.stock_insert(q.pool, block_hash, block, num_tokens);
            if (first && has_hash(block.ptr()) && !is_null_block(block.ptr())) {
              Py_hash_t h = PyObject_Hash(block_hash.ptr());
              if (h == -1 && PyErr_Occurred()) throw nb::python_error();
              q.queue.cached(block_id(block.ptr()), static_cast<Key>(h), ref_cnt(block.ptr()) > 0);
            }
          },
          "block_hash_with_group_id"_a, "block"_a, "num_tokens"_a.none(),
          "The pool's _insert_block_hash: the stock method, then a block's first hash makes it a policy key\n"
          "(as cached()); a secondary hash leaves the key as it is.")
      .def(
          "remove_cached_block_hashes",
          [](PyFreeQueue& q, nb::handle block) {
            int32_t id = block_id(block.ptr());
            if (q.queue.has_key(id)) q.queue.uncached(id, ref_cnt(block.ptr()) == 0);
            return q.stock_remove(q.pool, block);
          },
          "block"_a,
          "The pool's _remove_cached_block_hashes: a hash removed outside eviction takes the block's key out\n"
          "of the policy (as uncached(); after an eviction the key is gone already), then the stock method.")
      .def("clear_cache", [](PyFreeQueue& q) { q.queue.clear_cache(); },
           "reset_prefix_cache succeeded: every cached block joins blank, the policy forgets everything.")
      .def(
          "switch",
          [](PyFreeQueue& q, nb::object policy) {
            Policy& next = as_policy(policy);
            handover(q.queue.policy(), next);
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
          "block"_a, "The block's policy key, or None while it is not cached.")
      .def(
          "in_blank", [](const PyFreeQueue& q, nb::handle b) { return q.queue.in_blank(block_id(b.ptr())); },
          "block"_a)
      .def(
          "block_of",
          [](const PyFreeQueue& q, nb::handle key) -> nb::object {
            int32_t b = q.queue.block_of(nb::cast<Key>(key));
            return b < 0 ? nb::none() : nb::borrow(q.block(b));
          },
          "key"_a, "The block cached under a policy key, or None.");
}
