// Validation and names for the published weight formats of published.h.
#include "infergate/kernels/published.h"

#include <string>

#include "validate.h"

namespace infergate::kernels {

const char* published_format_name(PublishedFormat f) {
  switch (f) {
    case PublishedFormat::kFp8Block: return "fp8-block";
    case PublishedFormat::kFp8Channel: return "fp8-channel";
    case PublishedFormat::kCtInt4: return "ct-int4";
    case PublishedFormat::kAwqInt4: return "awq";
    case PublishedFormat::kGptqInt4: return "gptq";
  }
  return "unknown";
}

Status validate_published_layout(const PublishedLayout& l) {
  const int f = static_cast<int>(l.format);
  if (f < 0 || f > static_cast<int>(PublishedFormat::kGptqInt4))
    return invalid_argument("published format " + std::to_string(f) + " is not a known format");
  if (static_cast<int>(l.scale) > static_cast<int>(PublishedScale::kBF16))
    return invalid_argument("scale storage " + std::to_string(static_cast<int>(l.scale)) + " is not known");
  const std::string name = published_format_name(l.format);
  if (l.rows < 1 || l.cols < 1)
    return invalid_argument(name + " weight shape " + shape_str(l.rows, l.cols) + " must be positive");
  if (l.rows > (int64_t{1} << 31) || l.cols > (int64_t{1} << 31) || l.rows * l.cols > (int64_t{1} << 46))
    return invalid_argument(name + " weight shape " + shape_str(l.rows, l.cols) + " is too large");
  const bool int4 = l.format == PublishedFormat::kCtInt4 || l.format == PublishedFormat::kAwqInt4 ||
                    l.format == PublishedFormat::kGptqInt4;
  if (l.format == PublishedFormat::kFp8Block) {
    if (l.block_rows < 1 || l.block_cols < 1)
      return invalid_argument(name + " needs a positive block size, got " +
                              shape_str(l.block_rows, l.block_cols));
  } else if (l.block_rows != 0 || l.block_cols != 0) {
    return invalid_argument(name + " takes no block size");
  }
  if (!int4 && l.group_size != 0) return invalid_argument(name + " takes no group size");
  if (l.group_size < 0)
    return invalid_argument(name + " group size " + std::to_string(l.group_size) + " is negative");
  if (l.format == PublishedFormat::kCtInt4 || l.format == PublishedFormat::kAwqInt4) {
    if (l.group_size > 0 && l.cols % l.group_size != 0) {
      return invalid_argument(name + " group size " + std::to_string(l.group_size) +
                              " does not divide K = " + std::to_string(l.cols));
    }
  }
  if (l.format == PublishedFormat::kAwqInt4 && l.rows % 8 != 0)
    return invalid_argument(name + " packs 8 output columns per word: N = " + std::to_string(l.rows) +
                            " is not a multiple of 8");
  if (l.format == PublishedFormat::kGptqInt4) {
    if (l.cols % 8 != 0)
      return invalid_argument(name + " packs 8 rows of K per word: K = " + std::to_string(l.cols) +
                              " is not a multiple of 8");
    if (l.rows % 8 != 0)
      return invalid_argument(name + " packs 8 zero points per word: N = " + std::to_string(l.rows) +
                              " is not a multiple of 8");
  }
  if (l.act_order && l.format != PublishedFormat::kCtInt4 && l.format != PublishedFormat::kGptqInt4)
    return invalid_argument(name + " has no activation order");
  if (l.act_order && l.group_size == 0)
    return invalid_argument(name + " activation order needs groups (a group size)");
  if (l.gptq_v2 && l.format != PublishedFormat::kGptqInt4)
    return invalid_argument(name + " has no gptq_v2 zeros");
  if (l.scale_ue8m0 && (l.format != PublishedFormat::kFp8Block || l.scale != PublishedScale::kF32))
    return invalid_argument(name + " has no ue8m0 scales (fp8-block with F32 scales only)");
  if (!l.symmetric && l.format != PublishedFormat::kCtInt4 && l.format != PublishedFormat::kGptqInt4 &&
      l.format != PublishedFormat::kAwqInt4) {
    return invalid_argument(name + " is symmetric");
  }
  return ok_status();
}

}  // namespace infergate::kernels
