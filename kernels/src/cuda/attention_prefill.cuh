// The general paged-attention kernels, written on prims.cuh so that the CPU emulator runs them too
// (launchers in attention.cu):
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
// Dequantization happens in registers (the decode kernel's loader, attention_decode.cuh): int8 and fp8
// K codes are exact in fp16 (their scales multiply the fp32 scores), int4 K and all V rows become fp16
// values with one rounding. The 4 warps' states are merged in shared memory; with a KV split the block
// writes (o, max, sum) to the workspace and attention_merge_kernel combines the splits.
//
// attention_simple_kernel (any head_dim): one warp per query row, CUDA cores, the per-element
// maths of formats.h. Used for head_dims the tensor-core kernel does not take.
#pragma once

#include <cmath>

#include "attention_decode.cuh"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/tensor.h"
#include "kv_element.cuh"
#include "prims.cuh"

namespace infergate::kernels::cuda::prefill {

using decode::kBf16Mma;
using decode::mma_kv;
using decode::pack2;

// ==== simple kernel ===============================================================================

constexpr int kSimpleMaxDimPerLane = 32;  // head_dim <= 1024

// One warp per (query token, query head): grid.x covers every row of the batch.
template <int = 0>
__global__ void attention_simple_kernel(KvCache cache, AttentionBatch b, View3<const float> q,
                                        View3<float> out, int64_t total_tokens) {
  const KvPageLayout& l = cache.layout;
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= total_tokens * b.num_q_heads) return;
  const int lane = prim::lane_id();
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
    const float score = prim::warp_sum(dot) * b.scale;
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

// 16 consecutive elements of one K or V row (starting at element e0) as 8 packed pairs (elements
// 2j, 2j+1), dequantized: int8 / fp8 K as exact codes (scale applied by the caller), everything
// else to values. `tok_scale`: int8 row scale or fp8 head scale (V only); int4: the row's
// (d, m) for the 64-group holding e0; kivi keys: per-channel (d, m) words for the 16 channels.
// Built on the decode kernel's loader (its int8 pairs are 1152 + code; here the code itself).
template <KvDtype DT>
INFERGATE_DEV void load16(const uint8_t* row, int64_t e0, bool key, float tok_scale, uint32_t int4_dm,
                          const uint32_t* kivi_dm, uint32_t (&out)[8]) {
  if constexpr (DT == KvDtype::kInt4Kivi) {
    if (!key) {  // V: per-token groups, as int4
      decode::load16<KvDtype::kInt4>(row, static_cast<int>(e0), int4_dm, out);
      return;
    }
    const uint2 v = *reinterpret_cast<const uint2*>(row + e0 / 2);
    const uint32_t w[2] = {v.x, v.y};  // w[i] holds elements 8i .. 8i+7 (nibble p = element 8i+p)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t nib = ((w[i] >> (8 * j)) & 0xFu) | (((w[i] >> (8 * j + 4)) & 0xFu) << 16);
        const uint32_t u = prim::h2_sub(nib | 0x64006400u, 0x64006400u);
        const uint32_t a = kivi_dm[8 * i + 2 * j], b = kivi_dm[8 * i + 2 * j + 1];
        out[4 * i + j] = prim::h2_fma(prim::byte_perm(a, b, 0x5410), u, prim::byte_perm(a, b, 0x7632));
      }
    }
  } else {
    decode::load16<DT>(row, static_cast<int>(e0), int4_dm, out);
    if constexpr (DT == KvDtype::kInt8) {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = prim::h2_sub(out[j], 0x64806480u);  // 1152 + code -> code
    }
    if constexpr (DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3) {
      if (!key) {
        const uint32_t s2 = prim::pack_half2(tok_scale, tok_scale);
#pragma unroll
        for (int j = 0; j < 8; ++j) out[j] = prim::h2_mul(out[j], s2);
      }
    }
  }
}

// The mma kernel's shared memory (dynamic): P tiles per warp, then the warps' softmax states.
template <int D>
struct MmaShared {
  uint16_t ps[kWarps][kRows][kChunk];
  float red_m[kWarps][kRows], red_l[kWarps][kRows];
  float red_o[kWarps][kRows][D];
};

