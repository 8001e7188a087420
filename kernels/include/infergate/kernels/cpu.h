// The optimised CPU version of every op: same contracts as the references in ref.h (read those for
// the maths), multithreaded over a small pool, with AVX2 / AVX-512 inner loops chosen at run time
// (never compiled for one CPU: the library runs on any x86-64, and builds elsewhere with the
// portable loops). Host memory only; activations fp32; accumulation fp32.
//
// Thread-safety: the ops may be called from several threads at once; each call uses the shared pool
// (calls queue for it). Results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/status.h"
#include "infergate/kernels/tensor.h"

namespace infergate::kernels {

// ---- instruction sets and threads ----

enum class CpuIsa : uint8_t { kScalar = 0, kAvx2, kAvx512 };
const char* cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512"
// The best set this CPU runs (AVX2 needs AVX2+FMA+F16C; AVX-512 needs F/BW/VL/DQ as well).
CpuIsa cpu_isa_detected();
// The set in use: detected at start, or INFERGATE_KERNELS_ISA=scalar|avx2|avx512 when set (capped
// at what the CPU runs), or the last set_cpu_isa().
CpuIsa cpu_isa();
// Chooses the set (tests and benchmarks compare them); refuses one the CPU cannot run.
Status set_cpu_isa(CpuIsa isa);
// Decode attention over int8, int4 and int4-kivi KV with integer dot products: on a CPU with
// AVX-512 VNNI (and the avx512 set active) q is quantized per query head to int8 and the softmax
// weights per 32 tokens to u8 (docs/quant-formats.md gives the error bound); the same for
// mla_attention_cpu over int8 and int4 latent pages (all the heads of a query token share each chunk
// of latent rows). On by default; INFERGATE_KERNELS_INT_ATTENTION=0 or set_cpu_int_attention(false)
// keeps the exact fp32 path.
void set_cpu_int_attention(bool enabled);
// Whether attention_cpu uses it now: enabled, the avx512 set active, and the CPU has VNNI.
bool cpu_int_attention();
// Linear layers with int4 weights and integer dot products: on a CPU with AVX-512 VNNI (and the
// avx512 set active) x is quantized to int8 per weight group along K (the contract and its error
// bound: linear_int4_a8_ref, docs/quant-formats.md) at every batch size, so a row's result does not
// depend on what it is batched with. On by default; INFERGATE_KERNELS_INT_LINEAR=0 or
// set_cpu_int_linear(false) keeps the exact path (x never quantized).
void set_cpu_int_linear(bool enabled);
// Whether linear_cpu uses it now for int4 weights (shapes: linear_int4_a8_ref).
bool cpu_int_linear();
// Threads the ops use: INFERGATE_KERNELS_THREADS, else the hardware's concurrency. n >= 1.
void set_cpu_threads(int n);
int cpu_threads();

// ---- ops (see ref.h for each contract) ----

// Quantizes rows in parallel; bit-identical to quantize_weight_ref.
Status quantize_weight_cpu(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out);
// Bit-identical to dequantize_weight_ref.
Status dequantize_weight_cpu(const WeightView& w, View2<float> out);
// y = x W^T (+ bias), fused dequantization, fp32 accumulation. Batch 1 (GEMV) streams W once;
// larger M reuses each dequantized vector for up to 4 rows of x.
Status linear_cpu(View2<const float> x, const WeightView& w, const float* bias, View2<float> y);
// One product of linear_multi_cpu: y = x W^T (+ bias).
struct LinearOutput {
  WeightView w;
  const float* bias = nullptr;  // [N] or null
  View2<float> y;               // [x.rows, N]
};
// Several products of the same x (a layer's q/k/v, gate/up) in one pass over the thread pool: each
// output is bit-identical to linear_cpu with its weight, but the work of all of them is shared out
// at once (one hand-off to the pool, one reordering of x for int4), not op by op. Every output is
// checked before any is written; an invalid one is named by its index ("linear_multi[2]: ...").
Status linear_multi_cpu(View2<const float> x, const LinearOutput* outs, int64_t count);
// One product of linear_grouped_cpu: y = x W^T (+ bias), each with its own x.
struct LinearProduct {
  View2<const float> x;         // [M, K]
  WeightView w;                 // [N, K]
  const float* bias = nullptr;  // [N] or null
  View2<float> y;               // [M, N]
};
// Products of different inputs and weights in one pass over the thread pool (a MoE layer's experts,
// each over the tokens routed to it): each output is bit-identical to linear_cpu with its x and
// weight. An x shared by several int4 products (the same pointer, rows and stride) is reordered once.
// Every product is checked before any is written; an invalid one is named by its index.
Status linear_grouped_cpu(const LinearProduct* products, int64_t count);

// Bit-identical pages to kv_append_ref.
Status kv_append_cpu(const KvCache& cache, const KvAppend& a);
// Bit-identical to kv_read_page_ref.
Status kv_read_page_cpu(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<float> k, View3<float> v);
// Bit-identical pages to latent_append_ref (rows written in parallel).
Status latent_append_cpu(const LatentCache& cache, View2<const float> rows, const int32_t* page_ids,
                         const int32_t* slots);
// Absorbed MLA attention (mla_attention_ref's contract): units of one query token x a block of heads;
// each unit dequantizes its token's visible latent rows 16 at a time once for all its heads and keeps
// an online softmax per head in fp32.
Status mla_attention_cpu(const LatentCache& cache, const AttentionBatch& batch, View3<const float> q,
                         int32_t value_dim, View3<float> out);
// Paged attention (decode and prefill). Work units are (sequence, KV head, up to 16 query rows,
// KV range); all query heads of a group share each dequantized K/V tile. Long sequences split
// their KV range over units (batch.split_tokens, or automatically when there are fewer units than
// threads) and the partial softmax states are merged exactly.
Status attention_cpu(const KvCache& cache, const AttentionBatch& batch, View3<const float> q,
                     View3<float> out);

Status rmsnorm_cpu(View2<const float> x, const float* w, float eps, View2<float> y);
// cos/sin are computed once per (token, frequency) and applied to every head.
Status rope_cpu(const RopeConfig& config, const float* inv_freq, const int32_t* positions, View3<float> q,
                View3<float> k);
Status silu_mul_cpu(View2<const float> gate, View2<const float> up, View2<float> out);
Status add_cpu(View2<const float> a, View2<const float> b, View2<float> out);
Status bias_add_cpu(View2<float> y, const float* bias);
Status embedding_cpu(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out);

}  // namespace infergate::kernels
