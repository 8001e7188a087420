// Argument checks shared by the reference, CPU and CUDA entry points, so that every implementation
// refuses the same bad input with the same message.
#pragma once

#include <string>

#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels {

std::string shape_str(int64_t a, int64_t b);
std::string shape_str(int64_t a, int64_t b, int64_t c);

Status validate_quantize_args(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out);
// Pointers present for the format, layout valid. `op` prefixes the message.
Status validate_weight_view(const WeightView& w, const char* op);
// A view with positive... `name` [rows, cols] as expected, stride >= cols, data non-null when non-empty.
Status validate_view2(const View2<const float>& v, int64_t rows, int64_t cols, const char* op,
                      const char* name);
Status validate_view3(const View3<const float>& v, int64_t d0, int64_t d1, int64_t d2, const char* op,
                      const char* name);
// Layout valid, pool pointers present, fp8 scales finite and positive when given (host pointers only
// when `host_arrays`).
Status validate_kv_cache(const KvCache& cache, bool host_arrays, const char* op);
// Shapes of a.k / a.v; when host_arrays: page ids, slots and staging ids in range and the
// contiguity contract of KvAppend.
Status validate_kv_append(const KvCache& cache, const KvAppend& a, int64_t tokens, bool host_arrays,
                          const char* op);

// Shapes and host arrays of an attention call (q_start monotone, q_len <= kv_len, pages in range).
// Without host arrays only the shapes and pointers are checked.
Status validate_attention(const KvCache& cache, const AttentionBatch& b, View3<const float> q,
                          View3<const float> out, bool host_arrays, const char* op);
Status validate_linear(View2<const float> x, const WeightView& w, View2<const float> y, const char* op);
Status validate_rope(const RopeConfig& c, View3<const float> q, View3<const float> k, const char* op);

}  // namespace infergate::kernels
