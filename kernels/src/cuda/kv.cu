// CUDA KV-cache page writes (quantizing on the way in) and reads, bit-identical to kv_append_ref and
// kv_read_page_ref: the per-element maths are formats.h's __host__ __device__ functions.
//
// kv_append: one warp per (token, KV head). int4-kivi runs two kernels in stream order:
//   1. seal: for every token that writes its page's last slot, quantize that page's keys per
//      channel, taking each slot's key from this call's input (rounded to fp16) when the call
//      holds it, else from the staging window (written by earlier calls);
//   2. append: values per token, and each key into the staging window - only by the last token of
//      the call that writes that (window, slot), which is what token-by-token appends leave there.
#include "../validate.h"
#include "common.cuh"

namespace infergate::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ void st_u16(uint8_t* p, uint16_t v) { *reinterpret_cast<uint16_t*>(p) = v; }
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Writes one row (head h, slot t) of one side of a page from x[head_dim] - the whole warp.
__device__ void write_row(const KvPageLayout& l, uint8_t* page, int64_t data, int64_t params, int64_t h,
                          int64_t t, const float* __restrict__ x, const float* fp8_scale) {
  const int lane = threadIdx.x & 31;
  const int64_t d = l.head_dim;
  uint8_t* row = page + kv_row_offset(l, data, h, t);
  switch (l.dtype) {
    case KvDtype::kF16:
      for (int64_t c = lane; c < d; c += 32) st_u16(row + 2 * c, fp16_from_float(x[c]));
      break;
    case KvDtype::kBF16:
      for (int64_t c = lane; c < d; c += 32) st_u16(row + 2 * c, bf16_from_float(x[c]));
      break;
    case KvDtype::kFp8E4M3: {
      const float s = fp8_scale != nullptr ? fp8_scale[h] : 1.0f;
      if (lane == 0) *reinterpret_cast<float*>(page + kv_fp8_param_offset(params, h)) = s;
      const float inv = 1.0f / s;
      for (int64_t c = lane; c < d; c += 32) row[c] = kv_fp8_code(x[c], inv);
      break;
    }
    case KvDtype::kInt8: {
      float amax = 0.0f;
      for (int64_t c = lane; c < d; c += 32) {
        if (isfinite(x[c])) amax = fmaxf(amax, fabsf(x[c]));
      }
      amax = warp_max(amax);
      const uint16_t sb = kv_int8_scale(amax);
      if (lane == 0) st_u16(page + kv_int8_param_offset(l, params, h, t), sb);
      const float inv = safe_inverse(fp16_to_float(sb));
      for (int64_t c = lane; c < d; c += 32) row[c] = static_cast<uint8_t>(kv_int8_code(x[c], inv));
      break;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: {
      // A group of kKvInt4Group (64) channels per round: lane i holds channels 2i and 2i+1 of it,
      // which are the two nibbles of one byte.
      static_assert(kKvInt4Group == 64, "one channel pair per lane");
      const int64_t groups = kv_int4_groups(d);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c = g * kKvInt4Group + 2 * lane;
        const bool in0 = c < d, in1 = c + 1 < d;
        const float v0 = in0 ? x[c] : 0.0f, v1 = in1 ? x[c + 1] : 0.0f;
        const bool fin0 = in0 && isfinite(v0), fin1 = in1 && isfinite(v1);
        // The finite range; lo = hi = 0 when nothing is finite (as the reference).
        const bool any = __any_sync(0xFFFFFFFFu, fin0 || fin1);
        float lo = fminf(fin0 ? v0 : INFINITY, fin1 ? v1 : INFINITY);
        float hi = fmaxf(fin0 ? v0 : -INFINITY, fin1 ? v1 : -INFINITY);
        lo = warp_min(lo);
        hi = warp_max(hi);
        if (!any) lo = hi = 0.0f;
        const KvInt4Params p = kv_int4_params(lo, hi);
        if (lane == 0) {
          uint8_t* pp = page + kv_int4_param_offset(l, params, h, t, g);
          st_u16(pp, p.scale);
          st_u16(pp + 2, p.min);
        }
        const float m = fp16_to_float(p.min), inv = safe_inverse(fp16_to_float(p.scale));
        const uint32_t code0 = in0 ? kv_int4_code(v0, m, inv) : 0u;
        const uint32_t code1 = in1 ? kv_int4_code(v1, m, inv) : 0u;
        if (in0) row[c >> 1] = static_cast<uint8_t>(code0 | (code1 << 4));
      }
      break;
    }
  }
}

