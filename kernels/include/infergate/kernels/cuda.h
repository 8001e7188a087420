// The CUDA version of every op (library infergate_kernels_cuda, built when CUDA is on). Same
// contracts as ref.h; every pointer in a view or batch is DEVICE memory unless it says "host".
// Launchers check shapes on the host, launch on `stream`, check the launch (cudaGetLastError), and
// return at once: they do not synchronize, except where a function says so. Activations are fp32;
// accumulation is fp32; the tensor-core paths round their mma inputs to fp16 (bf16 for bf16 KV).
//
// Thread-safety: launchers hold no state except one-time device queries; any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/status.h"
#include "infergate/kernels/tensor.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers

namespace infergate::kernels::cuda {

using Stream = CUstream_st*;  // a cudaStream_t; nullptr is the default stream

// Devices usable by this process (0 when there is no GPU or no driver); never fails.
int device_count();
// "NVIDIA H200, sm_90, 132 SMs, 139 GiB" for the current device, or why there is none.
std::string device_description();
// kNoDevice when device_count() == 0; a reason fit for a readiness probe.
Status require_device();

// ---- weights ----

// Quantizes src (device; fp32/fp16/bf16) into `layout` exactly as quantize_weight_ref does (the
// bytes are identical). Synchronizes `stream` to report a non-finite weight or a scale overflow
// with the same message as the reference (lowest row first).
Status quantize_weight(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out,
                       Stream stream);
// Bit-identical to dequantize_weight_ref.
Status dequantize_weight(const WeightView& w, View2<float> out, Stream stream);

// int4 weights for the tensor-core GEMV: the codes rearranged once (at load) so that each lane of a
// warp reads its mma fragments with one 16-byte load. Applies when rows % 16 == 0 and cols % 64 == 0;
// the packed buffer has the same size as the data (weight_bytes(layout).data). Scales and zeros are
// used as they are.
bool int4_mma_eligible(const WeightLayout& layout);
Status pack_int4_for_mma(const WeightView& w, void* packed, Stream stream);
// The same rearrangement on the host (tests, and loaders that pack before uploading).
Status pack_int4_for_mma_host(const WeightView& w, void* packed);

// y [M, N] = x [M, K] @ W^T (+ bias [N]). `int4_packed` (optional): W's codes from
// pack_int4_for_mma; with it, int4 GEMV/GEMM for M <= 8 runs on tensor cores (x rounded to fp16
// with a per-row power-of-two scale). Otherwise M <= 8 runs a CUDA-core GEMV (16-byte loads, x
// reused over several rows per warp) and M > 8 a TF32 tensor-core GEMM.
Status linear(View2<const float> x, const WeightView& w, const void* int4_packed, const float* bias,
              View2<float> y, Stream stream);

// ---- mixture of experts ----
// moe_route_ref's rule on the device (logits, experts, weights and r.bias are device memory), one warp
// per token; at most 1024 experts, 32 groups and top 32 (Unsupported beyond). Non-finite logits are
// not detected on the device (the reference refuses them).
Status moe_route(const MoeRouting& r, View2<const float> logits, int32_t* experts, float* weights,
                 Stream stream);

// The routed experts, on the device end to end (moe_experts.cuh). An assignment a = t * top_k + k is
// token t's k-th expert, experts[a] from moe_route.
struct MoeAlignment {
  int32_t* order = nullptr;       // [assignments]: assignment ids grouped by expert
  int32_t* offsets = nullptr;     // [num_experts + 1]: expert e's are order[offsets[e] .. offsets[e + 1])
  int32_t* active = nullptr;      // [num_experts]: the experts with any assignment, ascending
  int32_t* num_active = nullptr;  // [1]
};
// Groups the assignments by expert (one block; at most 1024 experts). Ids outside [0, num_experts)
// are left out (moe_route writes none).
Status moe_align(const int32_t* experts, int64_t assignments, int32_t num_experts, const MoeAlignment& out,
                 Stream stream);
// One projection of every expert: views is a DEVICE array of num_experts WeightViews (uploaded once at
// load), all in `layout`.
struct ExpertWeights {
  const WeightView* views = nullptr;
  int32_t num_experts = 0;
  WeightLayout layout;
};
// y [assignments, N] with y[a] = x[a / x_div] W_{experts[a]}^T, each as linear_ref computes it (fp32
// sums): x_div = top_k when x holds the tokens (gate / up), 1 when it holds a row per assignment
// (down). Only the active experts' weights are read, each once per 8 of its assignments.
Status moe_expert_linear(View2<const float> x, int32_t x_div, const ExpertWeights& w, const MoeAlignment& al,
                         View2<float> y, Stream stream);
// out [T, N] = (accumulate ? out : 0) + sum_k weights[t, k] y[t * top_k + k], k in order.
Status moe_combine(View2<const float> y, const float* weights, int32_t top_k, View2<float> out,
                   bool accumulate, Stream stream);

// ---- KV cache ----

// Bit-identical pages (and staging windows) to kv_append_ref. The KvAppend contract holds: within
// one call the tokens of a page are contiguous and in slot order (it is not re-checked on the
// device). Out-of-range ids are skipped by the kernel (never written), not reported.
Status kv_append(const KvCache& cache, const KvAppend& a, Stream stream);
// Bit-identical to kv_read_page_ref (page_id, filled, staging_id are host values).
Status kv_read_page(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id, View3<float> k,
                    View3<float> v, Stream stream);
// Latent rows [T, head_dim] (device) into their pages (page_ids, slots [T] device): bit-identical to
// latent_append_ref, int4 in the layout's groups (128 where kv_latent_layout chose them). A row whose
// page or slot is outside the pool is skipped by the kernel, not reported (check on the host first).
Status latent_append(const LatentCache& cache, View2<const float> rows, const int32_t* page_ids,
                     const int32_t* slots, Stream stream);

// ---- attention ----

// Workspace (device bytes) attention() uses to split long sequences across thread blocks when
// batch.split_tokens is 0 (automatic; depends on the device's SM count). 0 when no split is needed.
size_t attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t num_kv_heads,
                                 int32_t head_dim, int32_t max_q_len, int32_t max_kv_len);
