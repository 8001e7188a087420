// Scalar references of multi-head latent attention's pieces: latent pages (one quantized row per
// token, no V side) and absorbed attention over them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"
#include "mla.h"
#include "rows.h"
#include "validate.h"

namespace infergate::kernels {

// The KvCache the batch checks of attention read (layout and pool); nothing writes through it, and
// nothing reads its int4 grouping (the latent's own was checked by validate_kv_layout).
KvCache latent_as_kv(const LatentCache& c) {
  KvCache k;
  k.layout = c.layout;
  k.layout.int4_group = kKvInt4Group;
  k.pages = c.pages;
  k.num_pages = c.num_pages;
  return k;
}

// host_arrays false: c.scale is device memory and is not read.
Status validate_latent_cache(const LatentCache& c, const char* op, bool host_arrays = true) {
  const std::string o(op);
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_layout(c.layout).context(op));
  if (c.layout.num_kv_heads != 1)
    return invalid_argument(o + ": a latent cache has one row per token (1 head)");
  if (c.layout.dtype == KvDtype::kInt4Kivi) {
    return invalid_argument(o + ": int4-kivi has no latent form (use int4: per-token groups of 64)");
  }
  if (c.pages == nullptr || c.num_pages < 1) return invalid_argument(o + ": the page pool is empty");
  if (host_arrays && c.layout.dtype == KvDtype::kFp8E4M3 && c.scale != nullptr &&
      !(std::isfinite(*c.scale) && *c.scale > 0)) {
    return invalid_argument(o + ": the fp8 scale is not a positive finite number");
  }
  return ok_status();
}

Status validate_latent_append(const LatentCache& c, View2<const float> rows, const int32_t* page_ids,
                              const int32_t* slots, const char* op, bool host_arrays) {
  INFERGATE_K_RETURN_IF_ERROR(validate_latent_cache(c, op, host_arrays));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(rows, rows.rows, c.layout.head_dim, op, "rows"));
  if (rows.rows > 0 && (page_ids == nullptr || slots == nullptr)) {
    return invalid_argument(std::string(op) + ": page_ids or slots is null");
  }
  for (int64_t i = 0; host_arrays && i < rows.rows; ++i) {
    if (page_ids[i] < 0 || page_ids[i] >= c.num_pages || slots[i] < 0 || slots[i] >= c.layout.page_size) {
      return out_of_range(std::string(op) + ": token " + std::to_string(i) + " goes to page " +
                          std::to_string(page_ids[i]) + " slot " + std::to_string(slots[i]) +
                          ", outside the pool or the page");
    }
  }
  return ok_status();
}

Status validate_mla_attention(const LatentCache& c, const AttentionBatch& b, View3<const float> q,
                              int32_t value_dim, View3<const float> out, const char* op, bool host_arrays) {
  INFERGATE_K_RETURN_IF_ERROR(validate_latent_cache(c, op, host_arrays));
  if (value_dim < 1 || value_dim > c.layout.head_dim) {
    return invalid_argument(std::string(op) + ": value_dim " + std::to_string(value_dim) +
                            " is outside [1, " + std::to_string(c.layout.head_dim) + "]");
  }
  // The batch (sequences, block tables, q's shape) is checked as attention checks it, q standing in for
  // out; out has the value width.
  INFERGATE_K_RETURN_IF_ERROR(validate_attention(latent_as_kv(c), b, q, q, host_arrays, op));
  return validate_view3(out, q.dim0, b.num_q_heads, value_dim, op, "out");
}

void latent_write_row(const LatentCache& c, const float* x, int32_t page_id, int32_t slot) {
  const KvPageRegions r = kv_latent_page_regions(c.layout);
  kv_write_row(c.layout, c.page(page_id), r.k_data, r.k_params, 0, slot, x, c.scale);
}

void latent_read_row(const LatentCache& c, int32_t page_id, int32_t slot, float* y) {
  const KvPageRegions r = kv_latent_page_regions(c.layout);
  kv_read_row(c.layout, c.page(page_id), r.k_data, r.k_params, 0, slot, y);
}

Status latent_append_ref(const LatentCache& c, View2<const float> rows, const int32_t* page_ids,
                         const int32_t* slots) {
  INFERGATE_K_RETURN_IF_ERROR(validate_latent_append(c, rows, page_ids, slots, "latent_append"));
  for (int64_t i = 0; i < rows.rows; ++i) latent_write_row(c, rows.row(i), page_ids[i], slots[i]);
  return ok_status();
}

Status latent_read_page_ref(const LatentCache& c, int32_t page_id, int32_t filled, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_latent_cache(c, "latent_read_page"));
  if (page_id < 0 || page_id >= c.num_pages || filled < 0 || filled > c.layout.page_size) {
    return out_of_range("latent_read_page: page " + std::to_string(page_id) + " with " +
                        std::to_string(filled) + " rows is outside the pool or the page");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, filled, c.layout.head_dim, "latent_read_page", "out"));
  for (int32_t t = 0; t < filled; ++t) latent_read_row(c, page_id, t, out.row(t));
  return ok_status();
}

Status mla_attention_ref(const LatentCache& c, const AttentionBatch& b, View3<const float> q,
                         int32_t value_dim, View3<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_mla_attention(c, b, q, value_dim, out, "mla_attention"));
  const int64_t d = c.layout.head_dim, p = c.layout.page_size;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int64_t kv_len = b.kv_len[s];
    const int64_t q0 = b.q_start[s], q_len = b.q_start[s + 1] - q0;
    std::vector<float> rows(static_cast<size_t>(kv_len * d));
    for (int64_t t = 0; t < kv_len; ++t) {
      latent_read_row(c, b.block_table[int64_t{s} * b.max_pages_per_seq + t / p], static_cast<int32_t>(t % p),
                      rows.data() + t * d);
    }
    std::vector<double> score(static_cast<size_t>(kv_len)), acc(static_cast<size_t>(value_dim));
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t visible = kv_len - q_len + i + 1;
      for (int64_t a = 0; a < b.num_q_heads; ++a) {
        const float* qv = q.at(q0 + i, a);
        double mx = -INFINITY;
        for (int64_t t = 0; t < visible; ++t) {
          double dot = 0.0;
          for (int64_t x = 0; x < d; ++x)
            dot += static_cast<double>(qv[x]) * rows[static_cast<size_t>(t * d + x)];
          score[static_cast<size_t>(t)] = dot * b.scale;
          mx = std::max(mx, score[static_cast<size_t>(t)]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = 0; t < visible; ++t) {
          const double e = std::exp(score[static_cast<size_t>(t)] - mx);
          sum += e;
          for (int64_t x = 0; x < value_dim; ++x)
            acc[static_cast<size_t>(x)] += e * rows[static_cast<size_t>(t * d + x)];
        }
        float* o = out.at(q0 + i, a);
        for (int64_t x = 0; x < value_dim; ++x) o[x] = static_cast<float>(acc[static_cast<size_t>(x)] / sum);
      }
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
