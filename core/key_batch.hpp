// Keys from Python, for every binding file: a Python int is a key taken modulo 2**64; a batch of keys
// is borrowed from a C-contiguous 1-d buffer of 8-byte integers (numpy uint64 or int64, read in place)
// or read from a list, tuple or any other iterable of ints into a scratch vector (a list or tuple of
// exact ints is read through its item array; any other item goes through the iterator, which holds
// a reference to each item while its conversion may run Python code).
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "key_map.hpp"

namespace wakman::py {

namespace nb = nanobind;

inline Key to_key(nb::handle h) {
  unsigned long long k = PyLong_AsUnsignedLongLongMask(h.ptr());
  if (k == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
  return static_cast<Key>(k);
}

// A view of a batch of keys. `scratch` receives copied keys; a caller that reuses it allocates nothing
// in steady state.
class Keys {
 public:
  Keys(nb::handle obj, std::vector<Key>& scratch) {
    PyObject* o = obj.ptr();
    if ((PyList_Check(o) || PyTuple_Check(o)) && exact_ints(o)) {
      // exact ints convert without running Python code, so the borrowed items stay the list's
      Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
      PyObject** items = PySequence_Fast_ITEMS(o);
      scratch.resize(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i) scratch[i] = to_key(items[i]);
      data_ = scratch.data();
      size_ = scratch.size();
      return;
    }
    if (PyBytes_Check(o) || PyByteArray_Check(o)) throw nb::type_error("keys: expected integers, got bytes");
    if (PyObject_CheckBuffer(o) && PyObject_GetBuffer(o, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
      const char* f = view_.format ? view_.format : "B";
      if (*f == '<' || *f == '=' || *f == '@') ++f;
      bool eight = view_.itemsize == 8 && (*f == 'Q' || *f == 'q' || *f == 'L' || *f == 'l') && f[1] == 0;
      if (eight && view_.ndim <= 1) {
        has_view_ = true;
        data_ = static_cast<const Key*>(view_.buf);
        size_ = static_cast<size_t>(view_.len / 8);
        return;
      }
      PyBuffer_Release(&view_);  // another element type: read it item by item below
    } else {
      PyErr_Clear();
    }
    scratch.clear();
    for (nb::handle item : obj) scratch.push_back(to_key(item));
    data_ = scratch.data();
    size_ = scratch.size();
  }
  ~Keys() {
    if (has_view_) PyBuffer_Release(&view_);
  }

  // Every item of list or tuple `o` is an int itself: another item's conversion (an __index__) may run
  // Python code that changes `o`.
  static bool exact_ints(PyObject* o) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!PyLong_CheckExact(items[i])) return false;
    return true;
  }
  Keys(const Keys&) = delete;
  Keys& operator=(const Keys&) = delete;
  const Key* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  const Key* data_ = nullptr;
  size_t size_ = 0;
};

// Keys with their own scratch vector, for calls that keep no buffer between them.
class KeyBatch {
 public:
  explicit KeyBatch(nb::handle obj) : keys_(obj, scratch_) {}
  const Key* data() const { return keys_.data(); }
  size_t size() const { return keys_.size(); }

 private:
  std::vector<Key> scratch_;  // declared first: initialised before keys_ fills it
  Keys keys_;
};

}  // namespace wakman::py
