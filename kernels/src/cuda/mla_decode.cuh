// Absorbed multi-head latent attention at decode (DeepSeek-V3, Kimi K2; mla_attention_ref's contract,
// one query token per sequence) over a paged latent cache in every latent dtype (fp16, bf16, fp8-e4m3,
// int8, int4), written on the shared primitives so that the CPU emulator runs it in the test suite.
//
// Every query head of a sequence attends to the same cached row per token, [latent | roped key]
// (head_dim values; V is its first value_dim), so what costs is reading and dequantizing the rows,
// and a block amortises that over 8 heads: one block of 4 warps per (sequence, tile of 8 query heads,
// KV split). Per chunk of 8 tokens the block dequantizes the rows once into shared memory as fp32
// (kv_element: the reference's per-element formulas, so the values are bit-identical), each warp then
// takes 16 of the 64 (head, token) scores (lanes across head_dim, a warp sum), 8 threads update the
// heads' online softmax, and every thread adds the chunk's weighted rows into its 32 of the tile's
// 8 x value_dim output accumulators (registers: value_dim <= 512). With splits (flash-decoding, when
// (sequence, tile) blocks alone would leave the GPU's resident slots empty) each block writes its
// unnormalised (o, max, sum) in attention_decode_merge_kernel's layout ([sequence][tile][split][8]
// [value_dim + 2]) and that kernel combines them, num_kv_heads being 1.
//
// CUDA cores only: at Kimi K2's widths (576-value rows, 8 to 128 heads per GPU) the arithmetic per
// cached byte is 8 heads x 2 flops per value against 1.1 to 2 bytes, which is not what bounds a GPU;
// the row reads are. A tensor-core version (FlashMLA's) is the next step once a GPU has measured this.
#pragma once

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/numeric.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/tensor.h"
#include "kv_element.cuh"
#include "prims.cuh"

