// The thin binding layer: wakman._core exposes the policies of core/policies/ to Python.
//
// Keys cross as Python ints taken modulo 2**64; a batch of keys is any iterable of ints, and a
// C-contiguous buffer of 8-byte integers (numpy uint64 or int64) is read in place without a copy.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "driver.hpp"
#include "policies/arc.hpp"
#include "policies/belady.hpp"
#include "policies/infinite.hpp"
#include "policies/recency.hpp"
#include "policies/s3fifo.hpp"
#include "policies/sieve.hpp"
#include "prefix.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace wakman;

namespace {

Key to_key(nb::handle h) {
  unsigned long long k = PyLong_AsUnsignedLongLongMask(h.ptr());
  if (k == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
  return static_cast<Key>(k);
}

// A view of a batch of keys: borrowed from a buffer of 8-byte integers, or copied from an iterable.
class KeyBatch {
 public:
  explicit KeyBatch(nb::handle obj) {
    if (PyObject_CheckBuffer(obj.ptr()) &&
        PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
      has_view_ = true;
      const char* f = view_.format ? view_.format : "B";
      if (*f == '<' || *f == '=' || *f == '@') ++f;
      bool eight = view_.itemsize == 8 && (*f == 'Q' || *f == 'q' || *f == 'L' || *f == 'l') && f[1] == 0;
      if (eight && view_.ndim <= 1) {
        data_ = static_cast<const Key*>(view_.buf);
        size_ = static_cast<size_t>(view_.len / 8);
        return;
      }
      PyBuffer_Release(&view_);
      has_view_ = false;
      if (PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr()))
        throw nb::type_error("keys: expected integers, got bytes");
    } else {
      PyErr_Clear();
    }
    Py_ssize_t hint = PyObject_LengthHint(obj.ptr(), 0);
    if (hint < 0) throw nb::python_error();
    copy_.reserve(static_cast<size_t>(hint));
    for (nb::handle item : obj) copy_.push_back(to_key(item));
    data_ = copy_.data();
    size_ = copy_.size();
  }
  ~KeyBatch() {
    if (has_view_) PyBuffer_Release(&view_);
  }
  KeyBatch(const KeyBatch&) = delete;
  KeyBatch& operator=(const KeyBatch&) = delete;
  const Key* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  std::vector<Key> copy_;
  const Key* data_ = nullptr;
  size_t size_ = 0;
};

nb::list key_list(const std::vector<Key>& keys) {
  nb::list out;
  for (Key k : keys) out.append(nb::steal(PyLong_FromUnsignedLongLong(k)));
  return out;
}

std::vector<Key> keys_of(nb::handle obj) {
  KeyBatch batch(obj);
  return std::vector<Key>(batch.data(), batch.data() + batch.size());
}

}  // namespace

void bind_trace_scan(nb::module_& m);  // bind_trace_scan.cpp

