// How a compressed checkpoint stores a quantized linear weight "X.weight" of logical shape
// [rows (out features), cols (in features)]: as parts "X.qweight", "X.scales" and, for asymmetric
// int4, "X.zeros". The element layouts are the kernels' weight formats (docs/quant-formats.md):
//   int8: qweight I8 [rows, cols], x = s[r] * q                        (per output channel, symmetric)
//   int4: qweight U8 [rows, ceil(cols/2)], two values per byte, column 2j in the low nibble;
//         scales [rows, ceil(cols/group)]; symmetric: x = s * (q - 8), q in [0, 15];
//         asymmetric: x = s * (q - z) with zeros U8 [rows, ceil(cols/group)], z in [0, 15].
// Scales are F16 (or BF16). A last, shorter group covers the remaining columns when group does not
// divide cols.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/model/dtype.h"
#include "infergate/runtime/model/safetensors_writer.h"

namespace infergate::runtime::model {

enum class WeightFormat { kDense, kInt8, kInt4 };
std::string_view weight_format_name(WeightFormat f);  // "dense", "int8", "int4"

struct QuantScheme {
  WeightFormat format = WeightFormat::kInt8;
  int64_t group_size = 0;  // int4: 32, 64 or 128 (any positive even number is accepted); int8: 0
  bool symmetric = true;
  DType scale_dtype = DType::kF16;

  int64_t groups_per_row(int64_t cols) const;
};
Status validate_scheme(const QuantScheme& s);

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

// Quantizes `nrows` rows of `cols` floats (row-major) into the parts' bytes for those rows.
// Non-finite inputs: scales come from the finite values only; +-inf saturate to the extreme code,
// NaN becomes the code for 0.
void quantize_rows(const float* x, uint64_t nrows, uint64_t cols, const QuantScheme& scheme, uint8_t* qweight,
                   uint8_t* scales, uint8_t* zeros);
// The inverse, into floats.
void dequantize_rows(const uint8_t* qweight, const uint8_t* scales, const uint8_t* zeros, uint64_t nrows,
                     uint64_t cols, const QuantScheme& scheme, float* out);

}  // namespace infergate::runtime::model