// Paged causal attention as attention_ref. `batch` arrays are device arrays; max_q_len and
// max_kv_len (host) bound them and size the grid. head_dim 64 or 128 runs the tensor-core
// kernel (flash-decoding: KV ranges split across blocks when that fills the GPU, partial softmax
// states merged by a second kernel); other head_dims run a simple CUDA-core kernel. With a null or
// too small workspace nothing is split. head_dim 64 or 128 supports any page size; grids are
// limited to 65535 (sequence x KV head) pairs.
Status attention(const KvCache& cache, const AttentionBatch& batch, int32_t max_q_len, int32_t max_kv_len,
                 View3<const float> q, View3<float> out, void* workspace, size_t workspace_bytes,
                 Stream stream);

// ---- multi-head latent attention ----

// Workspace (device bytes) mla_decode uses to split long sequences across thread blocks when
// batch.split_tokens is 0 (depends on the device's SM count); 0 when no split is needed.
size_t mla_decode_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t value_dim, int32_t head_dim,
                                  int32_t max_kv_len);
// Absorbed MLA decode as mla_attention_ref, each sequence with one query token (or none this step):
// q [num_seqs' tokens, num_q_heads, head_dim], out [.., value_dim]; `batch` arrays are device arrays,
// max_kv_len (host) bounds kv_len. Every latent dtype but int4-kivi; head_dim <= 640 and
// value_dim <= 512 (Unsupported beyond). CUDA cores, 8 query heads per block sharing each row's
// dequantization (mla_decode.cuh); KV splits merged as attention's are, for value_dim 64, 128, 256
// and 512 with a large enough workspace, else one pass.
Status mla_decode(const LatentCache& cache, const AttentionBatch& batch, int32_t max_kv_len,
                  View3<const float> q, int32_t value_dim, View3<float> out, void* workspace,
                  size_t workspace_bytes, Stream stream);

// ---- element-wise (fp32) ----

Status rmsnorm(View2<const float> x, const float* w, float eps, View2<float> y, Stream stream);
// inv_freq (device) from rope_inv_freq; positions [T] device.
Status rope(const RopeConfig& config, const float* inv_freq, const int32_t* positions, View3<float> q,
            View3<float> k, Stream stream);
Status silu_mul(View2<const float> gate, View2<const float> up, View2<float> out, Stream stream);
Status add(View2<const float> a, View2<const float> b, View2<float> out, Stream stream);
Status bias_add(View2<float> y, const float* bias, Stream stream);
// ids [T] device. The kernel never reads outside the table: an out-of-range id writes a row of
// zeros (validate ids on the host before upload; the CPU versions refuse them).
Status embedding(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out,
                 Stream stream);

}  // namespace infergate::kernels::cuda
