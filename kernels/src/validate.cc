// Argument checks shared by every implementation of the kernels/ ops.
#include "validate.h"

#include <cmath>
#include <string>

namespace infergate::kernels {

std::string shape_str(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}
std::string shape_str(int64_t a, int64_t b, int64_t c) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

Status validate_quantize_args(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_layout(layout).context("quantize_weight"));
  if (src.data == nullptr) return invalid_argument("quantize_weight: source data is null");
  if (static_cast<int>(src.dtype) > static_cast<int>(SourceDtype::kBF16)) {
    return invalid_argument("quantize_weight: source dtype is not f32, f16 or bf16");
  }
  if (src.rows != layout.rows || src.cols != layout.cols) {
    return invalid_argument("quantize_weight: source is " + shape_str(src.rows, src.cols) +
                            " but the layout " + shape_str(layout.rows, layout.cols));
  }
  if (src.row_stride < src.cols)
    return invalid_argument("quantize_weight: source row stride is below its width");
  if (out.data == nullptr) return invalid_argument("quantize_weight: output data buffer is null");
  const WeightBytes b = weight_bytes(layout);
  if (b.scales > 0 && out.scales == nullptr)
    return invalid_argument("quantize_weight: output scales buffer is null");
  if (b.zeros > 0 && out.zeros == nullptr)
    return invalid_argument("quantize_weight: output zeros buffer is null");
  return ok_status();
}

Status validate_weight_view(const WeightView& w, const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_layout(w.layout).context(op));
  const WeightBytes b = weight_bytes(w.layout);
  if (w.data == nullptr) return invalid_argument(std::string(op) + ": weight data is null");
  if (b.scales > 0 && w.scales == nullptr)
    return invalid_argument(std::string(op) + ": weight scales are null");
  if (b.zeros > 0 && w.zeros == nullptr) return invalid_argument(std::string(op) + ": weight zeros are null");
  return ok_status();
}

Status validate_view2(const View2<const float>& v, int64_t rows, int64_t cols, const char* op,
                      const char* name) {
  if (v.rows != rows || v.cols != cols) {
    return invalid_argument(std::string(op) + ": " + name + " is " + shape_str(v.rows, v.cols) +
                            ", expected " + shape_str(rows, cols));
  }
  if (rows > 0 && cols > 0 && v.data == nullptr)
    return invalid_argument(std::string(op) + ": " + name + " is null");
  if (rows > 1 && v.row_stride < cols) {
    return invalid_argument(std::string(op) + ": " + name + " row stride " + std::to_string(v.row_stride) +
                            " is below its width " + std::to_string(cols));
  }
  return ok_status();
}

Status validate_view3(const View3<const float>& v, int64_t d0, int64_t d1, int64_t d2, const char* op,
                      const char* name) {
  if (v.dim0 != d0 || v.dim1 != d1 || v.dim2 != d2) {
    return invalid_argument(std::string(op) + ": " + name + " is " + shape_str(v.dim0, v.dim1, v.dim2) +
                            ", expected " + shape_str(d0, d1, d2));
  }
  if (d0 > 0 && d1 > 0 && d2 > 0 && v.data == nullptr) {
    return invalid_argument(std::string(op) + ": " + name + " is null");
  }
  if ((d1 > 1 && v.stride1 < d2) || (d0 > 1 && v.stride0 < d2)) {
    return invalid_argument(std::string(op) + ": " + name + " strides overlap its rows");
  }
  return ok_status();
}

