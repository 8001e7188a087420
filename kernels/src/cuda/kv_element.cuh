// One dequantized KV (or latent) element, as the scalar references read it back (kv_read_row): the
// element-at-a-time path of the general attention kernel and of MLA decode. Written on the shared
// primitives, so the CPU emulator runs it too.
#pragma once

#include "infergate/kernels/formats.h"
#include "infergate/kernels/numeric.h"
#include "prims.cuh"

namespace infergate::kernels::cuda {

INFERGATE_DEV uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// The dequantized element c of token slot t, head h, one side of a page (kivi keys of a filling
// page come from the staging window when `window` is given). A latent page is a one-head page's K
// side: kv_latent_page_regions, key = true, h = 0.
INFERGATE_DEV float kv_element(const KvPageLayout& l, const KvPageRegions& r, const uint8_t* page, bool key,
                               int64_t h, int64_t t, int64_t c, const uint16_t* window) {
  const int64_t data = key ? r.k_data : r.v_data, params = key ? r.k_params : r.v_params;
  const uint8_t* row = page + kv_row_offset(l, data, h, t);
  if (key && l.dtype == KvDtype::kInt4Kivi) {
    if (window != nullptr) return fp16_to_float(window[t * l.head_dim + c]);
    const uint8_t* pp = page + kv_kivi_param_offset(l, params, h, c);
    return kv_int4_dequant(int4_get(row, c), fp16_to_float(ld_u16(pp)), fp16_to_float(ld_u16(pp + 2)));
  }
  switch (l.dtype) {
    case KvDtype::kF16: return fp16_to_float(ld_u16(row + 2 * c));
    case KvDtype::kBF16: return bf16_to_float(ld_u16(row + 2 * c));
    case KvDtype::kFp8E4M3:
      return kv_fp8_dequant(row[c], *reinterpret_cast<const float*>(page + kv_fp8_param_offset(params, h)));
    case KvDtype::kInt8:
      return dequantize_int8(static_cast<int8_t>(row[c]),
                             fp16_to_float(ld_u16(page + kv_int8_param_offset(l, params, h, t))));
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: {
      const uint8_t* pp = page + kv_int4_param_offset(l, params, h, t, c / l.int4_group);
      return kv_int4_dequant(int4_get(row, c), fp16_to_float(ld_u16(pp)), fp16_to_float(ld_u16(pp + 2)));
    }
  }
  return 0.0f;
}

}  // namespace infergate::kernels::cuda
