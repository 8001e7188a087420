// CUDA paged attention.
//
// attention_mma_kernel (head_dim 64 or 128): one block of 4 warps per (sequence, KV head, tile of 8
// query rows, KV split). Each warp walks 16-token chunks of the split (chunks w, w+4, ...):
//   S^T (16 tokens x 8 rows) = K (16 x d) * Q^T   mma m16n8k16, fp16 (bf16 for bf16 KV) in, fp32 out
//   online softmax in fp32 per row (running max and sum, rescaling the output)
//   O^T (d x 8 rows) += V^T (d x 16 tokens) * P^T  mma, P through a small shared tile
// Head dimensions are permuted inside each mma (a dot product does not care about the order of its
// terms) so that every lane fills its A fragments from 16-byte loads of one token row: for S^T,
// lane (g, c) loads dims [16c, 16c+16) of each 64-dim block of tokens g and g+8; for O^T it loads
// dims [d/8 * g, d/8 * (g+1)) of tokens 2c, 2c+1, 2c+8, 2c+9 and pairs them with one byte permute.
// Dequantization happens in registers: int8 and fp8 K codes are exact in fp16 (their scales multiply
// the fp32 scores), int4 K and all V rows become fp16 values with one rounding. The 4 warps' states
// are merged in shared memory; with a KV split the block writes (o, max, sum) to the workspace and
// attention_merge_kernel combines the splits (flash-decoding).
//
// attention_simple_kernel (any head_dim): one warp per query row, CUDA cores, the per-element
// maths of formats.h. Used for head_dims the tensor-core kernel does not take.
//
// Decode (max_q_len == 1) with f16 / bf16 / fp8 / int8 / int4 pages of a multiple of 16 tokens runs the
// streaming kernel of attention_decode.cuh instead, which keeps each SM's loads in flight with cp.async.
#include <algorithm>

#include "../validate.h"
#include "attention_decode.cuh"
#include "common.cuh"
#include "kv_element.cuh"
#include "tuning.h"

#include <cuda_fp8.h>

namespace infergate::kernels::cuda {
namespace {

// ==== simple kernel ===============================================================================

constexpr int kSimpleMaxDimPerLane = 32;  // head_dim <= 1024

// One warp per (query token, query head): grid.x covers every row of the batch.
__global__ void attention_simple_kernel(KvCache cache, AttentionBatch b, View3<const float> q,
                                        View3<float> out, int64_t total_tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= total_tokens * b.num_q_heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t tok = row / b.num_q_heads, hq = row % b.num_q_heads;
  // The sequence of this token (q_start is short: a linear scan).
  int32_t s = 0;
  while (s + 1 < b.num_seqs && b.q_start[s + 1] <= tok) ++s;
  const int64_t q_len = b.q_start[s + 1] - b.q_start[s], kv_len = b.kv_len[s];
  const int64_t visible = kv_len - q_len + (tok - b.q_start[s]) + 1;
  const int64_t h = hq / (b.num_q_heads / l.num_kv_heads), d = l.head_dim, p = l.page_size;
  const KvPageRegions r = kv_page_regions(l);
  const float* qv = q.at(tok, hq);
  float o[kSimpleMaxDimPerLane];
  for (int i = 0; i < kSimpleMaxDimPerLane; ++i) o[i] = 0.0f;
  float mx = -INFINITY, sum = 0.0f;
  const bool kivi = l.dtype == KvDtype::kInt4Kivi;
  const int64_t sealed = kv_len / p * p;
  for (int64_t t = 0; t < visible; ++t) {
    const uint8_t* page = cache.page(b.block_table[int64_t{s} * b.max_pages_per_seq + t / p]);
    const uint16_t* window = nullptr;
    if (kivi && t >= sealed) {
      window = reinterpret_cast<const uint16_t*>(cache.staging_window(b.staging_ids[s])) + h * p * d;
    }
    float dot = 0.0f;
    for (int64_t c = lane; c < d; c += 32)
      dot = fmaf(qv[c], kv_element(l, r, page, true, h, t % p, c, window), dot);
    const float score = warp_sum(dot) * b.scale;
    const float m_new = fmaxf(mx, score);
    const float alpha = mx == -INFINITY ? 0.0f : expf(mx - m_new);
    const float pe = expf(score - m_new);
    sum = sum * alpha + pe;
    for (int i = 0; i * 32 + lane < d; ++i) {
      o[i] = o[i] * alpha + pe * kv_element(l, r, page, false, h, t % p, i * 32 + lane, nullptr);
    }
    mx = m_new;
  }
  float* dst = out.at(tok, hq);
  for (int i = 0; i * 32 + lane < d; ++i) dst[i * 32 + lane] = o[i] / sum;
}

// ==== tensor-core kernel ==========================================================================

constexpr int kWarps = 4;
constexpr int kRows = 8;    // query rows per block (the mma's n)
constexpr int kChunk = 16;  // KV tokens per warp step (the mma's m / k)

template <KvDtype DT>
constexpr bool kBf16Mma = DT == KvDtype::kBF16;

template <KvDtype DT>
__device__ __forceinline__ void mma_kv(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16Mma<DT>) {
    mma_bf16(d, a, b0, b1);
  } else {
    mma_f16(d, a, b0, b1);
  }
}

template <KvDtype DT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16Mma<DT>) {
    return pack_bf162(lo, hi);
  } else {
    return pack_half2(lo, hi);
  }
}

