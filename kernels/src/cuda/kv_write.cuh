// KV-cache page writes (quantizing on the way in) and reads on the GPU, bit-identical to kv_append_ref,
// kv_read_page_ref and latent_append_ref (the per-element maths are formats.h's host/device
// functions), written on the shared primitives so that the CPU emulator runs them against the
// references. Launchers: kv.cu.
//
// kv_append: one warp per (token, KV head). int4-kivi runs two kernels in stream order:
//   1. seal: for every token that writes its page's last slot, quantize that page's keys per
//      channel, taking each slot's key from this call's input (rounded to fp16) when the call
//      holds it, else from the staging window (written by earlier calls);
//   2. append: values per token, and each key into the staging window - only by the last token of
//      the call that writes that (window, slot), which is what token-by-token appends leave there.
// latent_append: one warp per row.
#pragma once

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/numeric.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"

namespace infergate::kernels::cuda::kvw {

constexpr int kWarpsPerBlock = 8;

INFERGATE_DEV void st_u16(uint8_t* p, uint16_t v) { *reinterpret_cast<uint16_t*>(p) = v; }
INFERGATE_DEV uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// Writes one row (head h, slot t) of one side of a page from x[head_dim] - the whole warp. int4 in the
// layout's groups (64 channels, or 128 on latent pages): lane i holds channel pairs (2i, 2i + 1) of
// each 64 channels of the group, the two nibbles of one byte.
INFERGATE_DEV void write_row(const KvPageLayout& l, uint8_t* page, int64_t data, int64_t params, int64_t h,
                             int64_t t, const float* __restrict__ x, const float* fp8_scale) {
  const int lane = prim::lane_id();
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
        if (prim::is_finite(x[c])) amax = fmaxf(amax, fabsf(x[c]));
      }
      amax = prim::warp_max(amax);
      const uint16_t sb = kv_int8_scale(amax);
      if (lane == 0) st_u16(page + kv_int8_param_offset(l, params, h, t), sb);
      const float inv = safe_inverse(fp16_to_float(sb));
      for (int64_t c = lane; c < d; c += 32) row[c] = static_cast<uint8_t>(kv_int8_code(x[c], inv));
      break;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: {
      const int64_t group = l.int4_group, groups = kv_int4_groups(l);
      for (int64_t g = 0; g < groups; ++g) {
        // The finite range of the group; lo = hi = 0 when nothing in it is finite (as the reference).
        float lo = INFINITY, hi = -INFINITY;
        bool fin = false;
        for (int64_t c = g * group + 2 * lane; c < (g + 1) * group && c < d; c += 64) {
          for (int e = 0; e < 2 && c + e < d; ++e) {
            if (!prim::is_finite(x[c + e])) continue;
            lo = fminf(lo, x[c + e]);
            hi = fmaxf(hi, x[c + e]);
            fin = true;
          }
        }
        const bool any = prim::warp_any(fin);
        lo = prim::warp_min(lo);
        hi = prim::warp_max(hi);
        if (!any) lo = hi = 0.0f;
        const KvInt4Params p = kv_int4_params(lo, hi);
        if (lane == 0) {
          uint8_t* pp = page + kv_int4_param_offset(l, params, h, t, g);
          st_u16(pp, p.scale);
          st_u16(pp + 2, p.min);
        }
        const float m = fp16_to_float(p.min), inv = safe_inverse(fp16_to_float(p.scale));
        for (int64_t c = g * group + 2 * lane; c < (g + 1) * group && c < d; c += 64) {
          const uint32_t code0 = kv_int4_code(x[c], m, inv);
          const uint32_t code1 = c + 1 < d ? kv_int4_code(x[c + 1], m, inv) : 0u;
          row[c >> 1] = static_cast<uint8_t>(code0 | (code1 << 4));
        }
      }
      break;
    }
  }
}

// int4-kivi pass 1: one warp per (sealing token, head); lane pairs of channels (c, c+1) per byte.
template <int = 0>
__global__ void kivi_seal_kernel(KvCache cache, KvAppend a, int64_t tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t item = int64_t{blockIdx.x} * kWarpsPerBlock + prim::warp_id();
  if (item >= tokens * l.num_kv_heads) return;
  const int64_t i = item / l.num_kv_heads, h = item % l.num_kv_heads;
  const int32_t psize = l.page_size;
  if (a.slots[i] != psize - 1) return;
  const int32_t page_id = a.page_ids[i], win = a.staging_ids[i];
  if (page_id < 0 || page_id >= cache.num_pages || win < 0 || win >= cache.num_staging) return;
  const KvPageRegions r = kv_page_regions(l);
  uint8_t* page = cache.page(page_id);
  const auto* window = reinterpret_cast<const uint16_t*>(cache.staging_window(win)) + h * psize * l.head_dim;
  const int lane = prim::lane_id();
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
        if (prim::is_finite(vals[s])) {
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

template <int = 0>
__global__ void kv_append_kernel(KvCache cache, KvAppend a, int64_t tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t item = int64_t{blockIdx.x} * kWarpsPerBlock + prim::warp_id();
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
  for (int64_t c = prim::lane_id(); c < l.head_dim; c += 32) dst[c] = fp16_from_float(k[c]);
}

// One thread per (head, token, element) of a page.
template <int = 0>
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
          const uint8_t* pp = page + kv_int4_param_offset(l, params, h, t, c / l.int4_group);
          y = kv_int4_dequant(int4_get(row, c), fp16_to_float(ld_u16(pp)), fp16_to_float(ld_u16(pp + 2)));
          break;
        }
      }
    }
    (key ? k : v).at(h, t)[c] = y;
  }
}

// Latent rows into their pages: one warp per row, the K side of a one-head page (latent_write_row).
template <int = 0>
__global__ void latent_append_kernel(LatentCache cache, View2<const float> rows,
                                     const int32_t* __restrict__ page_ids,
                                     const int32_t* __restrict__ slots) {
  const int64_t i = int64_t{blockIdx.x} * kWarpsPerBlock + prim::warp_id();
  if (i >= rows.rows) return;
  const int32_t page_id = page_ids[i], t = slots[i];
  if (page_id < 0 || page_id >= cache.num_pages || t < 0 || t >= cache.layout.page_size) return;
  const KvPageRegions r = kv_latent_page_regions(cache.layout);
  write_row(cache.layout, cache.page(page_id), r.k_data, r.k_params, 0, t, rows.row(i), cache.scale);
}

}  // namespace infergate::kernels::cuda::kvw
