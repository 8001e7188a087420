// The CUDA element-wise ops of a decoder layer (fp32): checks and launches of elementwise.cuh's kernels.
#include "../validate.h"
#include "common.cuh"
#include "elementwise.cuh"

namespace infergate::kernels::cuda {

using ew::kThreads;

Status rmsnorm(View2<const float> x, const float* w, float eps, View2<float> y, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, x.cols, "rmsnorm", "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, x.rows, x.cols, "rmsnorm", "y"));
  if (w == nullptr && x.cols > 0) return invalid_argument("rmsnorm: weight is null");
  if (!(eps >= 0.0f)) return invalid_argument("rmsnorm: eps must be >= 0");
  if (x.rows == 0 || x.cols == 0) return ok_status();
  return launch_kernel(ew::rmsnorm_kernel<>, dim3(static_cast<unsigned>(x.rows)), dim3(kThreads),
                       ew::kRmsnormSmem, stream, false, "rmsnorm", x, w, eps, y);
}

Status rope(const RopeConfig& c, const float* inv_freq, const int32_t* positions, View3<float> q,
            View3<float> k, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_rope(c, q, k, "rope"));
  if (q.dim0 > 0 && (inv_freq == nullptr || positions == nullptr)) {
    return invalid_argument("rope: inv_freq or positions is null");
  }
  const int32_t half = c.rotary_dim / 2;
  const int64_t n = (q.dim0 * q.dim1 + k.dim0 * k.dim1) * half;
  if (n == 0) return ok_status();
  return launch_kernel(ew::rope_kernel<>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, false,
                       "rope", c.style, half, inv_freq, positions, q, k);
}

Status silu_mul(View2<const float> gate, View2<const float> up, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(gate, gate.rows, gate.cols, "silu_mul", "gate"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(up, gate.rows, gate.cols, "silu_mul", "up"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, gate.rows, gate.cols, "silu_mul", "out"));
  const int64_t n = gate.rows * gate.cols;
  if (n == 0) return ok_status();
  return launch_kernel(ew::silu_mul_kernel<>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, false,
                       "silu_mul", gate, up, out);
}

Status add(View2<const float> a, View2<const float> b, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(a, a.rows, a.cols, "add", "a"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(b, a.rows, a.cols, "add", "b"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, a.rows, a.cols, "add", "out"));
  const int64_t n = a.rows * a.cols;
  if (n == 0) return ok_status();
  return launch_kernel(ew::add_kernel<>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, false, "add",
                       a, b, out);
}

Status bias_add(View2<float> y, const float* bias, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, "bias_add", "y"));
  if (bias == nullptr && y.cols > 0) return invalid_argument("bias_add: bias is null");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return ok_status();
  return launch_kernel(ew::bias_add_kernel<>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, false,
                       "bias_add", y, bias);
}

Status embedding(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out,
                 Stream stream) {
  if (table.data == nullptr || table.rows < 1 || table.cols < 1 || table.row_stride < table.cols) {
    return invalid_argument("embedding: the table is empty or its row stride is below its width");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, tokens, table.cols, "embedding", "out"));
  if (tokens == 0) return ok_status();
  if (ids == nullptr) return invalid_argument("embedding: ids is null");
  return launch_kernel(ew::embedding_kernel<>, dim3(static_cast<unsigned>(tokens)), dim3(kThreads), 0, stream,
                       false, "embedding", table, ids, out);
}

}  // namespace infergate::kernels::cuda
