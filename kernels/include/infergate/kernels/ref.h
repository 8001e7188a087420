// The scalar reference of every kernels/ op: plain C++, one element at a time, written to be read.
// Each function here is the specification its optimised CPU (`*_cpu`, cpu.h) and CUDA (cuda.h)
// versions are tested against. Host memory only. Activations are fp32; where an optimised path
// quantizes one on its way in, a reference says what it computes (linear_int4_a8_ref).
#pragma once

#include <cstdint>
#include <vector>

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/published.h"
#include "infergate/kernels/status.h"
#include "infergate/kernels/tensor.h"

namespace infergate::kernels {

// ==== Weights ======================================================================================

// A source matrix as it comes from a checkpoint: fp32, fp16 or bf16, rows of `cols` elements
// `row_stride` elements apart.
enum class SourceDtype : uint8_t { kF32 = 0, kF16, kBF16 };
struct MatrixSource {
  const void* data = nullptr;
  SourceDtype dtype = SourceDtype::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

// Element (r, c) of a source as fp32.
float source_at(const MatrixSource& src, int64_t r, int64_t c);

// Quantizes src [N, K] into `layout` (whose rows/cols must equal src's) writing out.data/scales/zeros
// (sizes: weight_bytes(layout)). Scales are chosen per row (int8) or per group (int4):
//   int8:      d = amax / 127,                  q = clamp(rne(x / d), -127, 127)
//   int4-sym:  d = amax / 7,                    u = clamp(rne(x / d) + 8, 0, 15)
//   int4-asym: lo = min(0, min x), hi = max(0, max x), d = (hi - lo) / 15, z = clamp(rne(-lo / d), 0, 15),
//              u = clamp(rne(x / d) + z, 0, 15)
// with d rounded UP to the scale dtype, so |x - dequant(x)| <= d / 2 for every element.
// fp16/bf16 formats convert with round-to-nearest-even.
// Errors: a NaN or infinite weight (InvalidArgument naming row and column), a scale beyond the
// scale dtype's range, shapes that disagree, null buffers.
Status quantize_weight_ref(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out);

// W [N, K] as fp32 into out [N, K].
Status dequantize_weight_ref(const WeightView& w, View2<float> out);

// ---- Published formats (published.h) ----

// Quantizes src [N, K] into a published layout. The choices (the formats fix only the decoding):
//   fp8 block / channel: s = amax / 448 over the block / row (finite), rounded UP to the scale storage
//     (kF32 keeps it), q = e4m3(x / s), round to nearest even; an all-zero block stores s = 1;
//     (x / s is computed as x * (1/s) everywhere, as for our own formats, so implementations agree);
//     with scale_ue8m0, s is rounded up to a power of two first;
//   ct int4 symmetric: s = amax / 7.5 rounded up, q = clamp(rne(x / s), -8, 7), u = q + 8
//     (compressed-tensors' minmax observer: the code -8 is used);
//   ct int4 asymmetric, AWQ, GPTQ asymmetric: lo = min(0, min x), hi = max(0, max x), s = (hi - lo) / 15
//     rounded up, z = clamp(rne(-lo / s), 0, 15) (ct stores z - 8 + 8), q = clamp(rne(x / s) + z, 0, 15);
//     GPTQ v1 cannot store z = 0 (z - 1 would wrap to 15, read back as 16): there lo = -hi / 14, so z = 1;
//   GPTQ symmetric: s = amax / 7.5 rounded up, z = 8.
//   Scales use the group of each column: g_idx[k] with act_order, else k / G.
// So |x - dequant(x)| <= s / 2 for every int4 element, and fp8 keeps e4m3's relative step (2^-4).
// Errors: a NaN or infinite weight (naming row and column), shapes that disagree, a scale beyond its
// storage's range, an act-order g_idx that is out of range or assigns a group the wrong number of columns.
Status quantize_published_ref(const MatrixSource& src, const PublishedLayout& layout,
                              const PublishedBuffers& out);

// W [N, K] as fp32 into out [N, K]. Refuses (naming the position) what would decode to noise: a scale
// that is NaN, infinite or negative, an fp8 NaN code (0x7F / 0xFF), a g_idx entry outside [0, groups)
// or a g_idx that assigns some group another number of columns than column order would.
Status dequantize_published_ref(const PublishedView& w, View2<float> out);

// ==== KV cache =====================================================================================

// Writes a.k / a.v rows into their pages (and, for kInt4Kivi, staging windows), quantizing:
//   f16/bf16: round to nearest even.   fp8: code = e4m3(x / s[h]), saturating at +-448.
//   int8: d = amax / 127 per (head, token).   int4: (d, m) per (head, token, 64-group): x = d*u + m.
//   int4-kivi: V as int4; K rounded to fp16 into the staging window, quantized per (head, channel)
//   over the page's page_size tokens when the page's last slot is written.
// Non-finite inputs follow the policy in formats.h (scales from finite values, NaN as 0, inf saturates).
Status kv_append_ref(const KvCache& cache, const KvAppend& a);

// Dequantizes the first `filled` tokens of page `page_id` into k and v [num_kv_heads, filled, head_dim].
// For kInt4Kivi a page with filled < page_size is not sealed yet: its keys are read from staging
// window `staging_id` (ignored otherwise).
Status kv_read_page_ref(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<float> k, View3<float> v);

// Latent pages (kv_latent_page_regions): writes rows [T, head_dim] (each token's latent and roped key)
// to their pages and slots, quantizing each row as a K row of the dtype (kInt4Kivi is refused).
Status latent_append_ref(const LatentCache& cache, View2<const float> rows, const int32_t* page_ids,
                         const int32_t* slots);
// The first `filled` rows of page `page_id` as fp32 into out [filled, head_dim].
Status latent_read_page_ref(const LatentCache& cache, int32_t page_id, int32_t filled, View2<float> out);

// ==== Linear layers =================================================================================

// y [M, N] = x [M, K] @ W[N, K]^T (+ bias [N] when not null), dequantizing W on the fly. The
// reference sums in double; optimised versions sum in fp32 (tests compare within fp32 tolerance).
// y must not overlap x.
Status linear_ref(View2<const float> x, const WeightView& w, const float* bias, View2<float> y);

// What linear_cpu computes for int4 weights on its integer path (cpu_int_linear()): x quantized to
// int8 per weight group g along K, then integer dot products with the weight codes:
//   s_mg = max_{k in g} |x_mk| / 127,   q_mk = quantize_int8(x_mk, 127 / max|x| (0 for an all-zero group))
//   y_mn = sum_g d_ng s_mg (sum_{k in g} u_nk q_mk - z_ng sum_{k in g} q_mk)  (+ bias_n)
// (the inner sums exact in integers, the outer one in double here). Against linear_ref the error is
// at most sum_g (s_mg / 2) sum_{k in g} |w_nk| per output. Needs int4 weights with K a multiple of
// the group size and the group size a multiple of 32 (else invalid_argument).
Status linear_int4_a8_ref(View2<const float> x, const WeightView& w, const float* bias, View2<float> y);

// ==== Attention ====================================================================================

// Causal attention of a batch of query chunks over a paged KV cache (see AttentionBatch in ops.h):
// query token i of sequence s sits at position kv_len[s] - q_len + i and sees KV positions 0..that.
// q and out are [T, num_q_heads, head_dim] (T = q_start[num_seqs]); query head j reads KV head
// j / (num_q_heads / num_kv_heads). Softmax in fp32 or wider: out = softmax(scale * q K^T) V.
// The reference works in double. Host arrays.
Status attention_ref(const KvCache& cache, const AttentionBatch& batch, View3<const float> q,
                     View3<float> out);

// ==== Mixture of experts ============================================================================

// How a token's experts are chosen from its router logits (DeepSeek-V3, Kimi K2, GLM-4.5; the
// published semantics, read from transformers' DeepseekV3TopkRouter and DeepSeek-V3's inference code):
//   s = sigmoid(logits) (or softmax over the experts); c = s + bias (bias may be null: c = s).
//   With num_groups > 1 the experts form num_groups equal groups; a group scores as the sum of its two
//   highest c, and only the topk_groups best groups stay eligible (the others are never chosen).
//   The top_k eligible experts by c are chosen, best first (ties: the lower expert index).
//   weight_j = s[expert_j] (the bias changes which experts, never their weights); when normalize, the
//   weights are divided by their sum; then all are multiplied by scaling.
// transformers masks the ineligible groups with 0 rather than -inf; the two differ only when fewer
// than top_k eligible experts have c > 0, which a sigmoid score with a small bias does not produce.
struct MoeRouting {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int32_t num_groups = 1;
  int32_t topk_groups = 1;
  bool softmax = false;  // scoring: sigmoid (false) or softmax over the experts
  bool normalize = true;
  float scaling = 1.0f;
  const float* bias = nullptr;  // [num_experts] selection bias (e_score_correction_bias), or null
};

// logits [T, num_experts] -> experts [T, top_k] (row-major int32) and weights [T, top_k] (fp32).
// Errors: shapes that disagree, a top_k or group split the expert count cannot hold, a non-finite
// logit (InvalidArgument naming the token).
Status moe_route_ref(const MoeRouting& routing, View2<const float> logits, int32_t* experts, float* weights);

// Absorbed multi-head latent attention over latent pages: every query head attends to the one cached
// row per token, K = the whole row [head_dim], V = its first value_dim values (the latent):
//   out[t, a] = softmax_j(scale q[t, a] . K_j) V_j,  j = 0 .. the token's position (causal, as
//   attention_ref).
// q [T, num_q_heads, head_dim], out [T, num_q_heads, value_dim]. batch.staging_ids is unused.
Status mla_attention_ref(const LatentCache& cache, const AttentionBatch& batch, View3<const float> q,
                         int32_t value_dim, View3<float> out);

// ==== Element-wise ops (all fp32) =================================================================

// y [T, H] = x * rsqrt(mean(x^2) + eps) * w [H]. y may be x (in place).
Status rmsnorm_ref(View2<const float> x, const float* w, float eps, View2<float> y);

// The rotary frequencies inv_freq[i] = 1 / theta^(2i / rotary_dim), i < rotary_dim / 2, with llama3
// scaling applied when configured (as transformers' _compute_llama3_parameters does).
Status rope_inv_freq(const RopeConfig& config, std::vector<float>* inv_freq);

// Rotates q [T, Hq, head_dim] and k [T, Hk, head_dim] in place at positions[T] (see RopeConfig for
// the two layouts). angle = float(position) * inv_freq[i] in fp32, as transformers computes it.
Status rope_ref(const RopeConfig& config, const float* inv_freq, const int32_t* positions, View3<float> q,
                View3<float> k);

// out [T, I] = silu(gate) * up, silu(g) = g / (1 + exp(-g)). out may be gate or up.
Status silu_mul_ref(View2<const float> gate, View2<const float> up, View2<float> out);

// out [T, H] = a + b (the residual add). out may be a or b.
Status add_ref(View2<const float> a, View2<const float> b, View2<float> out);

// y [T, N] += bias [N] (Qwen2's q/k/v biases).
Status bias_add_ref(View2<float> y, const float* bias);

// out [T, H] = table[ids[t]] as fp32; the table is [vocab, H] in fp32, fp16 or bf16.
// An id outside [0, vocab) is refused (OutOfRange, naming the position and the id).
Status embedding_ref(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out);

}  // namespace infergate::kernels
