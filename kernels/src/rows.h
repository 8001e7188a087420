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

// Writes token i, KV head h of an (already validated) append: its V row, and its K row or (kivi) its
// staged key, sealing the page's head h when the slot is the page's last.
void kv_write_token_head(const KvCache& cache, const KvAppend& a, int64_t i, int64_t h);

// Checks a kv_read_page call.
Status validate_kv_read(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<const float> k, View3<const float> v);

}  // namespace infergate::kernels
