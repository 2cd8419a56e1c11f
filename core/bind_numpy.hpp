// The binding layer's one way to hand a vector to Python: a 1-D numpy array over the vector's
// own buffer, which it owns (freed with the array), so the values are not copied.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <utility>
#include <vector>

namespace wakman {

template <class T>
nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>> to_numpy(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  nanobind::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>>(owned->data(), {owned->size()}, owner);
}

}  // namespace wakman
