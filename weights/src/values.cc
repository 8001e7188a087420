// Value checks through a TensorReader, in bounded memory.
#include "values.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant_config.h"

namespace infergate::weights::detail {
namespace {

constexpr uint64_t kChunk = 1u << 20;

// Bits of a 16- or 32-bit float widened to fp32 bits.
uint32_t f32_bits(Dtype dt, const uint8_t* p) {
  if (dt == Dtype::kF32) {
    uint32_t b;
    std::memcpy(&b, p, 4);
    return b;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dt == Dtype::kBF16) return static_cast<uint32_t>(h) << 16;
  // fp16: only the class matters here (sign, zero, finite, NaN/inf).
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return sign | 0x7F800000u | mant;  // inf / NaN
  if (exp == 0 && mant == 0) return sign;
  return sign | 0x3F800000u;  // some finite non-zero value
}

Status check_scale_tensor(TensorReader& reader, const TensorHeader& t, bool ue8m0) {
  const uint64_t esize = dtype_bytes(t.dtype);
  std::vector<uint8_t> buf;
  for (uint64_t off = 0; off < t.bytes; off += kChunk) {
    buf.resize(static_cast<size_t>(std::min(kChunk, t.bytes - off)));
    INFERGATE_RETURN_IF_ERROR(reader.read(t, off, buf).context(t.name));
    for (uint64_t i = 0; i + esize <= buf.size(); i += esize) {
      const uint32_t b = f32_bits(t.dtype, buf.data() + i);
      const uint64_t index = (off + i) / esize;
      const bool nonfinite = (b & 0x7F800000u) == 0x7F800000u;
      const bool negative = (b & 0x80000000u) != 0 && (b & 0x7FFFFFFFu) != 0;
      const bool not_pow2 = ue8m0 && ((b & 0x007FFFFFu) != 0 || (b & 0x7F800000u) == 0);
      if (nonfinite || negative || not_pow2) {
        const std::string what = nonfinite  ? ((b & 0x007FFFFFu) ? "NaN" : "infinite")
                                 : negative ? "negative"
                                            : "not a power of two although scale_fmt is ue8m0";
        return tensor_error(reasons::kQuantValueInvalid, t.name,
                            "scale " + std::to_string(index) + " is " + what +
                                " (a scale must be finite and positive)")
            .with_detail("index", std::to_string(index));
      }
    }
  }
  return ok_status();
}

Status check_g_idx(TensorReader& reader, const TensorHeader& t, const Scheme& s, uint64_t k) {
  std::vector<uint8_t> buf(static_cast<size_t>(t.bytes));
  INFERGATE_RETURN_IF_ERROR(reader.read(t, 0, buf).context(t.name));
  const uint64_t g = static_cast<uint64_t>(s.group_size);
  const uint64_t groups = (k + g - 1) / g;
  std::vector<uint64_t> count(static_cast<size_t>(groups), 0);
  for (uint64_t i = 0; i < k; ++i) {
    int32_t v;
    std::memcpy(&v, buf.data() + 4 * i, 4);
    if (v < 0 || static_cast<uint64_t>(v) >= groups) {
      return tensor_error(reasons::kQuantValueInvalid, t.name,
                          "entry " + std::to_string(i) + " is " + std::to_string(v) + ", outside [0, " +
                              std::to_string(groups) + ")");
    }
    if (!s.act_order && static_cast<uint64_t>(v) != i / g) {
      return tensor_error(
          reasons::kQuantValueInvalid, t.name,
          "entry " + std::to_string(i) + " is " + std::to_string(v) +
              ", not k / G = " + std::to_string(i / g) +
              ", although desc_act is false: engines that ignore g_idx would read another weight");
    }
    ++count[static_cast<size_t>(v)];
  }
  for (uint64_t grp = 0; grp < groups; ++grp) {
    const uint64_t want = std::min(g, k - grp * g);
    if (count[static_cast<size_t>(grp)] != want) {
      return tensor_error(reasons::kQuantValueInvalid, t.name,
                          "assigns group " + std::to_string(grp) + " " +
                              std::to_string(count[static_cast<size_t>(grp)]) + " columns, not " +
                              std::to_string(want));
    }
  }
  return ok_status();
}

}  // namespace

Result<std::array<uint64_t, 2>> read_weight_shape(TensorReader& reader, const TensorHeader& t) {
  uint8_t buf[16] = {};
  const uint64_t esize = dtype_bytes(t.dtype);
  INFERGATE_RETURN_IF_ERROR(
      reader.read(t, 0, std::span<uint8_t>(buf, static_cast<size_t>(2 * esize))).context(t.name));
  std::array<uint64_t, 2> out{};
  for (int i = 0; i < 2; ++i) {
    int64_t v = 0;
    if (esize == 4) {
      int32_t v32;
      std::memcpy(&v32, buf + 4 * i, 4);
      v = v32;
    } else {
      std::memcpy(&v, buf + 8 * i, 8);
    }
    if (v < 1 || v > (int64_t{1} << 31)) {
      return tensor_error(reasons::kQuantValueInvalid, t.name,
                          "value " + std::to_string(i) + " is " + std::to_string(v) + ", not a dimension");
    }
    out[static_cast<size_t>(i)] = static_cast<uint64_t>(v);
  }
  return out;
}

Status check_values(TensorReader& reader, const Scheme& s, const WeightDescription& d) {
  for (const QuantizedLinear& q : d.quantized) {
    if (const Part* sc = q.part(PartRole::kScale)) {
      INFERGATE_RETURN_IF_ERROR(
          check_scale_tensor(reader, *sc->tensor, s.family == Family::kFp8Block && s.scale_ue8m0));
    }
    if (const Part* gi = q.part(PartRole::kGIdx); gi != nullptr && s.group_size > 0) {
      INFERGATE_RETURN_IF_ERROR(check_g_idx(reader, *gi->tensor, s, q.cols));
    }
  }
  return ok_status();
}

}  // namespace infergate::weights::detail
