// Per-row pieces of the reference quantizers, shared by the reference (which loops over them) and
// the optimised CPU ops (which run them in parallel), so both write bit-identical bytes.
#pragma once

#include <cstdint>

#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels {

// Quantizes row r of src into out; x is scratch of layout.cols floats.
Status quantize_weight_row(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out,
                           int64_t r, float* x);

// Writes row x (head h, slot t) of one side of a page, quantizing: `data` / `params` are the byte
// offsets of the side's data and parameter regions (K's or V's; a latent page's only ones).
// fp8_scale: per-head scales (null: 1.0). Not for kivi keys (per channel, sealed from staging).
void kv_write_row(const KvPageLayout& l, uint8_t* page, int64_t data, int64_t params, int64_t h, int64_t t,
                  const float* x, const float* fp8_scale);
// Reads row (h, t) of one side back as fp32 into y [head_dim].
void kv_read_row(const KvPageLayout& l, const uint8_t* page, int64_t data, int64_t params, int64_t h,
                 int64_t t, float* y);

// Writes token i, KV head h of an (already validated) append: its V row, and its K row or (kivi) its
// staged key, sealing the page's head h when the slot is the page's last.
void kv_write_token_head(const KvCache& cache, const KvAppend& a, int64_t i, int64_t h);

// Checks a kv_read_page call.
Status validate_kv_read(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<const float> k, View3<const float> v);

}  // namespace infergate::kernels
