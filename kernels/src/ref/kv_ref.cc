// Scalar reference of KV-cache page writes (quantizing on the way in) and page reads: the
// specification of the KV formats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"
#include "rows.h"
#include "validate.h"

namespace infergate::kernels {
namespace {

// The finite range of x[0..n) (lo = hi = 0 when nothing is finite).
void finite_range(const float* x, int64_t n, int64_t stride, float* lo, float* hi) {
  bool any = false;
  float a = 0.0f, b = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (!std::isfinite(v)) continue;
    a = any ? std::min(a, v) : v;
    b = any ? std::max(b, v) : v;
    any = true;
  }
  *lo = a;
  *hi = b;
}

float finite_amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) m = std::max(m, std::fabs(x[i]));
  }
  return m;
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Writes one int4 row of `d` values with (d, m) params per group of `group` channels (the layout's
// int4_group: 64, or 128 on some latent pages).
void write_int4_row(const float* x, int64_t head_dim, int64_t group, uint8_t* row, uint8_t* params) {
  std::memset(row, 0, static_cast<size_t>(kv_row_bytes(KvDtype::kInt4, head_dim)));
  for (int64_t g = 0; g * group < head_dim; ++g) {
    const int64_t c0 = g * group, c1 = std::min<int64_t>(head_dim, c0 + group);
    float lo, hi;
    finite_range(x + c0, c1 - c0, 1, &lo, &hi);
    const KvInt4Params p = kv_int4_params(lo, hi);
    put_u16(params + g * 4, p.scale);
    put_u16(params + g * 4 + 2, p.min);
    const float m = fp16_to_float(p.min), inv = safe_inverse(fp16_to_float(p.scale));
    for (int64_t c = c0; c < c1; ++c) {
      row[c >> 1] = static_cast<uint8_t>(row[c >> 1] | (kv_int4_code(x[c], m, inv) << ((c & 1) * 4)));
    }
  }
}

void read_int4_row(const uint8_t* row, const uint8_t* params, int64_t head_dim, int64_t group, float* y) {
  for (int64_t c = 0; c < head_dim; ++c) {
    const int64_t g = c / group;
    const float d = fp16_to_float(get_u16(params + g * 4)), m = fp16_to_float(get_u16(params + g * 4 + 2));
    y[c] = kv_int4_dequant(int4_get(row, c), d, m);
  }
}

// Quantizes the staged fp16 keys of head h (all page_size slots) per channel into the page.
void seal_kivi_keys(const KvPageLayout& l, const KvPageRegions& r, uint8_t* page, const uint16_t* window,
                    int64_t h) {
  const int64_t p = l.page_size, d = l.head_dim;
  const uint16_t* keys = window + h * p * d;  // [page_size][head_dim] fp16
  std::vector<float> col(static_cast<size_t>(p));
  for (int64_t t = 0; t < p; ++t) std::memset(page + kv_row_offset(l, r.k_data, h, t), 0, (d + 1) / 2);
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t t = 0; t < p; ++t) col[t] = fp16_to_float(keys[t * d + c]);
    float lo, hi;
    finite_range(col.data(), p, 1, &lo, &hi);
    const KvInt4Params prm = kv_int4_params(lo, hi);
    uint8_t* pp = page + kv_kivi_param_offset(l, r.k_params, h, c);
    put_u16(pp, prm.scale);
    put_u16(pp + 2, prm.min);
    const float m = fp16_to_float(prm.min), inv = safe_inverse(fp16_to_float(prm.scale));
    for (int64_t t = 0; t < p; ++t) {
      uint8_t* row = page + kv_row_offset(l, r.k_data, h, t);
      row[c >> 1] = static_cast<uint8_t>(row[c >> 1] | (kv_int4_code(col[t], m, inv) << ((c & 1) * 4)));
    }
  }
}

}  // namespace

