// Pieces of multi-head latent attention shared by the reference and the optimised CPU ops (ref.h).
#pragma once

#include <cstdint>

#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels {

// host_arrays false (the CUDA launcher): page_ids, slots and the fp8 scale are device memory and are
// not read (the kernel skips a row whose page or slot is outside the pool).
Status validate_latent_append(const LatentCache& c, View2<const float> rows, const int32_t* page_ids,
                              const int32_t* slots, const char* op, bool host_arrays = true);
// host_arrays: the batch's arrays are host memory and are checked too (the CUDA launcher passes false:
// its arrays are device memory and only the shapes are checked).
Status validate_mla_attention(const LatentCache& c, const AttentionBatch& b, View3<const float> q,
                              int32_t value_dim, View3<const float> out, const char* op,
                              bool host_arrays = true);
Status validate_linear_transposed(View2<const float> x, const WeightView& w, View2<const float> y,
                                  const char* op);
// One row of a latent page, quantized as the reference writes it / read back as fp32.
void latent_write_row(const LatentCache& c, const float* x, int32_t page_id, int32_t slot);
void latent_read_row(const LatentCache& c, int32_t page_id, int32_t slot, float* y);

}  // namespace infergate::kernels