// Signed int8 pairs (bytes b, b + 1 of u) -> half2 codes, exact: 0x64XX is 1024 + XX.
__device__ __forceinline__ uint32_t i8x2_to_h2(uint32_t u_xor80, int pair) {
  const uint32_t w = __byte_perm(u_xor80, 0x64646464u, pair == 0 ? 0x5140u : 0x7362u);
  return h2_bits(
      __hsub2(bits_h2(w), __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480))));  // 1152
}

__device__ __forceinline__ uint32_t e4m3x2_to_h2(uint32_t bytes2) {
  const __half2_raw raw =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes2 & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
}

// 16 consecutive elements of one K or V row (starting at element e0) as 8 packed pairs (elements
// 2j, 2j+1), dequantized: int8 / fp8 K as exact codes (scale applied by the caller), everything
// else to values. `tok_scale`: int8 row scale or fp8 head scale (V only); int4: the row's
// (d, m) for the 64-group holding e0; kivi keys: per-channel (d, m) words for the 16 channels.
template <KvDtype DT>
__device__ __forceinline__ void load16(const uint8_t* row, int64_t e0, bool key, float tok_scale,
                                       uint32_t int4_dm, const uint32_t* kivi_dm, uint32_t (&out)[8]) {
  if constexpr (DT == KvDtype::kF16 || DT == KvDtype::kBF16) {
    const uint4 a = *reinterpret_cast<const uint4*>(row + 2 * e0);
    const uint4 b = *reinterpret_cast<const uint4*>(row + 2 * e0 + 16);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z,
    out[7] = b.w;
  } else if constexpr (DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + e0);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t h;
        if constexpr (DT == KvDtype::kInt8) {
          h = i8x2_to_h2(w[i] ^ 0x80808080u, p);
        } else {
          h = e4m3x2_to_h2(w[i] >> (16 * p));
        }
        if (!key) h = h2_bits(__hmul2(bits_h2(h), __float2half2_rn(tok_scale)));
        out[2 * i + p] = h;
      }
    }
  } else {  // int4 (per-token groups) or kivi (V per-token groups; K per channel)
    const uint2 v = *reinterpret_cast<const uint2*>(row + e0 / 2);
    const uint32_t w[2] = {v.x, v.y};  // w[i] holds elements 8i .. 8i+7 (nibble p = element 8i+p)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // Elements (8i + 2j, 8i + 2j + 1): nibbles 2j and 2j+1 -> positions 0 and 16 via prmt.
        const uint32_t nib = ((w[i] >> (8 * j)) & 0xFu) | (((w[i] >> (8 * j + 4)) & 0xFu) << 16);
        const __half2 u = __hsub2(bits_h2(nib | 0x64006400u), __float2half2_rn(1024.0f));
        __half2 dm_d, dm_m;
        if (DT == KvDtype::kInt4Kivi && key) {
          const uint32_t a = kivi_dm[8 * i + 2 * j], b = kivi_dm[8 * i + 2 * j + 1];
          dm_d = bits_h2(__byte_perm(a, b, 0x5410));
          dm_m = bits_h2(__byte_perm(a, b, 0x7632));
        } else {
          dm_d = __half2half2(__ushort_as_half(static_cast<uint16_t>(int4_dm & 0xFFFFu)));
          dm_m = __half2half2(__ushort_as_half(static_cast<uint16_t>(int4_dm >> 16)));
        }
        out[4 * i + j] = h2_bits(__hfma2(dm_d, u, dm_m));
      }
    }
  }
}

