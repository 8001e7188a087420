// The CUDA weight ops: checks and launches of weight_ops.cuh's kernels (quantization, dequantization,
// the int4 repacking for the tensor-core GEMV), the host side of a refused row, and the host packer.
#include <cstring>
#include <vector>

#include "../rows.h"
#include "../validate.h"
#include "common.cuh"
#include "infergate/kernels/cuda_layouts.h"
#include "weight_ops.cuh"

namespace infergate::kernels::cuda {
namespace {

using wq::kThreads;

Status validate_dequantize(const WeightView& w, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "dequantize_weight"));
  const WeightLayout& l = w.layout;
  if (out.data == nullptr || out.rows != l.rows || out.cols != l.cols || out.row_stride < l.cols) {
    return invalid_argument("dequantize_weight: output view is not " + shape_str(l.rows, l.cols));
  }
  return ok_status();
}

}  // namespace

Status quantize_weight(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out,
                       Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_quantize_args(src, layout, out));
  int32_t* bad = nullptr;
  cudaError_t e = cudaMallocAsync(&bad, sizeof(int), stream);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight: allocating the error slot");
  const int32_t none = INT32_MAX;
  e = cudaMemcpyAsync(bad, &none, sizeof none, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) {
    const Status st =
        launch_kernel(wq::quantize_weight_kernel<>, dim3(static_cast<unsigned>(layout.rows)), dim3(kThreads),
                      sizeof(wq::QuantizeSmem), stream, false, "quantize_weight", src, layout, out, bad);
    if (!st.ok()) {
      (void)cudaFreeAsync(bad, stream);
      return st;
    }
  }
  int32_t first_bad = INT32_MAX;
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(&first_bad, bad, sizeof first_bad, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  (void)cudaFreeAsync(bad, stream);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight");
  if (first_bad == INT32_MAX) return ok_status();
  // Reproduce the reference's message for the first refused row from a host copy of it.
  std::vector<uint8_t> row(static_cast<size_t>(src.cols * (src.dtype == SourceDtype::kF32 ? 4 : 2)));
  const size_t esize = src.dtype == SourceDtype::kF32 ? 4 : 2;
  e = cudaMemcpy(
      row.data(),
      static_cast<const uint8_t*>(src.data) + static_cast<size_t>(first_bad) * src.row_stride * esize,
      row.size(), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight: reading back a refused row");
  WeightLayout one = layout;
  one.rows = 1;
  const WeightBytes b = weight_bytes(one);
  std::vector<uint8_t> d(static_cast<size_t>(b.data)), s(static_cast<size_t>(b.scales) + 2),
      z(static_cast<size_t>(b.zeros) + 1);
  std::vector<float> scratch(static_cast<size_t>(src.cols));
  MatrixSource host{row.data(), src.dtype, 1, src.cols, src.cols};
  Status st = quantize_weight_row(host, one, {d.data(), s.data(), z.data()}, 0, scratch.data());
  if (st.ok())
    return Status(StatusCode::kCudaError, "quantize_weight: the device refused row " +
                                              std::to_string(first_bad) + " but the reference accepts it");
  // The message names row 0 of the copy: put the real row back.
  std::string msg = st.message();
  const std::string from = "row 0", to = "row " + std::to_string(first_bad);
  if (const size_t at = msg.find(from); at != std::string::npos) msg.replace(at, from.size(), to);
  return Status(st.code(), msg);
}

Status dequantize_weight(const WeightView& w, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_dequantize(w, out));
  const int64_t n = w.layout.rows * w.layout.cols;
  return launch_kernel(wq::dequantize_weight_kernel<>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream,
                       false, "dequantize_weight", w, out);
}

bool int4_mma_eligible(const WeightLayout& l) {
  return is_int4(l.format) && l.rows % kInt4MmaRows == 0 && l.cols % kInt4MmaCols == 0 &&
         validate_weight_layout(l).ok();
}

Status pack_int4_for_mma(const WeightView& w, void* packed, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "pack_int4_for_mma"));
  if (!int4_mma_eligible(w.layout)) {
    return invalid_argument(
        "pack_int4_for_mma: needs an int4 weight with rows % 16 == 0 and cols % 64 == 0, got " +
        std::string(weight_format_name(w.layout.format)) + " " + shape_str(w.layout.rows, w.layout.cols));
  }
  if (packed == nullptr) return invalid_argument("pack_int4_for_mma: output is null");
  const int64_t words = w.layout.rows * w.layout.cols / 8;
  return launch_kernel(wq::pack_int4_kernel<>, dim3(grid_for(words, kThreads)), dim3(kThreads), 0, stream,
                       false, "pack_int4_for_mma", w, static_cast<uint32_t*>(packed));
}

Status pack_int4_for_mma_host(const WeightView& w, void* packed) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "pack_int4_for_mma"));
  if (!int4_mma_eligible(w.layout)) {
    return invalid_argument("pack_int4_for_mma: needs an int4 weight with rows % 16 == 0 and cols % 64 == 0");
  }
  if (packed == nullptr) return invalid_argument("pack_int4_for_mma: output is null");
  const WeightLayout& l = w.layout;
  auto* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, static_cast<size_t>(weight_bytes(l).data));
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t k = 0; k < l.cols; ++k) {
      int64_t off;
      int nib;
      int4_mma_locate(l.cols, r, k, &off, &nib);
      uint32_t word;
      std::memcpy(&word, out + off, 4);
      word |= int4_get(data + r * weight_row_bytes(l), k) << (4 * nib);
      std::memcpy(out + off, &word, 4);
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels::cuda