template <KvDtype DT, int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_mma_kernel(KvCache cache, AttentionBatch b, View3<const float> q, View3<float> out,
                         int32_t row_tiles, int32_t splits, int32_t split_tokens, float* workspace) {
  constexpr int kBlocks = D / 64;   // 64-dim blocks for S^T
  constexpr int kDpl = D / 8;       // dims per lane group for O^T
  constexpr int kTiles = kDpl / 2;  // O^T mma tiles of 16 dims
  MmaShared<D>& sh = *reinterpret_cast<MmaShared<D>*>(prim::dynamic_smem());
  auto& ps = sh.ps;
  auto& red_m = sh.red_m;
  auto& red_l = sh.red_l;
  auto& red_o = sh.red_o;

  const KvPageLayout& l = cache.layout;
  const int lane = prim::lane_id(), warp = prim::warp_id();
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
  const int64_t last_row = prim::min64(rows_total, row_base + kRows) - 1;
  const int64_t range_lo = int64_t{split} * split_tokens;
  const int64_t range_hi =
      last_row < row_base ? 0 : prim::min64(kv_len - q_len + last_row / group + 1, range_lo + split_tokens);
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
    float qv[kBlocks][16];
    qscale = decode::load_q_row<DT, kBlocks>(q, q0, h, group, row_base + g, rows_total, c, qv);
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
  for (int i = 0; i < 2; ++i) row_qscale[i] = prim::shfl(qscale, 4 * (2 * c + i));

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
          prim::prefetch_l2(rowp + off);
          if (i < 2 && kBlocks > 1) prim::prefetch_l2(rowp + off + kv_row_bytes(DT, D) / 2);
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
      decode::softmax_row_step(v0, v1, mx[i], sum[i], alpha[i], p[i], p[2 + i]);
    }
    // P to shared memory as [row][token] (fp16 or bf16), then the B fragments of P^T.
    {
      auto to16 = [](float x) -> uint16_t {
        if constexpr (kBf16Mma<DT>) {
          return static_cast<uint16_t>(prim::pack_bf162(x, 0.0f) & 0xFFFFu);
        } else {
          return static_cast<uint16_t>(prim::pack_half2(x, 0.0f) & 0xFFFFu);
        }
      };
      ps[warp][2 * c][g] = to16(p[0]);
      ps[warp][2 * c + 1][g] = to16(p[1]);
      ps[warp][2 * c][g + 8] = to16(p[2]);
      ps[warp][2 * c + 1][g + 8] = to16(p[3]);
    }
    prim::sync_warp();
    const uint32_t pb0 = prim::ld_u32(&ps[warp][g][2 * c]);
    const uint32_t pb1 = prim::ld_u32(&ps[warp][g][2 * c + 8]);
    prim::sync_warp();
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
            prim::byte_perm(vf[0][t], vf[1][t], 0x5410), prim::byte_perm(vf[0][t], vf[1][t], 0x7632),
            prim::byte_perm(vf[2][t], vf[3][t], 0x5410), prim::byte_perm(vf[2][t], vf[3][t], 0x7632)};
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
  prim::sync_block();
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * D; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / D, dcol = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red_m[w][r]);
    float lsum = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        if (red_m[w][r] == -INFINITY) continue;
        const float f = prim::fast_exp(red_m[w][r] - m);
        lsum += f * red_l[w][r];
        acc += f * red_o[w][r][dcol];
      }
    }
    decode::write_row_state<D>(partial, out, r, dcol,
                               row_base + r < rows_total ? q0 + (row_base + r) / group : -1,
                               h * group + (row_base + r) % group, m, lsum, acc);
  }
}

// Combines the splits of one (sequence, KV head, row tile): one block, threads over rows x dims.
template <int = 0>
__global__ void attention_merge_kernel(AttentionBatch b, int32_t num_kv_heads, int32_t head_dim,
                                       View3<float> out, int32_t row_tiles, int32_t splits,
                                       const float* __restrict__ workspace) {
  const int32_t seq = blockIdx.z / num_kv_heads, h = blockIdx.z % num_kv_heads, tile = blockIdx.y;
  const int64_t group = b.num_q_heads / num_kv_heads;
  const int64_t q0 = b.q_start[seq], rows_total = (b.q_start[seq + 1] - q0) * group;
  const float* base = workspace + (int64_t{blockIdx.z} * row_tiles + tile) * splits * kRows * (head_dim + 2);
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * head_dim; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / head_dim, dcol = idx % head_dim;
    const int64_t row = int64_t{tile} * kRows + r;
    if (row >= rows_total) continue;
    float m = -INFINITY;
    for (int j = 0; j < splits; ++j) m = fmaxf(m, base[(j * kRows + r) * (head_dim + 2) + head_dim]);
    float lsum = 0.0f, acc = 0.0f;
    for (int j = 0; j < splits; ++j) {
      const float* pr = base + (j * kRows + r) * (head_dim + 2);
      if (pr[head_dim] == -INFINITY) continue;
      const float f = prim::fast_exp(pr[head_dim] - m);
      lsum += f * pr[head_dim + 1];
      acc += f * pr[dcol];
    }
    out.at(q0 + row / group, h * group + row % group)[dcol] = acc / lsum;
  }
}

}  // namespace infergate::kernels::cuda::prefill