template <KvDtype DT, int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_mma_kernel(KvCache cache, AttentionBatch b, View3<const float> q, View3<float> out,
                         int32_t row_tiles, int32_t splits, int32_t split_tokens, float* workspace) {
  constexpr int kBlocks = D / 64;   // 64-dim blocks for S^T
  constexpr int kDpl = D / 8;       // dims per lane group for O^T
  constexpr int kTiles = kDpl / 2;  // O^T mma tiles of 16 dims
  __shared__ __align__(16) uint16_t ps[kWarps][kRows][kChunk];
  __shared__ float red_m[kWarps][kRows], red_l[kWarps][kRows];
  __shared__ float red_o[kWarps][kRows][D];

  const KvPageLayout& l = cache.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int32_t split = blockIdx.x, tile = blockIdx.y;
  const int32_t seq = blockIdx.z / l.num_kv_heads, h = blockIdx.z % l.num_kv_heads;
  const int64_t group = b.num_q_heads / l.num_kv_heads;
  const int64_t q0 = b.q_start[seq], q_len = b.q_start[seq + 1] - q0, kv_len = b.kv_len[seq];
  const int64_t rows_total = q_len * group;
  const int64_t psize = l.page_size;
  const KvPageRegions reg = kv_page_regions(l);
  float* partial =
      splits > 1 ? workspace + ((int64_t{blockIdx.z} * row_tiles + tile) * splits + split) * kRows * (D + 2)
                 : nullptr;

  // This block's rows, their causal limits, and its KV range.
  const int64_t row_base = int64_t{tile} * kRows;
  const int64_t last_row = min(rows_total, row_base + kRows) - 1;
  const int64_t range_lo = int64_t{split} * split_tokens;
  const int64_t range_hi =
      last_row < row_base ? 0 : min(kv_len - q_len + last_row / group + 1, range_lo + split_tokens);
  // Limits of this lane's score rows (2c, 2c+1): positions below are visible.
  int64_t limit[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = row_base + 2 * c + i;
    limit[i] = r < rows_total ? kv_len - q_len + r / group + 1 : 0;
  }

  // Q^T B fragments: row g, dims [16c, 16c + 16) of each 64-block, scaled by a power of two so that
  // fp16 cannot overflow (undone on the scores).
  uint32_t qf[kBlocks][8];
  float qscale = 1.0f;
  {
    const int64_t r = row_base + g;
    const bool valid = r < rows_total;
    const float* qrow = valid ? q.at(q0 + r / group, h * group + r % group) : nullptr;
    float amax = 0.0f;
    float qv[kBlocks][16];
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        qv[blk][e] = valid ? qrow[64 * blk + 16 * c + e] : 0.0f;
        amax = fmaxf(amax, fabsf(qv[blk][e]));
      }
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    if constexpr (!kBf16Mma<DT>) {
      if (amax > 0.0f && isfinite(amax)) qscale = exp2f(14.0f - ceilf(log2f(amax)));
    }
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        qf[blk][j] = pack2<DT>(qv[blk][2 * j] * qscale, qv[blk][2 * j + 1] * qscale);
    }
  }
  // The scale of the scores of this lane's score rows: each row's q scale is held by lanes g = row.
  float row_qscale[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) row_qscale[i] = __shfl_sync(0xFFFFFFFFu, qscale, 4 * (2 * c + i));

  float o[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};

  const bool kivi = DT == KvDtype::kInt4Kivi;
  const int64_t sealed = kv_len / psize * psize;
  const uint16_t* window =
      kivi && kv_len % psize != 0
          ? reinterpret_cast<const uint16_t*>(cache.staging_window(b.staging_ids[seq])) + h * psize * D
          : nullptr;
  const int32_t* table = b.block_table + int64_t{seq} * b.max_pages_per_seq;

  for (int64_t chunk = range_lo + int64_t{warp} * kChunk; chunk < range_hi; chunk += kWarps * kChunk) {
    // Start pulling this warp's next chunk into L2 (pages are scattered: no hardware prefetcher).
    {
      const int64_t nc = chunk + kWarps * kChunk;
      const int tok[6] = {g, g + 8, 2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
      for (int i = 0; i < 6; ++i) {
        const int64_t pos = nc + tok[i];
        if (pos < range_hi) {
          const uint8_t* pg = cache.page(table[pos / psize]);
          const uint8_t* rowp = pg + kv_row_offset(l, i < 2 ? reg.k_data : reg.v_data, h, pos % psize);
          const int64_t off = i < 2 ? kv_row_bytes(DT, D) * 16 * c / D : kv_row_bytes(DT, D) * kDpl * g / D;
          asm volatile("prefetch.global.L2 [%0];\n" ::"l"(rowp + off));
          if (i < 2 && kBlocks > 1)
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"(rowp + off + kv_row_bytes(DT, D) / 2));
        }
      }
    }
    // ---- S^T = K Q^T for tokens chunk + g and chunk + g + 8 ----
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float kscale[2] = {1.0f, 1.0f};
    {
      uint32_t kf[2][kBlocks][8];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t pos = chunk + g + 8 * half;
        if (pos >= range_hi) {
#pragma unroll
          for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
            for (int j = 0; j < 8; ++j) kf[half][blk][j] = 0u;
          }
          continue;
        }
        const uint8_t* page = cache.page(table[pos / psize]);
        const int64_t slot = pos % psize;
        if (kivi && pos >= sealed) {  // a filling page's keys: fp16 in the staging window
          const uint8_t* srow = reinterpret_cast<const uint8_t*>(window + slot * D);
#pragma unroll
          for (int blk = 0; blk < kBlocks; ++blk)
            load16<KvDtype::kF16>(srow, 64 * blk + 16 * c, true, 1.0f, 0u, nullptr, kf[half][blk]);
          continue;
        }
        const uint8_t* row = page + kv_row_offset(l, reg.k_data, h, slot);
        if constexpr (DT == KvDtype::kInt8) {
          kscale[half] = fp16_to_float(ld_u16(page + kv_int8_param_offset(l, reg.k_params, h, slot)));
        } else if constexpr (DT == KvDtype::kFp8E4M3) {
          kscale[half] = *reinterpret_cast<const float*>(page + kv_fp8_param_offset(reg.k_params, h));
        }
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk) {
          const int64_t e0 = 64 * blk + 16 * c;
          uint32_t dm = 0u;
          uint32_t kivi_dm[16];
          if constexpr (DT == KvDtype::kInt4) {
            dm = *reinterpret_cast<const uint32_t*>(
                page + kv_int4_param_offset(l, reg.k_params, h, slot, e0 / kKvInt4Group));
          } else if constexpr (DT == KvDtype::kInt4Kivi) {
            const uint4* pp =
                reinterpret_cast<const uint4*>(page + kv_kivi_param_offset(l, reg.k_params, h, e0));
#pragma unroll
            for (int v = 0; v < 4; ++v) {
              const uint4 x4 = pp[v];
              kivi_dm[4 * v] = x4.x, kivi_dm[4 * v + 1] = x4.y, kivi_dm[4 * v + 2] = x4.z,
                          kivi_dm[4 * v + 3] = x4.w;
            }
          }
          load16<DT>(row, e0, true, 1.0f, dm, kivi_dm, kf[half][blk]);
        }
      }
