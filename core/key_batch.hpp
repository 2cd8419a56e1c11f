// KeyBatch for binding files other than bindings.cpp: a view of a batch of keys, borrowed from a
// C-contiguous buffer of 8-byte integers (numpy uint64 or int64, read in place) or copied from any
// iterable of Python ints (taken modulo 2**64). Same rules as the KeyBatch inside bindings.cpp, which
// keeps its own copy for now so that file stays untouched; one can include this header later.
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

}  // namespace wakman::py
