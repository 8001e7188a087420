// The format family and scheme of a release's weights, and the short word that names it in release
// statements, flags and the InferenceModel (docs/quant-formats.md, "Format words", has the grammar and
// why it is one word and not a structured field).
//
//   word    = dense | ours | fp8 | ct-int4 | awq | gptq
//   dense   = "fp16" | "bf16" | "fp32"
//   ours    = "int8" | "int4"                     (infergate-runtime quantize; details in quantization.json)
//   fp8     = "fp8-block" ["-" R "x" C]          (block R x C, omitted for DeepSeek-V3's 128 x 128)
//           | "fp8-channel"
//   ct-int4 = "int4-ct-" group "-" ("sym" | "asym")
//   awq     = "awq-" group
//   gptq    = "gptq-" group ["-v2"]
//   group   = "g" G | "ch"                        (G elements along K per scale, or one per channel)
//
// Examples: Kimi-K2-Thinking int4-ct-g32-sym, DeepSeek-V3 / Kimi-K2-Instruct fp8-block, GLM-4.5/4.6-FP8
// fp8-channel, a GLM-4.5-Air AWQ release awq-g128. Activation order (g_idx) is not in the word: it
// changes neither what an engine needs to be told nor the bytes beyond g_idx itself, which the
// description counts. Every word is at most 32 characters of [a-z0-9-].
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "infergate/common/result.h"
#include "infergate/weights/dtype.h"

namespace infergate::weights {

enum class Family : uint8_t {
  kDense,          // no quantization: the linear weights are F16, BF16 or F32
  kInfergateInt8,  // ours: X.qweight I8 [N, K], X.scales F16/BF16 [N]
  kInfergateInt4,  // ours: X.qweight U8 [N, ceil(K/2)], X.scales [N, ceil(K/G)], X.zeros U8 (asymmetric)
  kFp8Block,       // X.weight F8_E4M3 [N, K], X.weight_scale_inv (DeepSeek) or X.weight_scale
                   // (compressed-tensors block) [ceil(N/R), ceil(K/C)]
  kFp8Channel,     // compressed-tensors float-quantized: X.weight F8_E4M3 [N, K], X.weight_scale [N, 1]
  kCtInt4,         // compressed-tensors pack-quantized: X.weight_packed I32 [N, ceil(K/8)], X.weight_scale
                   // [N, K/G], X.weight_shape [2], X.weight_zero_point (asym), X.weight_g_idx (act order)
  kAwqInt4,        // AutoAWQ GEMM: X.qweight I32 [K, N/8], X.qzeros I32 [K/G, N/8], X.scales [K/G, N]
  kGptqInt4,       // GPTQ: X.qweight I32 [K/8, N], X.qzeros I32 [ceil(K/G), N/8], X.scales, X.g_idx [K]
};
// "dense", "infergate-int8", "infergate-int4", "fp8-block", "fp8-channel", "ct-int4", "awq", "gptq".
std::string_view family_name(Family f);
bool is_quantized(Family f);

struct Scheme {
  Family family = Family::kDense;
  int bits = 16;           // bits per stored weight value: 16 / 32 dense, 8 int8 and fp8, 4 int4
  int64_t group_size = 0;  // int4 families: elements along K per scale; 0: one scale per output channel
  bool symmetric = true;   // ours int4 and ct: no zero points stored; AWQ stores zeros always (false);
                           // GPTQ: the config's `sym` (zeros are stored either way)
  bool act_order = false;  // ct (actorder "group") and GPTQ (desc_act): columns grouped by g_idx
  bool gptq_v2 = false;    // GPTQ checkpoint_format gptq_v2: qzeros hold z, not z - 1
  std::array<int64_t, 2> block = {0, 0};  // fp8-block: rows and columns one scale covers
  bool scale_ue8m0 = false;               // fp8-block with scale_fmt "ue8m0": every scale is a power of two
  Dtype scale_dtype = Dtype::kF32;        // as stored (quantized families)
  Dtype dense_dtype = Dtype::kBF16;  // the dtype of the linear weights left unquantized (or of all, dense)
};

// The word of a scheme (the grammar above). Fails (reason "UnsupportedQuantization") only for a dense
// dtype that names no word (F64, integers).
Result<std::string> format_word(const Scheme& s);

// A word parsed back: the family and the parameters the word carries (group, symmetry, block, v2,
// the dense dtype). Refuses anything outside the grammar (reason "InvalidFormatWord").
Result<Scheme> parse_format_word(std::string_view word);

// A release statement's weightFormat: 1 to 32 characters of [a-z0-9_-]. Wider than the grammar so that
// statements signed before it (fp8_e4m3, uint8, ...) still read; those words compare only as strings.
bool is_statement_word(std::string_view word);

}  // namespace infergate::weights