void kv_write_row(const KvPageLayout& l, uint8_t* page, int64_t data, int64_t params, int64_t h, int64_t t,
                  const float* x, const float* fp8_scale) {
  const int64_t d = l.head_dim;
  uint8_t* row = page + kv_row_offset(l, data, h, t);
  switch (l.dtype) {
    case KvDtype::kF16:
      for (int64_t c = 0; c < d; ++c) put_u16(row + 2 * c, fp16_from_float(x[c]));
      break;
    case KvDtype::kBF16:
      for (int64_t c = 0; c < d; ++c) put_u16(row + 2 * c, bf16_from_float(x[c]));
      break;
    case KvDtype::kFp8E4M3: {
      const float s = fp8_scale != nullptr ? fp8_scale[h] : 1.0f;
      put_f32(page + kv_fp8_param_offset(params, h), s);
      const float inv = 1.0f / s;
      for (int64_t c = 0; c < d; ++c) row[c] = kv_fp8_code(x[c], inv);
      break;
    }
    case KvDtype::kInt8: {
      const uint16_t sb = kv_int8_scale(finite_amax(x, d));
      put_u16(page + kv_int8_param_offset(l, params, h, t), sb);
      const float inv = safe_inverse(fp16_to_float(sb));
      for (int64_t c = 0; c < d; ++c) row[c] = static_cast<uint8_t>(kv_int8_code(x[c], inv));
      break;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi:  // the V side of kivi; its K side never comes here
      write_int4_row(x, d, l.int4_group, row, page + kv_int4_param_offset(l, params, h, t, 0));
      break;
  }
}

void kv_read_row(const KvPageLayout& l, const uint8_t* page, int64_t data, int64_t params, int64_t h,
                 int64_t t, float* y) {
  const int64_t d = l.head_dim;
  const uint8_t* row = page + kv_row_offset(l, data, h, t);
  switch (l.dtype) {
    case KvDtype::kF16:
      for (int64_t c = 0; c < d; ++c) y[c] = fp16_to_float(get_u16(row + 2 * c));
      break;
    case KvDtype::kBF16:
      for (int64_t c = 0; c < d; ++c) y[c] = bf16_to_float(get_u16(row + 2 * c));
      break;
    case KvDtype::kFp8E4M3: {
      const float s = get_f32(page + kv_fp8_param_offset(params, h));
      for (int64_t c = 0; c < d; ++c) y[c] = kv_fp8_dequant(row[c], s);
      break;
    }
    case KvDtype::kInt8: {
      const float s = fp16_to_float(get_u16(page + kv_int8_param_offset(l, params, h, t)));
      for (int64_t c = 0; c < d; ++c) y[c] = dequantize_int8(static_cast<int8_t>(row[c]), s);
      break;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi:
      read_int4_row(row, page + kv_int4_param_offset(l, params, h, t, 0), d, l.int4_group, y);
      break;
  }
}

void kv_write_token_head(const KvCache& cache, const KvAppend& a, int64_t i, int64_t h) {
  const KvPageLayout& l = cache.layout;
  const KvPageRegions r = kv_page_regions(l);
  uint8_t* page = cache.page(a.page_ids[i]);
  const int64_t t = a.slots[i];
  const float* k = a.k.at(i, h);
  kv_write_row(l, page, r.v_data, r.v_params, h, t, a.v.at(i, h), cache.v_scale);
  if (l.dtype == KvDtype::kInt4Kivi) {
    auto* window = reinterpret_cast<uint16_t*>(cache.staging_window(a.staging_ids[i]));
    uint16_t* dst = window + (h * l.page_size + t) * l.head_dim;
    for (int64_t c = 0; c < l.head_dim; ++c) dst[c] = fp16_from_float(k[c]);
    if (t == l.page_size - 1) seal_kivi_keys(l, r, page, window, h);
  } else {
    kv_write_row(l, page, r.k_data, r.k_params, h, t, k, cache.k_scale);
  }
}

Status kv_append_ref(const KvCache& cache, const KvAppend& a) {
  const int64_t tokens = a.k.dim0;
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_append(cache, a, tokens, /*host_arrays=*/true, "kv_append"));
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t h = 0; h < cache.layout.num_kv_heads; ++h) kv_write_token_head(cache, a, i, h);
  }
  return ok_status();
}

Status validate_kv_read(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<const float> k, View3<const float> v) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_cache(cache, true, "kv_read_page"));
  const KvPageLayout& l = cache.layout;
  if (page_id < 0 || page_id >= cache.num_pages) {
    return out_of_range("kv_read_page: page id " + std::to_string(page_id) + " is outside the pool of " +
                        std::to_string(cache.num_pages));
  }
  if (filled < 0 || filled > l.page_size) {
    return out_of_range("kv_read_page: filled " + std::to_string(filled) + " is outside 0.." +
                        std::to_string(l.page_size));
  }
  const bool staged = l.dtype == KvDtype::kInt4Kivi && filled < l.page_size;
  if (staged && (staging_id < 0 || staging_id >= cache.num_staging)) {
    return out_of_range("kv_read_page: a filling int4-kivi page needs its staging window; id " +
                        std::to_string(staging_id) + " is outside the " + std::to_string(cache.num_staging));
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(k, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "k"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(v, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "v"));
  return ok_status();
}

Status kv_read_page_ref(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<float> k, View3<float> v) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_read(cache, page_id, filled, staging_id, k, v));
  const KvPageLayout& l = cache.layout;
  const bool staged = l.dtype == KvDtype::kInt4Kivi && filled < l.page_size;
  const KvPageRegions r = kv_page_regions(l);
  const uint8_t* page = cache.page(page_id);
  for (int64_t h = 0; h < l.num_kv_heads; ++h) {
    for (int64_t t = 0; t < filled; ++t) {
      kv_read_row(l, page, r.v_data, r.v_params, h, t, v.at(h, t));
      float* kr = k.at(h, t);
      if (l.dtype != KvDtype::kInt4Kivi) {
        kv_read_row(l, page, r.k_data, r.k_params, h, t, kr);
      } else if (staged) {
        const auto* window = reinterpret_cast<const uint16_t*>(cache.staging_window(staging_id));
        const uint16_t* src = window + (h * l.page_size + t) * l.head_dim;
        for (int64_t c = 0; c < l.head_dim; ++c) kr[c] = fp16_to_float(src[c]);
      } else {
        const uint8_t* row = page + kv_row_offset(l, r.k_data, h, t);
        for (int64_t c = 0; c < l.head_dim; ++c) {
          const uint8_t* pp = page + kv_kivi_param_offset(l, r.k_params, h, c);
          kr[c] =
              kv_int4_dequant(int4_get(row, c), fp16_to_float(get_u16(pp)), fp16_to_float(get_u16(pp + 2)));
        }
      }
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
