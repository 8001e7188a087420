// The checkpoint side of the weight formats: part names and shapes, and calls into the kernels'
// scalar reference for the numbers.
#include "infergate/runtime/model/weight_format.h"

#include "infergate/kernels/ref.h"

// The kernels' optimised CPU ops (multithreaded, SIMD, bit-identical to the reference) are used when
// the kernels library provides them; the scalar reference otherwise. Either way the bytes are the same.
#if __has_include("infergate/kernels/cpu.h")
#include "infergate/kernels/cpu.h"
#define INFERGATE_MODEL_KERNELS_CPU 1
#endif

namespace infergate::runtime::model {
namespace {

std::string with_suffix(std::string_view weight_name, std::string_view suffix) {
  constexpr std::string_view kWeight = ".weight";
  if (weight_name.size() < kWeight.size() ||
      weight_name.substr(weight_name.size() - kWeight.size()) != kWeight) {
    return {};
  }
  return std::string(weight_name.substr(0, weight_name.size() - kWeight.size())) + std::string(suffix);
}

Error kernel_error(const kernels::Status& s) {
  return Error(ErrorCode::kInvalidArgument, s.message(), "QuantizationFailed");
}

}  // namespace

std::string qweight_name(std::string_view n) { return with_suffix(n, ".qweight"); }
std::string scales_name(std::string_view n) { return with_suffix(n, ".scales"); }
std::string zeros_name(std::string_view n) { return with_suffix(n, ".zeros"); }

std::vector<TensorSpec> quantized_parts(std::string_view name, uint64_t rows, uint64_t cols,
                                        const QuantScheme& s) {
  std::vector<TensorSpec> parts;
  const kernels::WeightLayout l = kernel_layout(s, static_cast<int64_t>(rows), static_cast<int64_t>(cols));
  const uint64_t row = static_cast<uint64_t>(kernels::weight_row_bytes(l));
  const uint64_t groups = static_cast<uint64_t>(kernels::weight_groups_per_row(l));
  if (s.format == WeightFormat::kInt8) {
    parts.push_back({qweight_name(name), DType::kI8, {rows, row}});
    parts.push_back({scales_name(name), s.scale_dtype, {rows}});
  } else {
    parts.push_back({qweight_name(name), DType::kU8, {rows, row}});
    parts.push_back({scales_name(name), s.scale_dtype, {rows, groups}});
    if (!s.symmetric) parts.push_back({zeros_name(name), DType::kU8, {rows, groups}});
  }
  return parts;
}

RowBytes row_bytes(uint64_t nrows, uint64_t cols, const QuantScheme& s) {
  const kernels::WeightBytes b =
      kernels::weight_bytes(kernel_layout(s, static_cast<int64_t>(nrows), static_cast<int64_t>(cols)));
  return {static_cast<uint64_t>(b.data), static_cast<uint64_t>(b.scales), static_cast<uint64_t>(b.zeros)};
}

Status quantize_rows(const uint8_t* x, DType dtype, uint64_t nrows, uint64_t cols, const QuantScheme& s,
                     uint8_t* qweight, uint8_t* scales, uint8_t* zeros) {
  kernels::MatrixSource src;
  src.data = x;
  src.dtype = dtype == DType::kF32   ? kernels::SourceDtype::kF32
              : dtype == DType::kF16 ? kernels::SourceDtype::kF16
                                     : kernels::SourceDtype::kBF16;
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return invalid_argument("weights to quantize must be F32, F16 or BF16, not " +
                            std::string(dtype_name(dtype)));
  }
  src.rows = static_cast<int64_t>(nrows);
  src.cols = static_cast<int64_t>(cols);
  src.row_stride = static_cast<int64_t>(cols);
  kernels::WeightBuffers out{qweight, scales, zeros};
#ifdef INFERGATE_MODEL_KERNELS_CPU
  kernels::Status k = kernels::quantize_weight_cpu(src, kernel_layout(s, src.rows, src.cols), out);
#else
  kernels::Status k = kernels::quantize_weight_ref(src, kernel_layout(s, src.rows, src.cols), out);
#endif
  if (!k.ok()) return kernel_error(k);
  return ok_status();
}

Status dequantize_rows(const uint8_t* qweight, const uint8_t* scales, const uint8_t* zeros, uint64_t nrows,
                       uint64_t cols, const QuantScheme& s, float* out) {
  kernels::WeightView w;
  w.layout = kernel_layout(s, static_cast<int64_t>(nrows), static_cast<int64_t>(cols));
  w.data = qweight;
  w.scales = scales;
  w.zeros = zeros;
  const auto view = kernels::contiguous(out, static_cast<int64_t>(nrows), static_cast<int64_t>(cols));
#ifdef INFERGATE_MODEL_KERNELS_CPU
  kernels::Status k = kernels::dequantize_weight_cpu(w, view);
#else
  kernels::Status k = kernels::dequantize_weight_ref(w, view);
#endif
  if (!k.ok()) return kernel_error(k);
  return ok_status();
}

bool quantize_rows_is_parallel() {
#ifdef INFERGATE_MODEL_KERNELS_CPU
  return true;
#else
  return false;
#endif
}

void set_quantize_threads([[maybe_unused]] int n) {
#ifdef INFERGATE_MODEL_KERNELS_CPU
  if (n > 0) kernels::set_cpu_threads(n);
#endif
}

}  // namespace infergate::runtime::model