#pragma unroll
      for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
          const uint32_t a[4] = {kf[0][blk][2 * kt], kf[1][blk][2 * kt], kf[0][blk][2 * kt + 1],
                                 kf[1][blk][2 * kt + 1]};
          mma_kv<DT>(s, a, qf[blk][2 * kt], qf[blk][2 * kt + 1]);
        }
      }
    }
    // s[0] = (token g, row 2c), s[1] = (g, 2c+1), s[2] = (g+8, 2c), s[3] = (g+8, 2c+1).
    float p[4];
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // score row 2c + i
      float v0 = s[i] * (kscale[0] * b.scale / row_qscale[i]);
      float v1 = s[2 + i] * (kscale[1] * b.scale / row_qscale[i]);
      const int64_t pos0 = chunk + g, pos1 = chunk + g + 8;
      if (pos0 >= range_hi || pos0 >= limit[i]) v0 = -INFINITY;
      if (pos1 >= range_hi || pos1 >= limit[i]) v1 = -INFINITY;
      float cm = fmaxf(v0, v1);
      cm = fmaxf(cm, __shfl_xor_sync(0xFFFFFFFFu, cm, 4));
      cm = fmaxf(cm, __shfl_xor_sync(0xFFFFFFFFu, cm, 8));
      cm = fmaxf(cm, __shfl_xor_sync(0xFFFFFFFFu, cm, 16));
      const float m_new = fmaxf(mx[i], cm);
      const bool live = m_new != -INFINITY;            // anything visible to this row yet (uniform per row)
      alpha[i] = live ? __expf(mx[i] - m_new) : 1.0f;  // 0 when the old max was -inf
      p[i] = live ? __expf(v0 - m_new) : 0.0f;
      p[2 + i] = live ? __expf(v1 - m_new) : 0.0f;
      float ps_row = p[i] + p[2 + i];  // every lane shuffles: no early exit before these
      ps_row += __shfl_xor_sync(0xFFFFFFFFu, ps_row, 4);
      ps_row += __shfl_xor_sync(0xFFFFFFFFu, ps_row, 8);
      ps_row += __shfl_xor_sync(0xFFFFFFFFu, ps_row, 16);
      if (live) {
        sum[i] = sum[i] * alpha[i] + ps_row;
        mx[i] = m_new;
      }
    }
    // P to shared memory as [row][token] (fp16 or bf16), then the B fragments of P^T.
    {
      auto to16 = [](float x) -> uint16_t {
        if constexpr (kBf16Mma<DT>) {
          return static_cast<uint16_t>(pack_bf162(x, 0.0f) & 0xFFFFu);
        } else {
          return static_cast<uint16_t>(pack_half2(x, 0.0f) & 0xFFFFu);
        }
      };
      ps[warp][2 * c][g] = to16(p[0]);
      ps[warp][2 * c + 1][g] = to16(p[1]);
      ps[warp][2 * c][g + 8] = to16(p[2]);
      ps[warp][2 * c + 1][g + 8] = to16(p[3]);
    }
    __syncwarp();
    const uint32_t pb0 = *reinterpret_cast<const uint32_t*>(&ps[warp][g][2 * c]);
    const uint32_t pb1 = *reinterpret_cast<const uint32_t*>(&ps[warp][g][2 * c + 8]);
    __syncwarp();
    // Rescale O^T: d0, d2 belong to row 2c; d1, d3 to row 2c + 1.
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      o[t][0] *= alpha[0];
      o[t][2] *= alpha[0];
      o[t][1] *= alpha[1];
      o[t][3] *= alpha[1];
    }
    // ---- O^T += V^T P^T: tokens 2c, 2c+1, 2c+8, 2c+9, dims [kDpl g, kDpl g + kDpl) ----
    {
      uint32_t vf[4][8];
      const int tok_off[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        const int64_t pos = chunk + tok_off[k4];
        if (pos >= range_hi) {
#pragma unroll
          for (int j = 0; j < kDpl / 2; ++j) vf[k4][j] = 0u;
          continue;
        }
        const uint8_t* page = cache.page(table[pos / psize]);
        const int64_t slot = pos % psize;
        const uint8_t* row = page + kv_row_offset(l, reg.v_data, h, slot);
        float vscale = 1.0f;
        uint32_t dm = 0u;
        if constexpr (DT == KvDtype::kInt8) {
          vscale = fp16_to_float(ld_u16(page + kv_int8_param_offset(l, reg.v_params, h, slot)));
        } else if constexpr (DT == KvDtype::kFp8E4M3) {
          vscale = *reinterpret_cast<const float*>(page + kv_fp8_param_offset(reg.v_params, h));
        } else if constexpr (DT == KvDtype::kInt4 || DT == KvDtype::kInt4Kivi) {
          dm = *reinterpret_cast<const uint32_t*>(
              page + kv_int4_param_offset(l, reg.v_params, h, slot, (kDpl * g) / kKvInt4Group));
        }
        if constexpr (kDpl == 16) {
          load16<DT>(row, kDpl * g, false, vscale, dm, nullptr, vf[k4]);
        } else {  // kDpl == 8: the aligned 16 elements holding this lane's 8 (the rest is lane g^1's)
          uint32_t tmp[8];
          load16<DT>(row, (kDpl * g) / 16 * 16, false, vscale, dm, nullptr, tmp);
#pragma unroll
          for (int j = 0; j < 4; ++j) vf[k4][j] = tmp[((kDpl * g) % 16) / 2 + j];
        }
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint32_t a[4] = {
            __byte_perm(vf[0][t], vf[1][t], 0x5410), __byte_perm(vf[0][t], vf[1][t], 0x7632),
            __byte_perm(vf[2][t], vf[3][t], 0x5410), __byte_perm(vf[2][t], vf[3][t], 0x7632)};
        mma_kv<DT>(o[t], a, pb0, pb1);
      }
    }
  }

  // ---- merge the 4 warps: rows 2c, 2c+1; dims kDpl g + 2t (d0/d1) and + 1 (d2/d3) ----
  if (g == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      red_m[warp][2 * c + i] = mx[i];
      red_l[warp][2 * c + i] = sum[i];
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    red_o[warp][2 * c][kDpl * g + 2 * t] = o[t][0];
    red_o[warp][2 * c + 1][kDpl * g + 2 * t] = o[t][1];
    red_o[warp][2 * c][kDpl * g + 2 * t + 1] = o[t][2];
    red_o[warp][2 * c + 1][kDpl * g + 2 * t + 1] = o[t][3];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kRows * D; idx += blockDim.x) {
    const int r = idx / D, dcol = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red_m[w][r]);
    float lsum = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        if (red_m[w][r] == -INFINITY) continue;
        const float f = __expf(red_m[w][r] - m);
        lsum += f * red_l[w][r];
        acc += f * red_o[w][r][dcol];
      }
    }
    const int64_t row = row_base + r;
    if (partial != nullptr) {
      float* pr = partial + r * (D + 2);
      pr[dcol] = acc;
      if (dcol == 0) {
        pr[D] = m;
        pr[D + 1] = lsum;
      }
    } else if (row < rows_total) {
      out.at(q0 + row / group, h * group + row % group)[dcol] = acc / lsum;
    }
  }
}

