// How a compressed checkpoint stores a quantized linear weight "X.weight" of logical shape
// [rows (N, out features), cols (K, in features)]: as parts "X.qweight" (the data), "X.scales" and,
// for asymmetric int4, "X.zeros". Each part's bytes are exactly the corresponding array of the
// kernels' weight formats (kernels/include/infergate/kernels/formats.h, docs/quant-formats.md):
//   int8:      qweight I8 [N, K];              scales [N]                W = d[n] * q
//   int4 sym:  qweight U8 [N, ceil(K/2)];      scales [N, ceil(K/G)]     W = d[n, g] * (u - 8)
//   int4 asym: as sym plus zeros U8 [N, ceil(K/G)]                      W = d[n, g] * (u - z)
// with scales F16 or BF16, two int4 values per byte (even k in the low nibble), G in {32, 64, 128}.
// Quantization and dequantization call the kernels' scalar reference (quantize_weight_ref), the
// specification of every rounding decision, or its bit-identical optimised CPU version where the
// kernels library has one, so a checkpoint and the engine's kernels always agree. The scheme itself
// (format, group, symmetry, scale dtype) is in quant_scheme.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/kernels/formats.h"
#include "infergate/runtime/model/dtype.h"
#include "infergate/runtime/model/quant_scheme.h"
#include "infergate/runtime/model/safetensors_writer.h"

namespace infergate::runtime::model {

// "X.weight" -> "X.qweight" / "X.scales" / "X.zeros". Empty when the name does not end in ".weight".
std::string qweight_name(std::string_view weight_name);
std::string scales_name(std::string_view weight_name);
std::string zeros_name(std::string_view weight_name);

// The stored parts of a [rows, cols] weight.
std::vector<TensorSpec> quantized_parts(std::string_view weight_name, uint64_t rows, uint64_t cols,
                                        const QuantScheme& scheme);

// Bytes of each part for `nrows` rows.
struct RowBytes {
  uint64_t qweight = 0, scales = 0, zeros = 0;
};
RowBytes row_bytes(uint64_t nrows, uint64_t cols, const QuantScheme& scheme);

// Quantizes `nrows` rows of `cols` elements of `dtype` (F32, F16 or BF16, row-major) into the parts'
// bytes for those rows, with kernels::quantize_weight_ref. Non-finite weights are refused (the error
// names the row and column within these rows).
Status quantize_rows(const uint8_t* x, DType dtype, uint64_t nrows, uint64_t cols, const QuantScheme& scheme,
                     uint8_t* qweight, uint8_t* scales, uint8_t* zeros);
// The inverse, into floats (kernels::dequantize_weight_ref).
Status dequantize_rows(const uint8_t* qweight, const uint8_t* scales, const uint8_t* zeros, uint64_t nrows,
                       uint64_t cols, const QuantScheme& scheme, float* out);

// True when the two functions above run the kernels' optimised CPU ops (multithreaded, bit-identical to
// the reference) rather than the scalar reference; callers then hand them whole blocks of rows.
bool quantize_rows_is_parallel();
// Threads the optimised ops use (no effect on the reference).
void set_quantize_threads(int n);

}  // namespace infergate::runtime::model