// int4-kivi pass 1: one warp per (sealing token, head); lane pairs of channels (c, c+1) per byte.
__global__ void kivi_seal_kernel(KvCache cache, KvAppend a, int64_t tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t item = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (item >= tokens * l.num_kv_heads) return;
  const int64_t i = item / l.num_kv_heads, h = item % l.num_kv_heads;
  const int32_t psize = l.page_size;
  if (a.slots[i] != psize - 1) return;
  const int32_t page_id = a.page_ids[i], win = a.staging_ids[i];
  if (page_id < 0 || page_id >= cache.num_pages || win < 0 || win >= cache.num_staging) return;
  const KvPageRegions r = kv_page_regions(l);
  uint8_t* page = cache.page(page_id);
  const auto* window = reinterpret_cast<const uint16_t*>(cache.staging_window(win)) + h * psize * l.head_dim;
  const int lane = threadIdx.x & 31;
  const int64_t d = l.head_dim;
  for (int64_t pair = lane; 2 * pair < d; pair += 32) {
    uint8_t codes[2][64];  // page_size <= 4096 in general; the kernel handles up to 64 (launcher checks)
    for (int e = 0; e < 2; ++e) {
      const int64_t c = 2 * pair + e;
      if (c >= d) break;
      float lo = INFINITY, hi = -INFINITY;
      bool any = false;
      float vals[64];
      for (int32_t s = 0; s < psize; ++s) {
        const int64_t j = i - (psize - 1 - s);
        uint16_t key;
        if (j >= 0 && a.page_ids[j] == page_id && a.slots[j] == s && a.staging_ids[j] == win) {
          key = fp16_from_float(a.k.at(j, h)[c]);
        } else {
          key = window[s * d + c];
        }
        vals[s] = fp16_to_float(key);
        if (isfinite(vals[s])) {
          lo = fminf(lo, vals[s]);
          hi = fmaxf(hi, vals[s]);
          any = true;
        }
      }
      if (!any) lo = hi = 0.0f;
      const KvInt4Params p = kv_int4_params(lo, hi);
      uint8_t* pp = page + kv_kivi_param_offset(l, r.k_params, h, c);
      st_u16(pp, p.scale);
      st_u16(pp + 2, p.min);
      const float m = fp16_to_float(p.min), inv = safe_inverse(fp16_to_float(p.scale));
      for (int32_t s = 0; s < psize; ++s) codes[e][s] = static_cast<uint8_t>(kv_int4_code(vals[s], m, inv));
    }
    for (int32_t s = 0; s < psize; ++s) {
      const uint8_t hi_code = 2 * pair + 1 < d ? codes[1][s] : 0;
      page[kv_row_offset(l, r.k_data, h, s) + pair] = static_cast<uint8_t>(codes[0][s] | (hi_code << 4));
    }
  }
}

__global__ void kv_append_kernel(KvCache cache, KvAppend a, int64_t tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t item = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (item >= tokens * l.num_kv_heads) return;
  const int64_t i = item / l.num_kv_heads, h = item % l.num_kv_heads;
  const int32_t page_id = a.page_ids[i], t = a.slots[i];
  if (page_id < 0 || page_id >= cache.num_pages || t < 0 || t >= l.page_size) return;
  const KvPageRegions r = kv_page_regions(l);
  uint8_t* page = cache.page(page_id);
  write_row(l, page, r.v_data, r.v_params, h, t, a.v.at(i, h), cache.v_scale);
  if (l.dtype != KvDtype::kInt4Kivi) {
    write_row(l, page, r.k_data, r.k_params, h, t, a.k.at(i, h), cache.k_scale);
    return;
  }
  const int32_t win = a.staging_ids[i];
  if (win < 0 || win >= cache.num_staging) return;
  // Only the call's last writer of (window, slot) writes it: the token one page later, if the
  // sequence's run continues that far, overwrites the same slot.
  const int64_t later = i + l.page_size;
  if (later < tokens && a.staging_ids[later] == win && a.slots[later] == t) return;
  auto* dst = reinterpret_cast<uint16_t*>(cache.staging_window(win)) + (h * l.page_size + t) * l.head_dim;
  const float* k = a.k.at(i, h);
  for (int64_t c = threadIdx.x & 31; c < l.head_dim; c += 32) dst[c] = fp16_from_float(k[c]);
}