// Combines the splits of one (sequence, KV head, row tile): one block, threads over rows x dims.
__global__ void attention_merge_kernel(AttentionBatch b, int32_t num_kv_heads, int32_t head_dim,
                                       View3<float> out, int32_t row_tiles, int32_t splits,
                                       const float* __restrict__ workspace) {
  const int32_t seq = blockIdx.z / num_kv_heads, h = blockIdx.z % num_kv_heads, tile = blockIdx.y;
  const int64_t group = b.num_q_heads / num_kv_heads;
  const int64_t q0 = b.q_start[seq], rows_total = (b.q_start[seq + 1] - q0) * group;
  const float* base = workspace + (int64_t{blockIdx.z} * row_tiles + tile) * splits * kRows * (head_dim + 2);
  for (int idx = threadIdx.x; idx < kRows * head_dim; idx += blockDim.x) {
    const int r = idx / head_dim, dcol = idx % head_dim;
    const int64_t row = int64_t{tile} * kRows + r;
    if (row >= rows_total) continue;
    float m = -INFINITY;
    for (int j = 0; j < splits; ++j) m = fmaxf(m, base[(j * kRows + r) * (head_dim + 2) + head_dim]);
    float lsum = 0.0f, acc = 0.0f;
    for (int j = 0; j < splits; ++j) {
      const float* pr = base + (j * kRows + r) * (head_dim + 2);
      if (pr[head_dim] == -INFINITY) continue;
      const float f = __expf(pr[head_dim] - m);
      lsum += f * pr[head_dim + 1];
      acc += f * pr[dcol];
    }
    out.at(q0 + row / group, h * group + row % group)[dcol] = acc / lsum;
  }
}