Status validate_kv_cache(const KvCache& cache, bool host_arrays, const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_layout(cache.layout).context(op));
  if (cache.layout.int4_group != kKvInt4Group) {
    return invalid_argument(std::string(op) + ": int4 groups of " + std::to_string(cache.layout.int4_group) +
                            " are for latent pages only; a grouped-query cache has groups of " +
                            std::to_string(kKvInt4Group));
  }
  if (cache.pages == nullptr || cache.num_pages < 1) {
    return invalid_argument(std::string(op) + ": the page pool is empty");
  }
  if (cache.layout.dtype == KvDtype::kInt4Kivi && (cache.staging == nullptr || cache.num_staging < 1)) {
    return invalid_argument(std::string(op) + ": int4-kivi needs staging windows (kv_staging_bytes each)");
  }
  if (host_arrays && cache.layout.dtype == KvDtype::kFp8E4M3) {
    for (int h = 0; h < cache.layout.num_kv_heads; ++h) {
      for (const float* s : {cache.k_scale, cache.v_scale}) {
        if (s != nullptr && !(std::isfinite(s[h]) && s[h] > 0.0f)) {
          return invalid_argument(std::string(op) + ": fp8 scale of head " + std::to_string(h) +
                                  " is not a positive finite number");
        }
      }
    }
  }
  return ok_status();
}

Status validate_kv_append(const KvCache& cache, const KvAppend& a, int64_t tokens, bool host_arrays,
                          const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_cache(cache, host_arrays, op));
  const KvPageLayout& l = cache.layout;
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(a.k, tokens, l.num_kv_heads, l.head_dim, op, "k"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(a.v, tokens, l.num_kv_heads, l.head_dim, op, "v"));
  if (tokens == 0) return ok_status();
  if (a.page_ids == nullptr || a.slots == nullptr) {
    return invalid_argument(std::string(op) + ": page ids or slots are null");
  }
  const bool kivi = l.dtype == KvDtype::kInt4Kivi;
  if (kivi && a.staging_ids == nullptr)
    return invalid_argument(std::string(op) + ": int4-kivi needs staging ids");
  if (!host_arrays) return ok_status();
  for (int64_t i = 0; i < tokens; ++i) {
    const std::string tok = "token " + std::to_string(i);
    if (a.page_ids[i] < 0 || a.page_ids[i] >= cache.num_pages) {
      return out_of_range(std::string(op) + ": " + tok + " page id " + std::to_string(a.page_ids[i]) +
                          " is outside the pool of " + std::to_string(cache.num_pages));
    }
    if (a.slots[i] < 0 || a.slots[i] >= l.page_size) {
      return out_of_range(std::string(op) + ": " + tok + " slot " + std::to_string(a.slots[i]) +
                          " is outside the page of " + std::to_string(l.page_size));
    }
    if (kivi && (a.staging_ids[i] < 0 || a.staging_ids[i] >= cache.num_staging)) {
      return out_of_range(std::string(op) + ": " + tok + " staging id " + std::to_string(a.staging_ids[i]) +
                          " is outside the " + std::to_string(cache.num_staging) + " windows");
    }
    if (i > 0 && a.page_ids[i] == a.page_ids[i - 1] && a.slots[i] != a.slots[i - 1] + 1) {
      return invalid_argument(std::string(op) + ": " + tok + " breaks slot order within page " +
                              std::to_string(a.page_ids[i]) + " (slot " + std::to_string(a.slots[i]) +
                              " after " + std::to_string(a.slots[i - 1]) + ")");
    }
  }
  return ok_status();
}

