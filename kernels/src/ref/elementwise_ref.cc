// Scalar references of the element-wise ops of a decoder layer: RMSNorm, RoPE, SiLU-and-multiply,
// residual and bias adds, and the embedding lookup.
#include <cmath>
#include <string>

#include "infergate/kernels/ref.h"
#include "validate.h"

namespace infergate::kernels {

Status rmsnorm_ref(View2<const float> x, const float* w, float eps, View2<float> y) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, x.cols, "rmsnorm", "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, x.rows, x.cols, "rmsnorm", "y"));
  if (w == nullptr && x.cols > 0) return invalid_argument("rmsnorm: weight is null");
  if (!(eps >= 0.0f)) return invalid_argument("rmsnorm: eps must be >= 0");
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.row(r);
    double ss = 0.0;
    for (int64_t c = 0; c < x.cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.cols) + eps);
    float* yr = y.row(r);
    for (int64_t c = 0; c < x.cols; ++c) yr[c] = static_cast<float>(xr[c] * inv * w[c]);
  }
  return ok_status();
}

Status rope_ref(const RopeConfig& c, const float* inv_freq, const int32_t* positions, View3<float> q,
                View3<float> k) {
  INFERGATE_K_RETURN_IF_ERROR(validate_rope(c, q, k, "rope"));
  if (q.dim0 > 0 && (inv_freq == nullptr || positions == nullptr)) {
    return invalid_argument("rope: inv_freq or positions is null");
  }
  const int64_t half = c.rotary_dim / 2;
  for (int64_t t = 0; t < q.dim0; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];  // fp32, as transformers
      const double cs = std::cos(static_cast<double>(angle)), sn = std::sin(static_cast<double>(angle));
      for (View3<float>* v : {&q, &k}) {
        for (int64_t h = 0; h < v->dim1; ++h) {
          float* x = v->at(t, h);
          const int64_t a = c.style == RopeStyle::kHalfSplit ? i : 2 * i;
          const int64_t b = c.style == RopeStyle::kHalfSplit ? i + half : 2 * i + 1;
          const double xa = x[a], xb = x[b];
          x[a] = static_cast<float>(xa * cs - xb * sn);
          x[b] = static_cast<float>(xb * cs + xa * sn);
        }
      }
    }
  }
  return ok_status();
}

Status silu_mul_ref(View2<const float> gate, View2<const float> up, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(gate, gate.rows, gate.cols, "silu_mul", "gate"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(up, gate.rows, gate.cols, "silu_mul", "up"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, gate.rows, gate.cols, "silu_mul", "out"));
  for (int64_t r = 0; r < gate.rows; ++r) {
    for (int64_t c = 0; c < gate.cols; ++c) {
      const double g = gate.at(r, c);
      out.at(r, c) = static_cast<float>(g / (1.0 + std::exp(-g)) * up.at(r, c));
    }
  }
  return ok_status();
}

Status add_ref(View2<const float> a, View2<const float> b, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(a, a.rows, a.cols, "add", "a"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(b, a.rows, a.cols, "add", "b"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, a.rows, a.cols, "add", "out"));
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) out.at(r, c) = a.at(r, c) + b.at(r, c);
  }
  return ok_status();
}

Status bias_add_ref(View2<float> y, const float* bias) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, "bias_add", "y"));
  if (bias == nullptr && y.cols > 0) return invalid_argument("bias_add: bias is null");
  for (int64_t r = 0; r < y.rows; ++r) {
    for (int64_t c = 0; c < y.cols; ++c) y.at(r, c) += bias[c];
  }
  return ok_status();
}

Status embedding_ref(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out) {
  if (table.data == nullptr || table.rows < 1 || table.cols < 1 || table.row_stride < table.cols) {
    return invalid_argument("embedding: the table is empty or its row stride is below its width");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, tokens, table.cols, "embedding", "out"));
  if (tokens > 0 && ids == nullptr) return invalid_argument("embedding: ids is null");
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= table.rows) {
      return out_of_range("embedding: token " + std::to_string(t) + " has id " + std::to_string(ids[t]) +
                          ", outside the vocabulary of " + std::to_string(table.rows));
    }
    for (int64_t c = 0; c < table.cols; ++c) out.at(t, c) = source_at(table, ids[t], c);
  }
  return ok_status();
}

}  // namespace infergate::kernels