template <KvDtype DT, int D>
Status launch_mma(const KvCache& cache, const AttentionBatch& b, View3<const float> q, View3<float> out,
                  int32_t row_tiles, int32_t splits, int32_t split_tokens, float* ws, int32_t num_seqs,
                  Stream stream) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(num_seqs * cache.layout.num_kv_heads));
  attention_mma_kernel<DT, D>
      <<<grid, kWarps * 32, 0, stream>>>(cache, b, q, out, row_tiles, splits, split_tokens, ws);
  INFERGATE_K_RETURN_IF_ERROR(check_launch("attention"));
  if (splits > 1) {
    const dim3 mgrid(1, static_cast<unsigned>(row_tiles),
                     static_cast<unsigned>(num_seqs * cache.layout.num_kv_heads));
    attention_merge_kernel<<<mgrid, 256, 0, stream>>>(b, cache.layout.num_kv_heads, D, out, row_tiles, splits,
                                                      ws);
    return check_launch("attention (merge)");
  }
  return ok_status();
}

template <int D>
Status dispatch_dtype(const KvCache& cache, const AttentionBatch& b, View3<const float> q, View3<float> out,
                      int32_t row_tiles, int32_t splits, int32_t split_tokens, float* ws, Stream stream) {
  const int32_t n = b.num_seqs;
  switch (cache.layout.dtype) {
    case KvDtype::kF16:
      return launch_mma<KvDtype::kF16, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n, stream);
    case KvDtype::kBF16:
      return launch_mma<KvDtype::kBF16, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n, stream);
    case KvDtype::kFp8E4M3:
      return launch_mma<KvDtype::kFp8E4M3, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n,
                                              stream);
    case KvDtype::kInt8:
      return launch_mma<KvDtype::kInt8, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n, stream);
    case KvDtype::kInt4:
      return launch_mma<KvDtype::kInt4, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n, stream);
    case KvDtype::kInt4Kivi:
      return launch_mma<KvDtype::kInt4Kivi, D>(cache, b, q, out, row_tiles, splits, split_tokens, ws, n,
                                               stream);
  }
  return invalid_argument("attention: unknown KV dtype");
}

}  // namespace

