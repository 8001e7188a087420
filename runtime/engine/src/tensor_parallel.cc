// Tensor-parallel ranges and compressed-weight slicing (tensor_parallel.h).
#include "infergate/engine/tensor_parallel.h"

#include <cstring>
#include <string>

namespace infergate::runtime::engine {
namespace {

namespace k = infergate::kernels;

Error tp_error(std::string message, int64_t tp) {
  return invalid_argument(std::move(message))
      .with_reason("InvalidTensorParallel")
      .with_detail("tensor_parallel", std::to_string(tp));
}

TpRange even(int64_t n, int32_t tp, int32_t rank) { return {n / tp * rank, n / tp * (rank + 1)}; }

}  // namespace

Status validate_tp(const ModelShape& shape, int64_t intermediate, int32_t tp) {
  if (tp < 1) return tp_error("--tensor-parallel must be at least 1, got " + std::to_string(tp), tp);
  auto divides = [&](int64_t n, const char* what) -> Status {
    if (n % tp != 0) {
      return tp_error("--tensor-parallel " + std::to_string(tp) + " does not divide the model's " + what +
                          " (" + std::to_string(n) + ")",
                      tp);
    }
    return ok_status();
  };
  INFERGATE_RETURN_IF_ERROR(divides(shape.num_heads, "attention heads"));
  // More ranks than KV heads replicate them (each rank's query heads must then share one KV head).
  if (shape.num_kv_heads < 1 || (shape.num_kv_heads % tp != 0 && tp % shape.num_kv_heads != 0)) {
    return tp_error("--tensor-parallel " + std::to_string(tp) +
                        " neither divides nor is a multiple of the model's KV heads (" +
                        std::to_string(shape.num_kv_heads) + ")",
                    tp);
  }
  INFERGATE_RETURN_IF_ERROR(divides(intermediate, "intermediate size"));
  if (shape.vocab < tp) return tp_error("the vocabulary is smaller than --tensor-parallel", tp);
  return ok_status();
}

Result<TpShard> tp_shard(const ModelShape& shape, int64_t intermediate, int32_t tp, int32_t rank) {
  INFERGATE_RETURN_IF_ERROR(validate_tp(shape, intermediate, tp));
  if (rank < 0 || rank >= tp) {
    return invalid_argument("rank " + std::to_string(rank) + " outside 0.." + std::to_string(tp - 1));
  }
  TpShard s;
  s.rank = rank;
  s.size = tp;
  s.heads = even(shape.num_heads, tp, rank);
  if (shape.num_kv_heads % tp == 0) {
    s.kv_heads = even(shape.num_kv_heads, tp, rank);
  } else {  // tp = replicas x KV heads: ranks r with the same r / replicas share (copies of) one KV head
    const int64_t kv = rank / (tp / shape.num_kv_heads);
    s.kv_heads = {kv, kv + 1};
  }
  s.q_rows = {s.heads.begin * shape.head_dim, s.heads.end * shape.head_dim};
  s.kv_rows = {s.kv_heads.begin * shape.head_dim, s.kv_heads.end * shape.head_dim};
  s.mlp = even(intermediate, tp, rank);
  const int64_t per = (shape.vocab + tp - 1) / tp;
  s.vocab = {std::min(shape.vocab, per * rank), std::min(shape.vocab, per * (rank + 1))};
  return s;
}

Result<HostWeight> slice_weight(const k::WeightView& w, TpSplit split, TpRange r) {
  const k::WeightLayout& l = w.layout;
  const int64_t limit = split == TpSplit::kRows ? l.rows : l.cols;
  if (r.begin < 0 || r.end > limit || r.begin >= r.end) {
    return invalid_argument("slice [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                            ") is empty or outside the weight's " + std::to_string(limit) +
                            (split == TpSplit::kRows ? " rows" : " columns"))
        .with_reason("InvalidTensorParallel");
  }
  const bool int4 = k::is_int4(l.format);
  const int64_t row_bytes = k::weight_row_bytes(l), groups = k::weight_groups_per_row(l);
  HostWeight out;
  out.view.layout = l;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  if (split == TpSplit::kRows) {
    const int64_t n = r.size();
    out.view.layout.rows = n;
    out.data.assign(data + r.begin * row_bytes, data + r.end * row_bytes);
    if (groups > 0) out.scales.assign(scales + r.begin * groups * 2, scales + r.end * groups * 2);
    if (w.zeros) out.zeros.assign(w.zeros + r.begin * groups, w.zeros + r.end * groups);
  } else {
    int64_t g0 = 0, g1 = groups;  // groups kept per row
    if (int4) {
      const int64_t gs = l.group_size;
      if (r.begin % gs != 0 || (r.end % gs != 0 && r.end != l.cols) || r.begin % 2 != 0) {
        return invalid_argument("int4 columns [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                ") do not fall on groups of " + std::to_string(gs) +
                                ": choose a --tensor-parallel that keeps whole groups per GPU")
            .with_reason("InvalidTensorParallel");
      }
      g0 = r.begin / gs;
      g1 = (r.end + gs - 1) / gs;
    }
    out.view.layout.cols = r.size();
    const int64_t new_row = k::weight_row_bytes(out.view.layout);
    out.data.resize(static_cast<size_t>(l.rows * new_row));
    for (int64_t n = 0; n < l.rows; ++n) {
      const uint8_t* src = data + n * row_bytes;
      uint8_t* dst = out.data.data() + n * new_row;
      switch (l.format) {
        case k::WeightFormat::kF16:
        case k::WeightFormat::kBF16: std::memcpy(dst, src + r.begin * 2, static_cast<size_t>(new_row)); break;
        case k::WeightFormat::kInt8: std::memcpy(dst, src + r.begin, static_cast<size_t>(new_row)); break;
        case k::WeightFormat::kInt4Sym:
        case k::WeightFormat::kInt4Asym:
          // begin is even: whole bytes. An odd-sized last slice keeps the row's zero high nibble.
          std::memcpy(dst, src + r.begin / 2, static_cast<size_t>(new_row));
          if (r.size() % 2 != 0) dst[new_row - 1] &= 0x0F;
          break;
      }
    }
    const int64_t new_groups = k::weight_groups_per_row(out.view.layout);
    if (new_groups != g1 - g0 && groups > 0 && int4) {
      return internal_error("slice_weight: group arithmetic disagrees with the layout");
    }
    if (groups > 0) {
      const int64_t keep = int4 ? g1 - g0 : groups;
      out.scales.resize(static_cast<size_t>(l.rows * keep * 2));
      for (int64_t n = 0; n < l.rows; ++n) {
        std::memcpy(out.scales.data() + n * keep * 2, scales + (n * groups + g0) * 2,
                    static_cast<size_t>(keep * 2));
      }
      if (w.zeros) {
        out.zeros.resize(static_cast<size_t>(l.rows * keep));
        for (int64_t n = 0; n < l.rows; ++n) {
          std::memcpy(out.zeros.data() + n * keep, w.zeros + n * groups + g0, static_cast<size_t>(keep));
        }
      }
    }
  }
  out.view.data = out.data.data();
  out.view.scales = out.scales.empty() ? nullptr : out.scales.data();
  out.view.zeros = out.zeros.empty() ? nullptr : out.zeros.data();
  return out;
}

}  // namespace infergate::runtime::engine
