// Scalar reference of the linear layer: y = x W^T (+ bias), with W dequantized element by element.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"
#include "validate.h"

namespace infergate::kernels {

Status linear_ref(View2<const float> x, const WeightView& w, const float* bias, View2<float> y) {
  INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, w, y, "linear"));
  const int64_t n_out = w.layout.rows, k_in = w.layout.cols;
  std::vector<float> wrow(static_cast<size_t>(n_out * k_in));
  INFERGATE_K_RETURN_IF_ERROR(dequantize_weight_ref(w, contiguous(wrow.data(), n_out, k_in)));
  for (int64_t m = 0; m < x.rows; ++m) {
    const float* xm = x.row(m);
    for (int64_t n = 0; n < n_out; ++n) {
      const float* wn = wrow.data() + n * k_in;
      double acc = 0.0;
      for (int64_t k = 0; k < k_in; ++k) acc += static_cast<double>(xm[k]) * wn[k];
      if (bias != nullptr) acc += bias[n];
      y.at(m, n) = static_cast<float>(acc);
    }
  }
  return ok_status();
}

Status linear_int4_a8_ref(View2<const float> x, const WeightView& w, const float* bias, View2<float> y) {
  INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, w, y, "linear_int4_a8"));
  const WeightLayout& l = w.layout;
  if (!is_int4(l.format) || l.group_size % 32 != 0 || l.cols % l.group_size != 0) {
    return invalid_argument("linear_int4_a8: needs int4 weights with K (" + std::to_string(l.cols) +
                            ") a multiple of the group size (" + std::to_string(l.group_size) +
                            ") and the group size a multiple of 32");
  }
  const int64_t k_in = l.cols, g_size = l.group_size, groups = k_in / g_size;
  const int64_t row_bytes = weight_row_bytes(l);
  std::vector<int32_t> q(static_cast<size_t>(k_in)), qsum(static_cast<size_t>(groups));
  std::vector<float> s(static_cast<size_t>(groups));
  for (int64_t m = 0; m < x.rows; ++m) {
    const float* xm = x.row(m);
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t k = g * g_size; k < (g + 1) * g_size; ++k) amax = std::max(amax, std::fabs(xm[k]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      s[static_cast<size_t>(g)] = amax / 127.0f;
      int32_t sum = 0;
      for (int64_t k = g * g_size; k < (g + 1) * g_size; ++k) {
        q[static_cast<size_t>(k)] = quantize_int8(xm[k], inv);
        sum += q[static_cast<size_t>(k)];
      }
      qsum[static_cast<size_t>(g)] = sum;
    }
    for (int64_t n = 0; n < l.rows; ++n) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * row_bytes;
      double acc = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        const int32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[n * groups + g] : 8;
        int64_t dot = 0;
        for (int64_t k = g * g_size; k < (g + 1) * g_size; ++k)
          dot += static_cast<int64_t>(int4_get(row, k)) * q[static_cast<size_t>(k)];
        dot -= static_cast<int64_t>(z) * qsum[static_cast<size_t>(g)];
        const float d = scale_to_float(static_cast<const uint16_t*>(w.scales)[n * groups + g], l.scale_dtype);
        acc += static_cast<double>(d) * s[static_cast<size_t>(g)] * static_cast<double>(dot);
      }
      if (bias != nullptr) acc += bias[n];
      y.at(m, n) = static_cast<float>(acc);
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