NB_MODULE(_core, m) {
  m.doc() = "wakman's compiled policy core: the policies and their per-block loops (see core/policy.hpp)";
  nb::exception<NoEvictable>(m, "NoEvictableKey", PyExc_LookupError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const BadKey& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    }
  });

  nb::class_<Policy>(m, "Policy", "The one event protocol every eviction policy implements (core/policy.hpp).")
      .def_prop_ro("capacity", &Policy::capacity, "Capacity in blocks.")
      .def("__len__", &Policy::size, "Resident keys, pinned ones included.")
      .def("__contains__", [](const Policy& p, nb::handle k) { return p.contains(to_key(k)); })
      .def_prop_ro("num_pinned", &Policy::num_pinned)
      .def_prop_ro("num_evictable", &Policy::num_evictable)
      .def_prop_ro("memory_bytes", &Policy::bytes, "Bytes held by the policy's tables.")
      .def("is_pinned", [](const Policy& p, nb::handle k) { return p.is_pinned(to_key(k)); })
      .def(
          "access", [](Policy& p, nb::handle k) { return p.access(to_key(k)); },
          "Look a key up as a plain cache: True on a hit; a miss evicts while full, then inserts.")
      .def(
          "replay",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            return p.replay(batch.data(), batch.size());
          },
          "keys"_a, "Access every key in order (numpy uint64 read in place); return the number of hits.")
      .def(
          "miss", [](Policy& p, nb::handle k) { p.miss(to_key(k)); },
          "A lookup missed on the key: a ghost hit is recorded before any eviction.")
      .def(
          "miss_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            for (size_t i = 0; i < batch.size(); ++i) p.miss(batch.data()[i]);
          },
          "keys"_a)
      .def(
          "insert", [](Policy& p, nb::handle k, bool pinned) { p.insert(to_key(k), pinned); }, "key"_a,
          "pinned"_a = false, "A new key becomes resident (the caller made room).")
      .def("insert_pinned", [](Policy& p, nb::handle k) { p.insert(to_key(k), true); })
      .def("hit", [](Policy& p, nb::handle k) { p.hit(to_key(k)); }, "A lookup found the resident key.")
      .def("pin", [](Policy& p, nb::handle k) { p.pin(to_key(k)); }, "The key leaves the eviction order.")
      .def("hit_pin",
           [](Policy& p, nb::handle k) {
             Key key = to_key(k);
             p.hit(key);
             p.pin(key);
           })
      .def("unpin", [](Policy& p, nb::handle k) { p.unpin(to_key(k)); },
           "The key re-enters the order at its segment's newest position.")
      .def(
          "hit_pin_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            for (size_t i = 0; i < batch.size(); ++i) {
              p.hit(batch.data()[i]);
              p.pin(batch.data()[i]);
            }
          },
          "keys"_a)
      .def(
          "unpin_many",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            for (size_t i = 0; i < batch.size(); ++i) p.unpin(batch.data()[i]);
          },
          "keys"_a)
      .def("evict", &Policy::evict, "Remove and return a victim among the unpinned keys.")
      .def(
          "evict_many",
          [](Policy& p, size_t n) {
            if (n > p.num_evictable())
              throw NoEvictable(std::to_string(n) + " victims asked, " + std::to_string(p.num_evictable()) +
                                " unpinned");
            std::vector<Key> out;
            out.reserve(n);
            for (size_t i = 0; i < n; ++i) out.push_back(p.evict());
            return key_list(out);
          },
          "n"_a)
      .def("remove", [](Policy& p, nb::handle k) { p.remove(to_key(k)); },
           "Drop a resident key outside eviction in O(1); the others keep their metadata.")
      .def("discard", [](Policy& p, nb::handle k) { p.remove(to_key(k)); }, "Alias of remove.")
      .def(
          "adopt",
          [](Policy& p, nb::handle keys) {
            KeyBatch batch(keys);
            for (size_t i = 0; i < batch.size(); ++i) p.adopt(batch.data()[i]);
          },
          "keys"_a, "Take over unpinned keys, oldest (first victim) first.")
      .def("reset", &Policy::reset, "Forget everything: resident keys, pins, ghosts, adaptive state.")
      .def("eviction_order",
           [](const Policy& p) {
             std::vector<Key> out;
             p.eviction_order(out);
             return key_list(out);
           })
      .def("pinned_keys",
           [](const Policy& p) {
             std::vector<Key> out;
             p.pinned_keys(out);
             return key_list(out);
           })
      .def("__repr__", [](nb::handle self) {
        const Policy& p = nb::cast<const Policy&>(self);
        return nb::cast<std::string>(self.type().attr("__name__")) + "(capacity=" + std::to_string(p.capacity()) +
               ", resident=" + std::to_string(p.size()) + ", pinned=" + std::to_string(p.num_pinned()) + ")";
      });

  nb::class_<Recency<true>, Policy>(m, "LRU").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<Recency<false>, Policy>(m, "FIFO").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<Sieve, Policy>(m, "Sieve").def(nb::init<int64_t>(), "capacity"_a);
  nb::class_<Infinite, Policy>(m, "Infinite").def(nb::init<int64_t>(), "capacity"_a = 1);
  nb::class_<ARC, Policy>(m, "ARC")
      .def(nb::init<int64_t>(), "capacity"_a)
      .def_prop_ro("p", &ARC::p, "T1's target size (blocks, a float).")
      .def_prop_ro("ghost_size", &ARC::ghost_size);
  nb::class_<S3FIFO, Policy>(m, "S3FIFO")
      .def(nb::init<int64_t, double, double, int, int, bool>(), "capacity"_a, "small_ratio"_a = 0.10,
           "ghost_ratio"_a = 0.90, "promote_threshold"_a = 2, "freq_cap"_a = 3, "warmup_to_main"_a = true)
      .def("in_ghost", [](const S3FIFO& p, nb::handle k) { return p.in_ghost(to_key(k)); })
      .def_prop_ro("ghost_size", &S3FIFO::ghost_size)
      .def_ro("small_ratio", &S3FIFO::small_ratio_)
      .def_ro("ghost_ratio", &S3FIFO::ghost_ratio_)
      .def_ro("promote_threshold", &S3FIFO::promote_threshold_)
      .def_ro("freq_cap", &S3FIFO::freq_cap_)
      .def_ro("warmup_to_main", &S3FIFO::warmup_to_main_)
      .def_ro("small_capacity", &S3FIFO::small_capacity_)
      .def_ro("main_capacity", &S3FIFO::main_capacity_)
      .def_ro("ghost_capacity", &S3FIFO::ghost_capacity_);
  nb::class_<Belady, Policy>(m, "Belady")
      .def(
          "__init__",
          [](Belady* self, int64_t capacity, nb::handle future) {
            if (future.is_none())
              throw std::invalid_argument("belady: needs future=, the whole key sequence it will be given, in order");
            new (self) Belady(capacity, keys_of(future));
          },
          "capacity"_a, "future"_a = nb::none())
      .def("seek", &Belady::seek, "position"_a, "Accesses before position (an index into future) are past.")
      .def_prop_ro("clock", &Belady::clock);

  m.def(
      "handover",
      [](const Policy& src, Policy& dst) {
        std::vector<Key> order, pinned;
        src.eviction_order(order);
        src.pinned_keys(pinned);
        dst.reset();
        for (Key k : order) dst.adopt(k);
        for (Key k : pinned) dst.insert(k, true);
      },
      "src"_a, "dst"_a, "Reset dst, then give it src's cached blocks: unpinned in src's eviction order, pinned as pinned.");

  m.def(
      "cached_prefix",
      [](const Policy& p, nb::handle keys, size_t limit) {
        KeyBatch batch(keys);
        return cached_prefix(p, batch.data(), std::min(limit, batch.size()));
      },
      "policy"_a, "keys"_a, "limit"_a, "Blocks of the longest prefix of keys[:limit] resident in policy.");
  bind_trace_scan(m);
}