namespace {

struct Plan {
  int32_t row_tiles = 0;
  int32_t splits = 1;
  int32_t split_tokens = 0;
  size_t workspace = 0;  // bytes the splits need (0 when not split)
};

// How the tensor-core kernel cuts the work: blocks of (sequence, KV head, 8 query rows); the KV range
// split when those blocks would not cover the GPU about 3 times (or as `forced` asks), in multiples
// of 4 warps x 16 tokens, never below 256 tokens per split unless forced.
Plan plan(int32_t num_seqs, int32_t num_kv_heads, int64_t group, int32_t head_dim, int32_t max_q_len,
          int32_t max_kv_len, int32_t forced) {
  Plan p;
  p.row_tiles = static_cast<int32_t>((int64_t{max_q_len} * group + kRows - 1) / kRows);
  const int64_t base_blocks = int64_t{num_seqs} * num_kv_heads * p.row_tiles;
  int64_t split = max_kv_len;
  const int64_t want = 3 * static_cast<int64_t>(device_info().sm_count);
  if (forced > 0) {
    split = forced;
  } else if (base_blocks < want) {
    const int64_t pieces = (want + base_blocks - 1) / base_blocks;
    split = std::max<int64_t>(256, (max_kv_len + pieces - 1) / pieces);
  }
  split = (split + 63) / 64 * 64;
  p.split_tokens = static_cast<int32_t>(split);
  p.splits = static_cast<int32_t>((max_kv_len + split - 1) / split);
  if (p.splits > 1)
    p.workspace = static_cast<size_t>(base_blocks * p.splits * kRows * (head_dim + 2) * sizeof(float));
  return p;
}

}  // namespace

namespace {

int decode_stages(KvDtype dt) {
  const int t = tuning().attention_stages;
  if (t >= 2 && t <= decode::kMaxStages) return t;
  (void)dt;
  return 2;  // with 4 blocks of 4 warps per SM, 2 stages keep ~100 KB per SM in flight for every dtype
}

bool decode_applies(const KvCache& cache, const AttentionBatch& b, int32_t max_q_len) {
  const KvPageLayout& l = cache.layout;
  if (!tuning().attention_decode || max_q_len != 1 || !decode::decode_dtype(l.dtype)) return false;
  if ((l.head_dim != 64 && l.head_dim != 128) || l.page_size % decode::kChunk != 0) return false;
  const int64_t group = b.num_q_heads / l.num_kv_heads;
  if (int64_t{b.num_seqs} * l.num_kv_heads > 65535 || (group + decode::kRows - 1) / decode::kRows > 65535)
    return false;
  return decode::decode_smem_bytes(l.dtype, l.head_dim, decode_stages(l.dtype)) <=
         device_info().max_smem_per_block;
}

template <KvDtype DT, int D>
Status run_decode(const KvCache& cache, const AttentionBatch& b, int32_t max_kv_len, View3<const float> q,
                  View3<float> out, void* workspace, size_t workspace_bytes, Stream stream) {
  const KvPageLayout& l = cache.layout;
  const int stages = decode_stages(DT);
  const size_t smem = static_cast<size_t>(decode::decode_smem_bytes(DT, D, stages));
  const auto kernel = decode::attention_decode_kernel<DT, D>;
  int per_sm = blocks_per_sm(reinterpret_cast<const void*>(kernel), decode::kWarps * 32, smem);
  if (tuning().attention_blocks_per_sm > 0) per_sm = tuning().attention_blocks_per_sm;
  const int64_t slots = int64_t{per_sm} * device_info().sm_count;
  decode::DecodePlan p =
      decode::plan_decode(b.num_seqs, l.num_kv_heads, b.num_q_heads / l.num_kv_heads, D, max_kv_len,
                          b.split_tokens, slots, stages, std::max(1, tuning().attention_min_split_chunks));
  if (p.args.splits > 1 &&
      (workspace == nullptr || workspace_bytes < static_cast<size_t>(p.workspace_bytes))) {  // one pass
    p.args.splits = 1;
    p.args.chunks_per_split =
        static_cast<int32_t>((int64_t{max_kv_len} + decode::kChunk - 1) / decode::kChunk);
  }
  p.args.workspace = static_cast<float*>(workspace);
  const unsigned pairs = static_cast<unsigned>(b.num_seqs * l.num_kv_heads);
  const dim3 grid(static_cast<unsigned>(p.args.splits), static_cast<unsigned>(p.args.row_tiles), pairs);
  const bool pdl = tuning().pdl;
  INFERGATE_K_RETURN_IF_ERROR(launch_kernel(kernel, grid, dim3(decode::kWarps * 32), smem, stream, pdl,
                                            "attention (decode)", cache, b, q, out, p.args));
  if (p.args.splits == 1) return ok_status();
  const dim3 mgrid(decode::kRows, static_cast<unsigned>(p.args.row_tiles), pairs);
  return launch_kernel(decode::attention_decode_merge_kernel<D>, mgrid, dim3(D),
                       static_cast<size_t>(decode::merge_smem_bytes(p.args.splits)), stream, pdl,
                       "attention (decode merge)", b, l.num_kv_heads, out, p.args.row_tiles, p.args.splits,
                       static_cast<const float*>(workspace));
}

template <int D>
Status dispatch_decode(const KvCache& cache, const AttentionBatch& b, int32_t max_kv_len,
                       View3<const float> q, View3<float> out, void* ws, size_t ws_bytes, Stream stream) {
  switch (cache.layout.dtype) {
    case KvDtype::kF16:
      return run_decode<KvDtype::kF16, D>(cache, b, max_kv_len, q, out, ws, ws_bytes, stream);
    case KvDtype::kBF16:
      return run_decode<KvDtype::kBF16, D>(cache, b, max_kv_len, q, out, ws, ws_bytes, stream);
    case KvDtype::kFp8E4M3:
      return run_decode<KvDtype::kFp8E4M3, D>(cache, b, max_kv_len, q, out, ws, ws_bytes, stream);
    case KvDtype::kInt8:
      return run_decode<KvDtype::kInt8, D>(cache, b, max_kv_len, q, out, ws, ws_bytes, stream);
    case KvDtype::kInt4:
      return run_decode<KvDtype::kInt4, D>(cache, b, max_kv_len, q, out, ws, ws_bytes, stream);
    case KvDtype::kInt4Kivi: break;
  }
  return invalid_argument("attention: the decode kernel does not take this KV dtype");
}

}  // namespace