// One thread per (head, token, element) of a page.
__global__ void kv_read_page_kernel(KvCache cache, int32_t page_id, int32_t filled, int32_t staging_id,
                                    View3<float> k, View3<float> v) {
  const KvPageLayout& l = cache.layout;
  const int64_t d = l.head_dim;
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= int64_t{l.num_kv_heads} * filled * d) return;
  const int64_t c = idx % d, t = (idx / d) % filled, h = idx / (d * filled);
  const KvPageRegions r = kv_page_regions(l);
  const uint8_t* page = cache.page(page_id);
  for (int side = 0; side < 2; ++side) {
    const bool key = side == 0;
    const int64_t data = key ? r.k_data : r.v_data, params = key ? r.k_params : r.v_params;
    const uint8_t* row = page + kv_row_offset(l, data, h, t);
    float y = 0.0f;
    if (key && l.dtype == KvDtype::kInt4Kivi) {
      if (filled < l.page_size) {
        y = fp16_to_float(reinterpret_cast<const uint16_t*>(
            cache.staging_window(staging_id))[(h * l.page_size + t) * d + c]);
      } else {
        const uint8_t* pp = page + kv_kivi_param_offset(l, params, h, c);
        y = kv_int4_dequant(int4_get(row, c), fp16_to_float(ld_u16(pp)), fp16_to_float(ld_u16(pp + 2)));
      }
    } else {
      switch (l.dtype) {
        case KvDtype::kF16: y = fp16_to_float(ld_u16(row + 2 * c)); break;
        case KvDtype::kBF16: y = bf16_to_float(ld_u16(row + 2 * c)); break;
        case KvDtype::kFp8E4M3:
          y = kv_fp8_dequant(row[c], *reinterpret_cast<const float*>(page + kv_fp8_param_offset(params, h)));
          break;
        case KvDtype::kInt8:
          y = dequantize_int8(static_cast<int8_t>(row[c]),
                              fp16_to_float(ld_u16(page + kv_int8_param_offset(l, params, h, t))));
          break;
        case KvDtype::kInt4:
        case KvDtype::kInt4Kivi: {
          const uint8_t* pp = page + kv_int4_param_offset(l, params, h, t, c / kKvInt4Group);
          y = kv_int4_dequant(int4_get(row, c), fp16_to_float(ld_u16(pp)), fp16_to_float(ld_u16(pp + 2)));
          break;
        }
      }
    }
    (key ? k : v).at(h, t)[c] = y;
  }
}

}  // namespace

Status kv_append(const KvCache& cache, const KvAppend& a, Stream stream) {
  const int64_t tokens = a.k.dim0;
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_append(cache, a, tokens, /*host_arrays=*/false, "kv_append"));
  if (tokens == 0) return ok_status();
  const KvPageLayout& l = cache.layout;
  if (l.dtype == KvDtype::kInt4Kivi && l.page_size > 64) {
    return unsupported("kv_append: the CUDA int4-kivi path supports pages of up to 64 tokens (got " +
                       std::to_string(l.page_size) + ")");
  }
  const int64_t items = tokens * l.num_kv_heads;
  const unsigned blocks = grid_for(items, kWarpsPerBlock);
  if (l.dtype == KvDtype::kInt4Kivi) {
    kivi_seal_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(cache, a, tokens);
    INFERGATE_K_RETURN_IF_ERROR(check_launch("kv_append (kivi seal)"));
  }
  kv_append_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(cache, a, tokens);
  return check_launch("kv_append");
}

Status kv_read_page(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id, View3<float> k,
                    View3<float> v, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_cache(cache, false, "kv_read_page"));
  const KvPageLayout& l = cache.layout;
  if (page_id < 0 || page_id >= cache.num_pages) {
    return out_of_range("kv_read_page: page id " + std::to_string(page_id) + " is outside the pool of " +
                        std::to_string(cache.num_pages));
  }
  if (filled < 0 || filled > l.page_size) return out_of_range("kv_read_page: filled is outside the page");
  if (l.dtype == KvDtype::kInt4Kivi && filled < l.page_size &&
      (staging_id < 0 || staging_id >= cache.num_staging)) {
    return out_of_range("kv_read_page: a filling int4-kivi page needs its staging window");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(k, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "k"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(v, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "v"));
  const int64_t n = int64_t{l.num_kv_heads} * filled * l.head_dim;
  if (n == 0) return ok_status();
  kv_read_page_kernel<<<grid_for(n, 256), 256, 0, stream>>>(cache, page_id, filled, staging_id, k, v);
  return check_launch("kv_read_page");
}

}  // namespace infergate::kernels::cuda