namespace infergate::kernels::cuda::mla {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kHeads = 8;  // query heads per block (= decode::kRows, the merge kernel's row tile)
constexpr int kChunk = 8;  // tokens dequantized into shared memory at a time
constexpr int kMaxValueDim = 512;
constexpr int kAcc = kHeads * kMaxValueDim / kThreads;  // output accumulators per thread
constexpr int kMaxHeadDim = 640;                        // shared memory: (8 + 8) x 640 x 4 = 40 KiB

INFERGATE_HD constexpr bool mla_dtype(KvDtype dt) {
  return dt == KvDtype::kF16 || dt == KvDtype::kBF16 || dt == KvDtype::kFp8E4M3 || dt == KvDtype::kInt8 ||
         dt == KvDtype::kInt4;
}

// Shared memory: q of the tile and the chunk's rows [8][head_dim] each, the scores / weights [8][8],
// the heads' running max, sum and rescale factor.
INFERGATE_HD constexpr int64_t mla_smem_bytes(int64_t head_dim) {
  return (2 * kHeads * head_dim + kHeads * kChunk + 3 * kHeads) * 4;
}

struct MlaArgs {
  int32_t value_dim = 0;
  int32_t row_tiles = 1;
  int32_t splits = 1;
  int32_t split_tokens = 1;    // KV tokens per split (a multiple of kChunk)
  float* workspace = nullptr;  // [seqs][row_tiles][splits][kHeads][value_dim + 2] when splits > 1
};

struct MlaPlan {
  MlaArgs args;
  int64_t workspace_bytes = 0;  // 0 when not split
};

// As plan_decode: split the KV range only when (sequence, row tile) blocks would leave some of the
// GPU's `slots` resident blocks empty, into as many pieces as fill them once and none shorter than
// `min_tokens`; a forced split (batch.split_tokens) wins. `can_split` is false where the merge kernel
// has no instance for value_dim.
inline MlaPlan plan_mla_decode(int32_t num_seqs, int32_t num_q_heads, int32_t value_dim, int64_t max_kv_len,
                               int32_t forced_split_tokens, int64_t slots, bool can_split,
                               int64_t min_tokens = 256) {
  MlaPlan p;
  p.args.value_dim = value_dim;
  p.args.row_tiles = (num_q_heads + kHeads - 1) / kHeads;
  const int64_t total = prim::max64(kChunk, (max_kv_len + kChunk - 1) / kChunk * kChunk);
  const int64_t base = int64_t{num_seqs} * p.args.row_tiles;
  int64_t per = total;
  if (can_split && forced_split_tokens > 0) {
    per = (int64_t{forced_split_tokens} + kChunk - 1) / kChunk * kChunk;
  } else if (can_split && base < slots) {
    const int64_t pieces = slots / prim::max64(1, base);
    per = prim::max64((total + pieces - 1) / pieces, min_tokens);
    per = (per + kChunk - 1) / kChunk * kChunk;
  }
  if (per > total) per = total;
  p.args.split_tokens = static_cast<int32_t>(per);
  p.args.splits = static_cast<int32_t>((total + per - 1) / per);
  if (p.args.splits > 1) p.workspace_bytes = base * p.args.splits * kHeads * (int64_t{value_dim} + 2) * 4;
  return p;
}

// grid (splits, row_tiles, sequences), kThreads threads, mla_smem_bytes(head_dim) of shared memory.
template <int = 0>
__global__ void __launch_bounds__(kThreads)
    mla_decode_kernel(LatentCache c, AttentionBatch b, View3<const float> q, View3<float> out, MlaArgs a) {
  prim::grid_dep_wait();
  const int32_t split = static_cast<int32_t>(blockIdx.x), tile = static_cast<int32_t>(blockIdx.y);
  const int32_t seq = static_cast<int32_t>(blockIdx.z);
  const int64_t q0 = b.q_start[seq];
  if (b.q_start[seq + 1] == q0) return;  // no query token this step (uniform over the block)
  const KvPageLayout& l = c.layout;
  const KvPageRegions reg = kv_latent_page_regions(l);
  const int64_t D = l.head_dim, DV = a.value_dim, P = l.page_size;
  const int tid = static_cast<int>(threadIdx.x), warp = prim::warp_id(), lane = prim::lane_id();
  const int32_t h0 = tile * kHeads;
  const int nh = static_cast<int>(prim::min64(kHeads, b.num_q_heads - h0));
  const int64_t kv_len = b.kv_len[seq];
  const int64_t t_begin = int64_t{split} * a.split_tokens;
  const int64_t t_end = prim::min64(kv_len, t_begin + a.split_tokens);

  float* qs = reinterpret_cast<float*>(prim::dynamic_smem());  // [kHeads][D]
  float* rows = qs + kHeads * D;                               // [kChunk][D]
  float* pw = rows + kChunk * D;                               // [kHeads][kChunk] scores, then weights
  float* run_m = pw + kHeads * kChunk;                         // [kHeads]
  float* run_l = run_m + kHeads;
  float* corr = run_l + kHeads;
  for (int64_t i = tid; i < kHeads * D; i += kThreads) {
    const int h = static_cast<int>(i / D);
    qs[i] = h < nh ? q.at(q0, h0 + h)[i % D] : 0.0f;
  }
  if (tid < kHeads) {
    run_m[tid] = -INFINITY;
    run_l[tid] = 0.0f;
  }
  float acc[kAcc];
#pragma unroll
  for (int k = 0; k < kAcc; ++k) acc[k] = 0.0f;
  const int32_t* table = b.block_table + int64_t{seq} * b.max_pages_per_seq;

  for (int64_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int n = static_cast<int>(prim::min64(kChunk, t_end - t0));
    prim::sync_block();  // the previous chunk's rows and weights are no longer read
    for (int64_t i = tid; i < kChunk * D; i += kThreads) {
      const int j = static_cast<int>(i / D);
      float v = 0.0f;
      if (j < n) {
        const int64_t t = t0 + j;
        v = kv_element(l, reg, c.page(table[t / P]), /*key=*/true, 0, t % P, i % D, nullptr);
      }
      rows[i] = v;
    }
    prim::sync_block();
    for (int pair = warp; pair < kHeads * kChunk; pair += kWarps) {
      const int h = pair / kChunk, j = pair % kChunk;
      float dot = 0.0f;
      for (int64_t x = lane; x < D; x += 32) dot += qs[h * D + x] * rows[j * D + x];
      dot = prim::warp_sum(dot);
      if (lane == 0) pw[pair] = (h < nh && j < n) ? dot * b.scale : -INFINITY;
    }
    prim::sync_block();
    if (tid < kHeads) {
      float mx = run_m[tid];
      for (int j = 0; j < n; ++j) mx = fmaxf(mx, pw[tid * kChunk + j]);
      // A head past the tile's end keeps max -inf: its weights are 0 and its sums stay 0.
      const float f = run_m[tid] == -INFINITY ? 0.0f : prim::fast_exp(run_m[tid] - mx);
      float sum = 0.0f;
      for (int j = 0; j < kChunk; ++j) {
        const float s = pw[tid * kChunk + j];
        const float e = (s == -INFINITY) ? 0.0f : prim::fast_exp(s - mx);
        pw[tid * kChunk + j] = e;
        sum += e;
      }
      run_l[tid] = run_l[tid] * f + sum;
      run_m[tid] = mx;
      corr[tid] = f;
    }
    prim::sync_block();
#pragma unroll
    for (int k = 0; k < kAcc; ++k) {
      const int64_t idx = tid + int64_t{k} * kThreads;
      if (idx >= kHeads * DV) break;
      const int h = static_cast<int>(idx / DV);
      const int64_t col = idx % DV;
      float s = acc[k] * corr[h];
      for (int j = 0; j < n; ++j) s += pw[h * kChunk + j] * rows[j * D + col];
      acc[k] = s;
    }
  }
  prim::sync_block();
  prim::grid_dep_launch();
  float* partial = a.splits > 1 ? a.workspace + ((int64_t{seq} * a.row_tiles + tile) * a.splits + split) *
                                                    kHeads * (DV + 2)
                                : nullptr;
#pragma unroll
  for (int k = 0; k < kAcc; ++k) {
    const int64_t idx = tid + int64_t{k} * kThreads;
    if (idx >= kHeads * DV) break;
    const int h = static_cast<int>(idx / DV);
    const int64_t col = idx % DV;
    if (partial != nullptr) {
      float* pr = partial + h * (DV + 2);
      pr[col] = acc[k];
      if (col == 0) {
        pr[DV] = run_m[h];
        pr[DV + 1] = run_l[h];
      }
    } else if (h < nh) {
      out.at(q0, h0 + h)[col] = acc[k] / run_l[h];
    }
  }
}

}  // namespace infergate::kernels::cuda::mla