Status validate_attention(const KvCache& cache, const AttentionBatch& b, View3<const float> q,
                          View3<const float> out, bool host_arrays, const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_cache(cache, host_arrays, op));
  const KvPageLayout& l = cache.layout;
  const std::string o(op);
  if (b.num_seqs < 0) return invalid_argument(o + ": negative number of sequences");
  if (b.num_q_heads < 1 || b.num_q_heads % l.num_kv_heads != 0) {
    return invalid_argument(o + ": " + std::to_string(b.num_q_heads) + " query heads is not a multiple of " +
                            std::to_string(l.num_kv_heads) + " KV heads");
  }
  if (!std::isfinite(b.scale)) return invalid_argument(o + ": the softmax scale is not finite");
  if (b.split_tokens < 0) return invalid_argument(o + ": split_tokens is negative");
  if (b.num_seqs == 0) return ok_status();
  if (b.q_start == nullptr || b.kv_len == nullptr || b.block_table == nullptr) {
    return invalid_argument(o + ": q_start, kv_len or block_table is null");
  }
  if (b.max_pages_per_seq < 1) return invalid_argument(o + ": max_pages_per_seq must be positive");
  if (l.dtype == KvDtype::kInt4Kivi && b.staging_ids == nullptr) {
    return invalid_argument(o + ": int4-kivi attention needs each sequence's staging id");
  }
  if (!host_arrays) {
    if (q.dim1 != b.num_q_heads || q.dim2 != l.head_dim || out.dim0 != q.dim0 || out.dim1 != q.dim1 ||
        out.dim2 != q.dim2) {
      return invalid_argument(o + ": q and out must both be [T, " + std::to_string(b.num_q_heads) + ", " +
                              std::to_string(l.head_dim) + "]");
    }
    return ok_status();
  }
  if (b.q_start[0] != 0) return invalid_argument(o + ": q_start[0] must be 0");
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const std::string seq = "sequence " + std::to_string(s);
    const int32_t q_len = b.q_start[s + 1] - b.q_start[s];
    if (q_len < 0) return invalid_argument(o + ": q_start decreases at " + seq);
    if (q_len > b.kv_len[s]) {
      return invalid_argument(o + ": " + seq + " has " + std::to_string(q_len) + " query tokens but only " +
                              std::to_string(b.kv_len[s]) + " in the cache");
    }
    const int64_t pages = (int64_t{b.kv_len[s]} + l.page_size - 1) / l.page_size;
    if (pages > b.max_pages_per_seq) {
      return out_of_range(o + ": " + seq + " needs " + std::to_string(pages) +
                          " pages, its block table row holds " + std::to_string(b.max_pages_per_seq));
    }
    for (int64_t i = 0; i < pages; ++i) {
      const int32_t p = b.block_table[int64_t{s} * b.max_pages_per_seq + i];
      if (p < 0 || p >= cache.num_pages) {
        return out_of_range(o + ": " + seq + " page " + std::to_string(i) + " is id " + std::to_string(p) +
                            ", outside the pool of " + std::to_string(cache.num_pages));
      }
    }
    if (l.dtype == KvDtype::kInt4Kivi && b.kv_len[s] % l.page_size != 0 &&
        (b.staging_ids[s] < 0 || b.staging_ids[s] >= cache.num_staging)) {
      return out_of_range(o + ": " + seq + " staging id " + std::to_string(b.staging_ids[s]) +
                          " is outside the " + std::to_string(cache.num_staging) + " windows");
    }
  }
  const int64_t tokens = b.q_start[b.num_seqs];
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(q, tokens, b.num_q_heads, l.head_dim, op, "q"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(out, tokens, b.num_q_heads, l.head_dim, op, "out"));
  return ok_status();
}

Status validate_linear(View2<const float> x, const WeightView& w, View2<const float> y, const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, op));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, w.layout.cols, op, "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, x.rows, w.layout.rows, op, "y"));
  return ok_status();
}

Status validate_rope(const RopeConfig& c, View3<const float> q, View3<const float> k, const char* op) {
  const std::string o(op);
  if (c.head_dim < 2 || c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return invalid_argument(o + ": rotary_dim " + std::to_string(c.rotary_dim) +
                            " must be even, >= 2 and <= head_dim " + std::to_string(c.head_dim));
  }
  if (static_cast<int>(c.style) > static_cast<int>(RopeStyle::kInterleaved)) {
    return invalid_argument(o + ": unknown rope style");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(q, q.dim0, q.dim1, c.head_dim, op, "q"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(k, q.dim0, k.dim1, c.head_dim, op, "k"));
  return ok_status();
}

}  // namespace infergate::kernels