size_t attention_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t num_kv_heads,
                                 int32_t head_dim, int32_t max_q_len, int32_t max_kv_len) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0 || head_dim <= 0 ||
      max_q_len <= 0 || max_kv_len <= 0) {
    return 0;
  }
  const int64_t group = num_q_heads / num_kv_heads;
  size_t bytes = plan(num_seqs, num_kv_heads, group, head_dim, max_q_len, max_kv_len, 0).workspace;
  if (max_q_len == 1 && (head_dim == 64 || head_dim == 128)) {
    // The decode kernel's split for any KV dtype: at most 16 blocks of 128 threads fit an SM.
    const int64_t slots = int64_t{16} * device_info().sm_count;
    const decode::DecodePlan p =
        decode::plan_decode(num_seqs, num_kv_heads, group, head_dim, max_kv_len, 0, slots, 2);
    bytes = std::max(bytes, static_cast<size_t>(p.workspace_bytes));
  }
  return bytes;
}

Status attention(const KvCache& cache, const AttentionBatch& b, int32_t max_q_len, int32_t max_kv_len,
                 View3<const float> q, View3<float> out, void* workspace, size_t workspace_bytes,
                 Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_attention(cache, b, q, out, /*host_arrays=*/false, "attention"));
  if (b.num_seqs == 0 || q.dim0 == 0) return ok_status();
  if (max_q_len < 1 || max_kv_len < max_q_len) {
    return invalid_argument("attention: max_q_len " + std::to_string(max_q_len) + " and max_kv_len " +
                            std::to_string(max_kv_len) + " must satisfy 1 <= max_q_len <= max_kv_len");
  }
  const KvPageLayout& l = cache.layout;
  const int32_t d = l.head_dim;
  if (decode_applies(cache, b, max_q_len)) {
    if (d == 64) return dispatch_decode<64>(cache, b, max_kv_len, q, out, workspace, workspace_bytes, stream);
    return dispatch_decode<128>(cache, b, max_kv_len, q, out, workspace, workspace_bytes, stream);
  }
  if (d == 64 || d == 128) {
    Plan p = plan(b.num_seqs, l.num_kv_heads, b.num_q_heads / l.num_kv_heads, d, max_q_len, max_kv_len,
                  b.split_tokens);
    if (p.splits > 1 && (workspace == nullptr || workspace_bytes < p.workspace)) {  // cannot split: one pass
      p.splits = 1;
      p.split_tokens = static_cast<int32_t>((int64_t{max_kv_len} + 63) / 64 * 64);
    }
    if (int64_t{b.num_seqs} * l.num_kv_heads > 65535 || p.row_tiles > 65535) {
      return unsupported(
          "attention: more than 65535 (sequence, KV head) pairs or query-row tiles in one call");
    }
    float* ws = static_cast<float*>(workspace);
    if (d == 64)
      return dispatch_dtype<64>(cache, b, q, out, p.row_tiles, p.splits, p.split_tokens, ws, stream);
    return dispatch_dtype<128>(cache, b, q, out, p.row_tiles, p.splits, p.split_tokens, ws, stream);
  }
  if (d > 32 * kSimpleMaxDimPerLane) return unsupported("attention: head_dim above 1024");
  const int64_t rows = q.dim0 * b.num_q_heads;
  attention_simple_kernel<<<grid_for(rows, 8), 256, 0, stream>>>(cache, b, q, out, q.dim0);
  return check_launch("attention (simple)");
}

}  // namespace infergate::kernels::cuda
