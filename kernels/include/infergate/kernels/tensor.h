// Typed views over memory the caller owns: a pointer, a shape and strides (in elements). The last
// dimension is always contiguous; views never own or allocate. Used on the host and the device.
#pragma once

#include <cstdint>
#include <type_traits>

#include "infergate/kernels/numeric.h"

namespace infergate::kernels {

// A matrix [rows, cols]; element (r, c) lives at data[r * row_stride + c].
template <class T>
struct View2 {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;

  INFERGATE_HD T* row(int64_t r) const { return data + r * row_stride; }
  INFERGATE_HD T& at(int64_t r, int64_t c) const { return data[r * row_stride + c]; }
  // A View2<T> converts to View2<const T>.
  template <class U, std::enable_if_t<std::is_same_v<U, T> && !std::is_const_v<U>, int> = 0>
  INFERGATE_HD operator View2<const U>() const {
    return {data, rows, cols, row_stride};
  }
};

// A tensor [dim0, dim1, dim2] (e.g. [tokens, heads, head_dim]); element (i, j, k) lives at
// data[i * stride0 + j * stride1 + k].
template <class T>
struct View3 {
  T* data = nullptr;
  int64_t dim0 = 0;
  int64_t dim1 = 0;
  int64_t dim2 = 0;
  int64_t stride0 = 0;
  int64_t stride1 = 0;

  INFERGATE_HD T* at(int64_t i, int64_t j) const { return data + i * stride0 + j * stride1; }
  template <class U, std::enable_if_t<std::is_same_v<U, T> && !std::is_const_v<U>, int> = 0>
  INFERGATE_HD operator View3<const U>() const {
    return {data, dim0, dim1, dim2, stride0, stride1};
  }
};

template <class T>
View2<T> contiguous(T* data, int64_t rows, int64_t cols) {
  return {data, rows, cols, cols};
}
template <class T>
View3<T> contiguous(T* data, int64_t d0, int64_t d1, int64_t d2) {
  return {data, d0, d1, d2, d1 * d2, d2};
}

}  // namespace infergate::kernels
