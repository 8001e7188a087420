// The inner loops of the optimised CPU ops, compiled once per instruction set (isa_*.cc include
// kernels_impl.inc under a target region) and chosen at run time. The public *_cpu functions
// (ops_cpu.cc) validate arguments, split work across the thread pool and call these.
#pragma once

#include <cstdint>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/tensor.h"

namespace infergate::kernels::cpu {

struct LinearJob {
  const float* x = nullptr;  // [m, K], x_stride apart
  int64_t x_stride = 0;
  int64_t m = 0;
  WeightView w;
  const float* bias = nullptr;  // [N] or null
  float* y = nullptr;           // [m, N], y_stride apart
  int64_t y_stride = 0;
  // int4 only, from linear_prepare: x reordered in chunks of 2*width (evens, then odds) [m, k_main]
  // (k_main = cols rounded down to 2*width; the rest is done element by element).
  float* xperm = nullptr;
  int64_t k_main = 0;
  // int4 on the integer path only, from vnni_linear_prepare: x as int8 codes [m, xq_stride] in chunks
  // of 32 (16 evens, 16 odds), zero past K; per row and weight group its scale and the sum of its codes.
  int8_t* xq = nullptr;
  int64_t xq_stride = 0;
  float* xscale = nullptr;  // [m, groups]
  int32_t* xsum = nullptr;  // [m, groups]
};

struct AttnJob {
  const KvCache* cache = nullptr;
  const AttentionBatch* batch = nullptr;
  View3<const float> q;
  View3<float> out;
};

// A work unit: rows [row0, row0 + nrows) of sequence `seq` for each of the KV heads
// [kv_head, kv_head + num_heads) (row r of head h is query token r / group, query head h * group +
// r % group), over KV positions [kv0, kv1). When `partial` is set the unit writes
// [num_heads][nrows][head_dim + 2] = (o unnormalised, max, sum) there instead of the final rows of out.
// Only integer-path decode units (vnni_decode_applies) have num_heads > 1; Kernels::attention_unit
// takes one head. Those take up to kAttnMaxHeads KV heads of their sequence: a page holds the
// heads' rows one after another, so walking the heads within each chunk reads the page front to
// back, which the hardware prefetcher follows; one head at a time reads a 1 KiB run (int4, head_dim
// 128, 16-token pages) here and there (docs/quant-formats.md, "Where the time goes").
struct AttnUnit {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t num_heads = 1;
  int32_t row0 = 0;
  int32_t nrows = 0;
  int32_t kv0 = 0;
  int32_t kv1 = 0;
  float* partial = nullptr;
};

inline constexpr int kAttnMaxRows = 16;      // query rows per unit (per head)
inline constexpr int kAttnMaxHeads = 8;      // KV heads per unit
inline constexpr int kAttnChunkTokens = 16;  // KV tokens dequantized at a time

// Floats of scratch one attention unit needs for head_dim d (rows padded to a multiple of 32): q and
// o rows, the chunk's K and V as fp32, scores and scales, the kivi channel scales, and the int4 (d, m)
// pairs of the chunk's tokens.
inline int64_t attention_scratch_floats(int64_t d) {
  const int64_t dp = (d + 31) / 32 * 32, groups = (d + 31) / 32;
  return 2 * kAttnMaxRows * dp + 2 * kAttnChunkTokens * dp + 4 * kAttnChunkTokens + 2 * kAttnMaxRows +
         2 * dp + 4 * kAttnChunkTokens * groups + 4 * kAttnChunkTokens + 64;
}

struct MlaJob {
  const LatentCache* cache = nullptr;
  const AttentionBatch* batch = nullptr;
  View3<const float> q;
  int32_t value_dim = 0;
  View3<float> out;
};
// Floats of scratch one MLA unit of `heads` heads needs for a latent row of head_dim d and value_dim dv.
inline int64_t mla_scratch_floats(int64_t d, int64_t dv, int64_t heads) {
  const int64_t dp = (d + 63) / 64 * 64, dvp = (dv + 63) / 64 * 64;  // padded to the widest column block
  return kAttnChunkTokens * dp + d * kAttnChunkTokens + heads * dvp + 2 * heads + heads * dp +
         heads * kAttnChunkTokens + 64;
}

struct Kernels {
  const char* name;
  int width;  // fp32 lanes
  void (*linear_prepare)(const LinearJob& j);
  void (*linear_rows)(const LinearJob& j, int64_t n0, int64_t n1);
  // Dequantizes rows [t0, t0 + n) of head h of one side of a page into out (rows out_stride apart).
  // `staged` (kInt4Kivi keys of a filling page): the fp16 window of head h, [page_size][head_dim].
  void (*kv_rows)(const KvPageLayout& l, const uint8_t* page, bool key, int64_t h, int64_t t0, int64_t n,
                  const uint16_t* staged, float* out, int64_t out_stride);
  void (*attention_unit)(const AttnJob& j, const AttnUnit& u, float* scratch);
  // Query token `row` of sequence `seq`, heads [a0, a1), over latent pages (mla_scratch_floats).
  void (*mla_unit)(const MlaJob& j, int32_t seq, int64_t row, int64_t a0, int64_t a1, float* scratch);
  void (*rmsnorm_rows)(View2<const float> x, const float* w, float eps, View2<float> y, int64_t r0,
                       int64_t r1);
  void (*silu_mul_rows)(View2<const float> g, View2<const float> u, View2<float> out, int64_t r0, int64_t r1);
  void (*add_rows)(View2<const float> a, View2<const float> b, View2<float> out, int64_t r0, int64_t r1);
  void (*bias_add_rows)(View2<float> y, const float* bias, int64_t r0, int64_t r1);
};

// Integer decode attention over int8 / int4 / int4-kivi KV (attn_vnni.cc): whether this CPU has
// AVX-512 with VNNI; whether a unit qualifies (decode rows of one token; int8 with head_dim % 64 == 0,
// int4 and kivi with head_dim % 128 == 0, head_dim <= 1024); the unit itself, every one of its heads
// (scratch of vnni_decode_scratch_floats(head_dim, num_heads) floats; same outputs as
// Kernels::attention_unit head by head, with q and the softmax weights quantized to 8 bits).
bool vnni_decode_available();
bool vnni_decode_applies(const KvPageLayout& l, int64_t group, const AttnUnit& u);
int64_t vnni_decode_scratch_floats(int64_t head_dim, int64_t heads);
void vnni_decode_unit(const AttnJob& j, const AttnUnit& u, float* scratch);
// The same integer path for multi-head latent attention over int8 / int4 latent pages (attn_vnni.cc,
// mla_unit): whether a layout and value width qualify (head_dim % 64 == 0 and <= 1024; int8 with
// value_dim % 64 == 0, int4 in groups of 64 or 128 with value_dim % 128 == 0 and whole groups); one
// unit, the contract of Kernels::mla_unit (scratch of vnni_mla_scratch_floats(head_dim, heads) floats).
bool vnni_mla_applies(const KvPageLayout& l, int64_t value_dim);
int64_t vnni_mla_scratch_floats(int64_t head_dim, int64_t heads);
void vnni_mla_unit(const MlaJob& j, int32_t seq, int64_t row, int64_t a0, int64_t a1, float* scratch);

// int4 linear layers with int8 activations and integer dot products (linear_vnni.cc; the contract is
// linear_int4_a8_ref): whether a weight layout qualifies (group 32, 64 or 128 dividing K, at most
// kVnniLinearMaxGroups groups per row); the padded row length of the int8 x; quantizing x into the
// job's xq / xscale / xsum; output rows [n0, n1) for every row of x. Call the last two only when
// vnni_decode_available().
inline constexpr int64_t kVnniLinearMaxGroups = 1024;
bool vnni_linear_applies(const WeightLayout& l);
int64_t vnni_linear_xq_stride(const WeightLayout& l);
void vnni_linear_prepare(const LinearJob& j);
void vnni_linear_rows(const LinearJob& j, int64_t n0, int64_t n1);

const Kernels& scalar_kernels();
const Kernels& avx2_kernels();    // call only when the CPU has AVX2, FMA and F16C
const Kernels& avx512_kernels();  // call only when the CPU has AVX-512 F/BW/VL/DQ too
const Kernels& active_kernels();  // the set chosen by set_cpu_isa / detection

}  // namespace infergate::kernels::cpu
