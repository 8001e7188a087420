// Decode attention (one query token per sequence) over a paged KV cache, written to stream the cache
// at HBM speed: f16, bf16, fp8-e4m3, int8 and int4 pages, head_dim 64 or 128, pages of a multiple of
// 16 tokens. (Prefill, int4-kivi and other shapes use the general kernel in attention.cu.)
//
// Work: one block of 4 warps per (sequence, KV head, tile of 8 query heads, KV split). The split is a
// run of 16-token chunks; warp w takes chunks w, w + 4, ... of it. Each warp streams its chunks
// through its own ring of S shared-memory stages with cp.async (16-byte copies of the K rows, V rows
// and their scales; tokens past the sequence end are zero-filled), S - 1 chunks in flight while it
// computes one, so no load is ever waited on right after it is issued; the next page id is read one
// chunk ahead. The maths per chunk is the general kernel's (attention.cu):
//   S^T (16 tokens x 8 rows) = K (16 x D) Q^T       mma m16n8k16, fp16 (bf16 for bf16 KV) in, fp32 out
//   online softmax in fp32 per query row;  O^T (D x 8) += V^T (D x 16) P^T   mma
// with head dimensions permuted inside each mma so that every lane reads 16 contiguous elements of a
// token row, int8 / fp8 K as exact codes (their scales multiply the fp32 scores), V and int4 K
// dequantized to fp16 in registers. The 4 warps' softmax states merge in shared memory; with splits
// the block writes (o, max, sum) to the workspace and attention_decode_merge_kernel combines them.
// The split count fills the GPU's resident blocks once (one wave), so every SM streams from start to
// end. Both kernels use programmatic dependent launch: they wait (griddepcontrol.wait) before reading
// anything, and let their successor launch early.
#pragma once

#include "infergate/kernels/formats.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"

namespace infergate::kernels::cuda::decode {

constexpr int kWarps = 4;
constexpr int kRows = 8;    // query rows per block (the mma's n)
constexpr int kChunk = 16;  // tokens per chunk (the mma's m / k)
constexpr int kMaxStages = 8;

INFERGATE_HD constexpr bool decode_dtype(KvDtype dt) {
  return dt == KvDtype::kF16 || dt == KvDtype::kBF16 || dt == KvDtype::kFp8E4M3 || dt == KvDtype::kInt8 ||
         dt == KvDtype::kInt4;
}

// Bytes of one side's parameters for a chunk: int8 fp16 d per token; int4 (d, m) per token and
// 64-group; fp8 the page's fp32 head scale (4 of 16 bytes used); none for f16 / bf16.
INFERGATE_HD constexpr int64_t chunk_param_bytes(KvDtype dt, int64_t d) {
  return dt == KvDtype::kInt8
             ? kChunk * 2
             : (dt == KvDtype::kInt4 ? kChunk * kv_int4_groups(d) * 4 : (dt == KvDtype::kFp8E4M3 ? 16 : 0));
}
// One stage: K rows, V rows (each row padded by 16 bytes against bank conflicts), K params, V params.
INFERGATE_HD constexpr int64_t stage_row_stride(KvDtype dt, int64_t d) { return kv_row_bytes(dt, d) + 16; }
INFERGATE_HD constexpr int64_t stage_bytes(KvDtype dt, int64_t d) {
  return 2 * kChunk * stage_row_stride(dt, d) + 2 * chunk_param_bytes(dt, d);
}
// Shared memory of a block: the warps' rings (reused for the final merge of the warps' outputs), the
// P tiles, the warps' softmax states.
INFERGATE_HD constexpr int64_t region0_bytes(KvDtype dt, int64_t d, int stages) {
  const int64_t ring = kWarps * stages * stage_bytes(dt, d), red = int64_t{kWarps} * kRows * d * 4;
  return ring > red ? ring : red;
}
INFERGATE_HD constexpr int64_t decode_smem_bytes(KvDtype dt, int64_t d, int stages) {
  return region0_bytes(dt, d, stages) + kWarps * kRows * kChunk * 2 + 2 * kWarps * kRows * 4;
}

struct DecodeArgs {
  int32_t row_tiles = 1;
  int32_t splits = 1;
  int32_t chunks_per_split = 1;
  int32_t stages = 2;
  float* workspace = nullptr;  // [pairs][row_tiles][splits][kRows][D + 2] when splits > 1
};

struct DecodePlan {
  DecodeArgs args;
  int64_t workspace_bytes = 0;  // 0 when not split
};

// How the work is cut: `slots` = blocks resident on the whole GPU at once. Without a forced split size,
// the KV range is split only when (sequence, KV head, row tile) blocks would leave slots empty, into
// as many pieces as fill them once but none shorter than `min_chunks` chunks (a block's fixed costs -
// reading q, merging its warps, writing its partial - want a few chunks per warp to hide behind); a
// split is a multiple of 4 chunks (one per warp) and never empty.
inline DecodePlan plan_decode(int32_t num_seqs, int32_t num_kv_heads, int64_t group, int64_t head_dim,
                              int64_t max_kv_len, int32_t forced_split_tokens, int64_t slots, int stages,
                              int64_t min_chunks = 4) {
  DecodePlan p;
  p.args.stages = stages;
  p.args.row_tiles = static_cast<int32_t>((group + kRows - 1) / kRows);
  const int64_t total = prim::max64(1, (max_kv_len + kChunk - 1) / kChunk);
  const int64_t base = int64_t{num_seqs} * num_kv_heads * p.args.row_tiles;
  int64_t cps = total;
  if (forced_split_tokens > 0) {
    cps = (forced_split_tokens + kChunk - 1) / kChunk;
  } else if (base < slots) {
    const int64_t pieces = slots / prim::max64(1, base);
    cps = prim::max64((total + pieces - 1) / pieces, min_chunks);
  }
  if (cps < total) cps = (cps + kWarps - 1) / kWarps * kWarps;
  if (cps >= total) cps = total;
  p.args.chunks_per_split = static_cast<int32_t>(cps);
  p.args.splits = static_cast<int32_t>((total + cps - 1) / cps);
  if (p.args.splits > 1) p.workspace_bytes = base * p.args.splits * kRows * (head_dim + 2) * 4;
  return p;
}

template <KvDtype DT>
constexpr bool kBf16Mma = DT == KvDtype::kBF16;

template <KvDtype DT>
INFERGATE_DEV void mma_kv(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16Mma<DT>) {
    prim::mma_bf16(d, a, b0, b1);
  } else {
    prim::mma_f16(d, a, b0, b1);
  }
}

template <KvDtype DT>
INFERGATE_DEV uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16Mma<DT>) {
    return prim::pack_bf162(lo, hi);
  } else {
    return prim::pack_half2(lo, hi);
  }
}

// Signed int8 pair (bytes 2p, 2p+1 of the word, already xor 0x80) -> fp16 1152 + code, exact: 0x64XX
// is 1024 + XX, and XX = code + 128. The int8 paths take the 1152 out of the sums once instead.
INFERGATE_DEV uint32_t i8x2_to_h2_1152(uint32_t u_xor80, int p) {
  return prim::byte_perm(u_xor80, 0x64646464u, p == 0 ? 0x5140u : 0x7362u);
}

// 16 consecutive elements of one K row (from element e0) as 8 packed pairs: int8 as 1152 + code, fp8
// as exact codes (their scales go on the fp32 scores), int4 as d * u + m with the (d, m) word of the
// 64-group holding e0, f16 / bf16 as they are. (V uses it too, except int8.)
template <KvDtype DT>
INFERGATE_DEV void load16(const uint8_t* row, int e0, uint32_t int4_dm, uint32_t (&out)[8]) {
  if constexpr (DT == KvDtype::kF16 || DT == KvDtype::kBF16) {
    const uint4 a = *reinterpret_cast<const uint4*>(row + 2 * e0);
    const uint4 b = *reinterpret_cast<const uint4*>(row + 2 * e0 + 16);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else if constexpr (DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + e0);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        if constexpr (DT == KvDtype::kInt8) {
          out[2 * i + p] = i8x2_to_h2_1152(w[i] ^ 0x80808080u, p);
        } else {
          out[2 * i + p] = prim::e4m3x2_to_h2(w[i] >> (16 * p));
        }
      }
    }
  } else {  // int4: word i holds elements 8i .. 8i+7 (element 8i + p in nibble p)
    const uint2 v = *reinterpret_cast<const uint2*>(row + e0 / 2);
    const uint32_t w[2] = {v.x, v.y};
    const uint32_t d2 = prim::h2_dup(static_cast<uint16_t>(int4_dm & 0xFFFFu));
    const uint32_t m2 = prim::h2_dup(static_cast<uint16_t>(int4_dm >> 16));
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t nib = ((w[i] >> (8 * j)) & 0xFu) | (((w[i] >> (8 * j + 4)) & 0xFu) << 16);
        const uint32_t u = prim::h2_sub(nib | 0x64006400u, 0x64006400u);
        out[4 * i + j] = prim::h2_fma(d2, u, m2);
      }
    }
  }
}

// This lane's part of query row r of a block's (sequence, KV head): token q0 + r / group, head
// h * group + r % group (zeros past rows_total), dims [64 blk + 16c, +16) of each 64-dim block; returns
// the row's power-of-two scale that keeps q * scale within fp16 (1 for bf16 KV). The 4 lanes of a row
// (4g .. 4g + 3) share the scale.
template <KvDtype DT, int kBlocks>
INFERGATE_DEV float load_q_row(View3<const float> q, int64_t q0, int64_t h, int64_t group, int64_t r,
                               int64_t rows_total, int c, float (&qv)[kBlocks][16]) {
  const bool valid = r < rows_total;
  const float* qrow = valid ? q.at(q0 + r / group, h * group + r % group) : nullptr;
  float amax = 0.0f;
#pragma unroll
  for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      qv[blk][e] = valid ? qrow[64 * blk + 16 * c + e] : 0.0f;
      amax = fmaxf(amax, fabsf(qv[blk][e]));
    }
  }
  amax = fmaxf(amax, prim::shfl_xor(amax, 1));
  amax = fmaxf(amax, prim::shfl_xor(amax, 2));
  if constexpr (kBf16Mma<DT>) {
    return 1.0f;
  } else {
    return prim::fp16_safe_scale(amax);
  }
}

// One (row, dim) of a block's merged softmax state: into the split's workspace slot (o, then the max
// and the sum at dims D and D + 1: the layout the merge kernels read) when the KV range is split, else
// the normalised output of token `token` (-1: a row past the block's last), head `head`.
template <int D>
INFERGATE_DEV void write_row_state(float* partial, View3<float> out, int r, int dcol, int64_t token,
                                   int64_t head, float m, float lsum, float acc) {
  if (partial != nullptr) {
    float* pr = partial + r * (D + 2);
    pr[dcol] = acc;
    if (dcol == 0) {
      pr[D] = m;
      pr[D + 1] = lsum;
    }
  } else if (token >= 0) {
    out.at(token, head)[dcol] = acc / lsum;
  }
}

// One query row's online-softmax step over a 16-token chunk, as the mma kernels lay it out: this lane
// holds the row's scores of tokens g and g + 8 (v0, v1; -inf where masked), and the 8 lanes with the
// same c share the row. Gives the rescale of the old state (alpha), this lane's two probabilities, and
// updates the running max and sum. Every lane must call it (warp shuffles: no early exit before).
INFERGATE_DEV void softmax_row_step(float v0, float v1, float& mx, float& sum, float& alpha, float& p0,
                                    float& p1) {
  float cm = fmaxf(v0, v1);
  cm = fmaxf(cm, prim::shfl_xor(cm, 4));
  cm = fmaxf(cm, prim::shfl_xor(cm, 8));
  cm = fmaxf(cm, prim::shfl_xor(cm, 16));
  const float m_new = fmaxf(mx, cm);
  const bool live = m_new != -INFINITY;              // anything visible to this row yet (uniform per row)
  alpha = live ? prim::fast_exp(mx - m_new) : 1.0f;  // 0 when the old max was -inf
  p0 = live ? prim::fast_exp(v0 - m_new) : 0.0f;
  p1 = live ? prim::fast_exp(v1 - m_new) : 0.0f;
  float row_sum = p0 + p1;
  row_sum += prim::shfl_xor(row_sum, 4);
  row_sum += prim::shfl_xor(row_sum, 8);
  row_sum += prim::shfl_xor(row_sum, 16);
  if (live) {
    sum = sum * alpha + row_sum;
    mx = m_new;
  }
}

template <KvDtype DT, int D>
__global__ void __launch_bounds__(kWarps * 32, 4)
    attention_decode_kernel(KvCache cache, AttentionBatch b, View3<const float> q, View3<float> out,
                            DecodeArgs a) {
  constexpr int kBlocks = D / 64;   // 64-dim blocks for S^T
  constexpr int kDpl = D / 8;       // dims per lane group for O^T
  constexpr int kTiles = kDpl / 2;  // O^T mma tiles of 16 dims
  constexpr int64_t kRowBytes = kv_row_bytes(DT, D), kRowStride = stage_row_stride(DT, D);
  constexpr int64_t kParamBytes = chunk_param_bytes(DT, D), kStage = stage_bytes(DT, D);
  constexpr int64_t kOffV = kChunk * kRowStride, kOffKp = 2 * kChunk * kRowStride,
                    kOffVp = kOffKp + kParamBytes;
  constexpr int64_t kGroups = kv_int4_groups(D);

  prim::grid_dep_launch();
  prim::grid_dep_wait();  // pages, tables and q come from earlier kernels
  uint8_t* smem = prim::dynamic_smem();
  const KvPageLayout& l = cache.layout;
  const int lane = prim::lane_id(), warp = prim::warp_id();
  const int g = lane >> 2, c = lane & 3;
  const int32_t split = static_cast<int32_t>(blockIdx.x), tile = static_cast<int32_t>(blockIdx.y);
  const int32_t pair = static_cast<int32_t>(blockIdx.z);
  const int32_t seq = pair / l.num_kv_heads, h = pair % l.num_kv_heads;
  const int64_t group = b.num_q_heads / l.num_kv_heads;
  const int64_t psize = l.page_size;
  const int S = a.stages;
  const int64_t c_lo = int64_t{split} * a.chunks_per_split;
  // The page ids of this warp's first S chunks, read before the sequence length is known so the two
  // loads overlap (any index inside the table row is readable); lane si holds chunk si's.
  const int32_t* table = b.block_table + int64_t{seq} * b.max_pages_per_seq;
  int32_t pid_lane = 0;
  if (lane < S) {
    const int64_t pi = (c_lo + warp + int64_t{kWarps} * lane) * kChunk / psize;
    if (pi < b.max_pages_per_seq) pid_lane = table[pi];
  }
  const int64_t q0 = b.q_start[seq], q_len = b.q_start[seq + 1] - q0, kv_len = b.kv_len[seq];
  const int64_t rows_total = q_len * group, row_base = int64_t{tile} * kRows;
  if (row_base >= rows_total) return;  // no query rows here (uniform over the block)
  const KvPageRegions reg = kv_page_regions(l);
  const int64_t total_chunks = (kv_len + kChunk - 1) / kChunk;
  const int64_t c_hi = prim::min64(total_chunks, c_lo + a.chunks_per_split);
  const int64_t n_w = c_hi > c_lo + warp ? (c_hi - c_lo - warp + kWarps - 1) / kWarps : 0;

  const int64_t region0 = region0_bytes(DT, D, S);
  uint8_t* ring = smem + int64_t{warp} * S * kStage;
  auto* ps = reinterpret_cast<uint16_t*>(smem + region0) + warp * kRows * kChunk;        // [kRows][kChunk]
  auto* red_m = reinterpret_cast<float*>(smem + region0 + kWarps * kRows * kChunk * 2);  // [kWarps][kRows]
  float* red_l = red_m + kWarps * kRows;
  auto* red_o = reinterpret_cast<float*>(smem);  // [kWarps][kRows][D], once the rings are drained

  auto chunk_pos = [&](int64_t i) { return static_cast<int32_t>((c_lo + warp + kWarps * i) * kChunk); };
  auto page_of = [&](int64_t i) { return table[chunk_pos(i) / psize]; };

  // Copies chunk i of this warp (page `pid`) into its stage.
  const int32_t psize32 = l.page_size;
  auto issue = [&](int64_t i, int32_t pid) {
    const int32_t pos0 = chunk_pos(i), slot0 = pos0 % psize32;
    const int valid = static_cast<int>(prim::min64(kChunk, kv_len - pos0));
    const uint8_t* page = cache.page(pid);
    uint8_t* st = ring + (i % S) * kStage;
    constexpr int kUnitsPerRow = static_cast<int>(kRowBytes / 16), kUnits = kChunk * kUnitsPerRow;
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const uint8_t* src =
          page + (side ? reg.v_data : reg.k_data) + (h * psize32 + slot0) * static_cast<int32_t>(kRowBytes);
      uint8_t* dst = st + (side ? kOffV : 0);
#pragma unroll
      for (int j = 0; j < (kUnits + 31) / 32; ++j) {
        const int u = lane + 32 * j;
        if (u < kUnits) {
          const int tok = u / kUnitsPerRow, off = (u % kUnitsPerRow) * 16;
          prim::cp_async16(dst + tok * kRowStride + off, src + u * 16, tok < valid ? 16 : 0);
        }
      }
    }
    if constexpr (DT == KvDtype::kFp8E4M3) {
      if (lane < 2) {
        prim::cp_async4(st + (lane ? kOffVp : kOffKp),
                        page + kv_fp8_param_offset(lane ? reg.v_params : reg.k_params, h));
      }
    } else if constexpr (kParamBytes > 0) {
      constexpr int kPerTok = static_cast<int>(kParamBytes / kChunk),
                    kPUnits = static_cast<int>(kParamBytes / 16);
      if (lane < 2 * kPUnits) {
        const int side = lane / kPUnits, u = lane % kPUnits;
        const int64_t region = side ? reg.v_params : reg.k_params;
        const int64_t off = DT == KvDtype::kInt8 ? kv_int8_param_offset(l, region, h, slot0)
                                                 : kv_int4_param_offset(l, region, h, slot0, 0);
        const int bytes = valid * kPerTok - 16 * u;
        prim::cp_async16(st + (side ? kOffVp : kOffKp) + 16 * u, page + off + 16 * u,
                         bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes));
      }
    }
  };

  // The first S chunks go out before anything else is done (q is read while they are in flight).
  for (int si = 0; si < S; ++si) {
    const int32_t pid = static_cast<int32_t>(prim::shfl_u32(static_cast<uint32_t>(pid_lane), si));
    if (si < n_w) issue(si, pid);
    prim::cp_commit();
  }

  // Q^T B fragments: row g, dims [16c, 16c + 16) of each 64-block, scaled by a power of two so fp16
  // cannot overflow (undone on the scores).
  uint32_t qf[kBlocks][8];
  float qscale = 1.0f;
  float qsum = 0.0f;  // int8: this lane's query row's sum (lanes 4g .. 4g+3 hold row g's)
  {
    float qv[kBlocks][16];
    qscale = load_q_row<DT, kBlocks>(q, q0, h, group, row_base + g, rows_total, c, qv);
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        qf[blk][j] = pack2<DT>(qv[blk][2 * j] * qscale, qv[blk][2 * j + 1] * qscale);
        if constexpr (DT == KvDtype::kInt8) {  // the sum of q as the mma sees it (fp16)
          qsum += prim::half_to_float(static_cast<uint16_t>(qf[blk][j] & 0xFFFFu)) +
                  prim::half_to_float(static_cast<uint16_t>(qf[blk][j] >> 16));
        }
      }
    }
    qsum += prim::shfl_xor(qsum, 1);
    qsum += prim::shfl_xor(qsum, 2);
  }
  // The scores' factor for this lane's score rows 2c, 2c+1 (the q scale of row r sits in lanes 4r..).
  // int8: K enters the mma as 1152 + code, so each score carries 1152 * (sum of the row's q).
  float row_factor[2], row_offset[2];
  bool row_live[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_factor[i] = b.scale / prim::shfl(qscale, 4 * (2 * c + i));
    row_offset[i] = 1152.0f * prim::shfl(qsum, 4 * (2 * c + i));
    row_live[i] = row_base + 2 * c + i < rows_total;
  }
  // int8: V enters the mma as 1152 + code too: the output carries 1152 * (sum of the probabilities
  // used, as rounded to fp16), tracked per score row with the same rescaling as the output.
  float psum[2] = {0.0f, 0.0f};

  float o[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};

  // int8 / fp8: the V scales multiply the probabilities (p_t * s_t * vk, then one mma over the exact
  // codes) rather than every element; vk, a power of two fixed by the warp's first chunk (its largest
  // V scale times vk is in (0.5, 1]), keeps those products in fp16's precise range, and is divided out
  // of the output at the end. (Products are capped at 65504: V scales would have to grow 2^16-fold
  // within one sequence to reach it.)
  constexpr bool kScaledV = DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3;
  float vk = 1.0f;

  // Attention over chunk i of this warp, from its stage.
  auto compute = [&](int64_t i) {
    const uint8_t* st = ring + (i % S) * kStage;
    const int32_t pos0 = chunk_pos(i);
    // ---- S^T = K Q^T for tokens g and g + 8 of the chunk (two independent mma chains) ----
    float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float kscale[2] = {1.0f, 1.0f};
    {
      uint32_t kf[2][kBlocks][8];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tok = g + 8 * half;
        const uint8_t* row = st + tok * kRowStride;
        if constexpr (DT == KvDtype::kInt8) {
          kscale[half] = prim::half_to_float(*reinterpret_cast<const uint16_t*>(st + kOffKp + 2 * tok));
        } else if constexpr (DT == KvDtype::kFp8E4M3) {
          kscale[half] = *reinterpret_cast<const float*>(st + kOffKp);
        }
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk) {
          const int e0 = 64 * blk + 16 * c;
          uint32_t dm = 0u;
          if constexpr (DT == KvDtype::kInt4) {
            dm = *reinterpret_cast<const uint32_t*>(st + kOffKp + (tok * kGroups + e0 / kKvInt4Group) * 4);
          }
          load16<DT>(row, e0, dm, kf[half][blk]);
        }
      }
#pragma unroll
      for (int blk = 0; blk < kBlocks; ++blk) {
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
          const uint32_t af[4] = {kf[0][blk][2 * kt], kf[1][blk][2 * kt], kf[0][blk][2 * kt + 1],
                                  kf[1][blk][2 * kt + 1]};
          mma_kv<DT>(s2[(blk * 4 + kt) & 1], af, qf[blk][2 * kt], qf[blk][2 * kt + 1]);
        }
      }
    }
    const float s[4] = {s2[0][0] + s2[1][0], s2[0][1] + s2[1][1], s2[0][2] + s2[1][2], s2[0][3] + s2[1][3]};
    // s[0] = (token g, row 2c), s[1] = (g, 2c+1), s[2] = (g+8, 2c), s[3] = (g+8, 2c+1).
    float p[4];
    float alpha[2];
#pragma unroll
    for (int i2 = 0; i2 < 2; ++i2) {  // score row 2c + i2
      const bool v0ok = row_live[i2] && pos0 + g < kv_len, v1ok = row_live[i2] && pos0 + g + 8 < kv_len;
      const float v0 = v0ok ? (s[i2] - row_offset[i2]) * (kscale[0] * row_factor[i2]) : -INFINITY;
      const float v1 = v1ok ? (s[2 + i2] - row_offset[i2]) * (kscale[1] * row_factor[i2]) : -INFINITY;
      softmax_row_step(v0, v1, mx[i2], sum[i2], alpha[i2], p[i2], p[2 + i2]);
    }
    if constexpr (kScaledV) {
      float vs0, vs1;  // V scales of tokens g and g + 8
      if constexpr (DT == KvDtype::kInt8) {
        vs0 = prim::half_to_float(*reinterpret_cast<const uint16_t*>(st + kOffVp + 2 * g));
        vs1 = prim::half_to_float(*reinterpret_cast<const uint16_t*>(st + kOffVp + 2 * (g + 8)));
      } else {
        vs0 = vs1 = *reinterpret_cast<const float*>(st + kOffVp);
      }
      if (i == 0) {
        const float vmax = prim::warp_max(fmaxf(vs0, vs1));
        vk = vmax > 0.0f ? prim::fp16_safe_scale(vmax) * (1.0f / 16384.0f) : 1.0f;
      }
      vs0 *= vk;
      vs1 *= vk;
      p[0] = fminf(p[0] * vs0, 65504.0f);
      p[1] = fminf(p[1] * vs0, 65504.0f);
      p[2] = fminf(p[2] * vs1, 65504.0f);
      p[3] = fminf(p[3] * vs1, 65504.0f);
    }
    // P to shared memory as [row][token] (fp16 or bf16), then the B fragments of P^T.
    const uint32_t p01 = pack2<DT>(p[0], p[1]), p23 = pack2<DT>(p[2], p[3]);  // (row 2c, 2c+1) pairs
    ps[(2 * c) * kChunk + g] = static_cast<uint16_t>(p01 & 0xFFFFu);
    ps[(2 * c + 1) * kChunk + g] = static_cast<uint16_t>(p01 >> 16);
    ps[(2 * c) * kChunk + g + 8] = static_cast<uint16_t>(p23 & 0xFFFFu);
    ps[(2 * c + 1) * kChunk + g + 8] = static_cast<uint16_t>(p23 >> 16);
    if constexpr (DT == KvDtype::kInt8) {
      float r0 = prim::half_to_float(static_cast<uint16_t>(p01 & 0xFFFFu)) +
                 prim::half_to_float(static_cast<uint16_t>(p23 & 0xFFFFu));
      float r1 = prim::half_to_float(static_cast<uint16_t>(p01 >> 16)) +
                 prim::half_to_float(static_cast<uint16_t>(p23 >> 16));
      for (int o2 = 4; o2 < 32; o2 <<= 1) {
        r0 += prim::shfl_xor(r0, o2);
        r1 += prim::shfl_xor(r1, o2);
      }
      psum[0] = psum[0] * alpha[0] + r0;
      psum[1] = psum[1] * alpha[1] + r1;
    }
    prim::sync_warp();
    const uint32_t pb0 = *reinterpret_cast<const uint32_t*>(ps + g * kChunk + 2 * c);
    const uint32_t pb1 = *reinterpret_cast<const uint32_t*>(ps + g * kChunk + 2 * c + 8);
    prim::sync_warp();
    // Rescale O^T (d0, d2: row 2c; d1, d3: row 2c + 1), unless no row's max moved.
    if (!prim::warp_all(alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        o[t][0] *= alpha[0];
        o[t][2] *= alpha[0];
        o[t][1] *= alpha[1];
        o[t][3] *= alpha[1];
      }
    }
    // ---- O^T += V^T P^T: tokens 2c, 2c+1, 2c+8, 2c+9, dims [kDpl g, kDpl g + kDpl) ----
    const int tok_off[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
    if constexpr (DT == KvDtype::kInt8) {
      // The raw bytes of the 4 tokens, xor 0x80; a byte permute pairs tokens (2c, 2c+1) and
      // (2c+8, 2c+9) at one dim, and a second makes the pairs fp16 1152 + code: two per A register.
      uint32_t wv[4][4];
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        const uint8_t* row = st + kOffV + tok_off[k4] * kRowStride;
        const uint4 v = *reinterpret_cast<const uint4*>(row + (kDpl * g) / 16 * 16);
        if constexpr (kDpl == 16) {
          wv[k4][0] = v.x ^ 0x80808080u, wv[k4][1] = v.y ^ 0x80808080u;
          wv[k4][2] = v.z ^ 0x80808080u, wv[k4][3] = v.w ^ 0x80808080u;
        } else {  // this lane's 8 dims are one half of the aligned 16
          wv[k4][0] = ((g & 1) ? v.z : v.x) ^ 0x80808080u;
          wv[k4][1] = ((g & 1) ? v.w : v.y) ^ 0x80808080u;
          wv[k4][2] = wv[k4][3] = 0u;
        }
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {  // dims 2t, 2t + 1 of this lane's slice: word t / 2
        const uint32_t sel = (t & 1) ? 0x7362u : 0x5140u;
        const uint32_t x01 = prim::byte_perm(wv[0][t / 2], wv[1][t / 2], sel);
        const uint32_t x23 = prim::byte_perm(wv[2][t / 2], wv[3][t / 2], sel);
        const uint32_t af[4] = {i8x2_to_h2_1152(x01, 0), i8x2_to_h2_1152(x01, 1), i8x2_to_h2_1152(x23, 0),
                                i8x2_to_h2_1152(x23, 1)};
        mma_kv<DT>(o[t], af, pb0, pb1);
      }
    } else {
      uint32_t vf[4][8];
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        const int tok = tok_off[k4];
        const uint8_t* row = st + kOffV + tok * kRowStride;
        uint32_t dm = 0u;
        if constexpr (DT == KvDtype::kInt4) {
          dm = *reinterpret_cast<const uint32_t*>(st + kOffVp +
                                                  (tok * kGroups + (kDpl * g) / kKvInt4Group) * 4);
        }
        if constexpr (kDpl == 16) {
          load16<DT>(row, kDpl * g, dm, vf[k4]);
        } else {  // kDpl == 8: the aligned 16 elements holding this lane's 8 (the rest is lane g^1's)
          uint32_t tmp[8];
          load16<DT>(row, (kDpl * g) / 16 * 16, dm, tmp);
#pragma unroll
          for (int j = 0; j < 4; ++j)
            vf[k4][j] = (g & 1) ? tmp[4 + j] : tmp[j];  // no run-time register index
        }
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint32_t af[4] = {
            prim::byte_perm(vf[0][t], vf[1][t], 0x5410), prim::byte_perm(vf[0][t], vf[1][t], 0x7632),
            prim::byte_perm(vf[2][t], vf[3][t], 0x5410), prim::byte_perm(vf[2][t], vf[3][t], 0x7632)};
        mma_kv<DT>(o[t], af, pb0, pb1);
      }
    }
  };

  // ---- the pipeline: S - 1 chunks in flight while one is computed ----
  int32_t pid_next = 0;
  if (S < n_w) pid_next = page_of(S);
  for (int64_t i = 0; i < n_w; ++i) {
    prim::cp_wait(S - 1);
    prim::sync_warp();
    compute(i);
    prim::sync_warp();
    if (i + S < n_w) issue(i + S, pid_next);
    prim::cp_commit();
    if (i + S + 1 < n_w) pid_next = page_of(i + S + 1);
  }
  prim::cp_wait(0);

  // ---- merge the 4 warps: rows 2c, 2c+1; dims kDpl g + 2t (d0/d1) and + 1 (d2/d3) ----
  if (g == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      red_m[warp * kRows + 2 * c + i] = mx[i];
      red_l[warp * kRows + 2 * c + i] = sum[i];
    }
  }
  prim::sync_block();  // every warp is done with its ring: red_o may overwrite them
  if constexpr (DT == KvDtype::kInt8) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      o[t][0] -= 1152.0f * psum[0];
      o[t][2] -= 1152.0f * psum[0];
      o[t][1] -= 1152.0f * psum[1];
      o[t][3] -= 1152.0f * psum[1];
    }
  }
  const float onorm = 1.0f / vk;  // exact: a power of two
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    float* r0 = red_o + (warp * kRows + 2 * c) * D + kDpl * g + 2 * t;
    float* r1 = red_o + (warp * kRows + 2 * c + 1) * D + kDpl * g + 2 * t;
    r0[0] = o[t][0] * onorm;
    r1[0] = o[t][1] * onorm;
    r0[1] = o[t][2] * onorm;
    r1[1] = o[t][3] * onorm;
  }
  prim::sync_block();
  float* partial =
      a.splits > 1 ? a.workspace + ((int64_t{pair} * a.row_tiles + tile) * a.splits + split) * kRows * (D + 2)
                   : nullptr;
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * D; idx += kWarps * 32) {
    const int r = idx / D, dcol = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red_m[w * kRows + r]);
    float lsum = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        if (red_m[w * kRows + r] == -INFINITY) continue;
        const float f = prim::fast_exp(red_m[w * kRows + r] - m);
        lsum += f * red_l[w * kRows + r];
        acc += f * red_o[(w * kRows + r) * D + dcol];
      }
    }
    write_row_state<D>(partial, out, r, dcol, row_base + r < rows_total ? q0 + (row_base + r) / group : -1,
                       h * group + (row_base + r) % group, m, lsum, acc);
  }
}

// Combines the splits of one query row: block (row, row tile, sequence x KV head), one thread per dim.
// The splits' (max, sum) pairs are read once by the block (one round trip) and turned into weights in
// shared memory (dynamic: 2 floats per split); each thread then sums its dim over the splits with its
// loads batched.
INFERGATE_HD constexpr int64_t merge_smem_bytes(int32_t splits) { return int64_t{splits} * 8 + 16; }

template <int D>
__global__ void __launch_bounds__(D)
    attention_decode_merge_kernel(AttentionBatch b, int32_t num_kv_heads, View3<float> out, int32_t row_tiles,
                                  int32_t splits, const float* __restrict__ workspace) {
  prim::grid_dep_wait();
  float* wts = reinterpret_cast<float*>(prim::dynamic_smem());  // [splits] max, then [splits] weight
  const int r = static_cast<int>(blockIdx.x);
  const int32_t tile = static_cast<int32_t>(blockIdx.y), pair = static_cast<int32_t>(blockIdx.z);
  const int32_t seq = pair / num_kv_heads, h = pair % num_kv_heads;
  const int64_t group = b.num_q_heads / num_kv_heads;
  const int64_t q0 = b.q_start[seq], rows_total = (b.q_start[seq + 1] - q0) * group;
  const int64_t row = int64_t{tile} * kRows + r;
  if (row >= rows_total) return;  // uniform over the block
  const int32_t stride = kRows * (D + 2);
  const float* base = workspace + (int64_t{pair} * row_tiles + tile) * splits * stride + r * (D + 2);
  const int tid = static_cast<int>(threadIdx.x);
  float* mj = wts;
  float* lj = wts + splits;
  for (int32_t j = tid; j < splits; j += D) {
    mj[j] = base[j * stride + D];
    lj[j] = base[j * stride + D + 1];
  }
  prim::sync_block();
  float m = -INFINITY;
  for (int32_t j = 0; j < splits; ++j) m = fmaxf(m, mj[j]);
  prim::sync_block();  // every thread has read the maxima before they become weights
  float lsum = 0.0f;
  for (int32_t j = tid; j < splits; j += D) {
    const float f = mj[j] == -INFINITY ? 0.0f : prim::fast_exp(mj[j] - m);
    mj[j] = f;  // weight of split j
  }
  prim::sync_block();
  for (int32_t j = 0; j < splits; ++j) lsum += mj[j] * lj[j];
  // 32 loads in flight per round trip.
  float acc = 0.0f;
  for (int32_t j0 = 0; j0 < splits; j0 += 32) {
    float v[32];
#pragma unroll
    for (int u = 0; u < 32; ++u) v[u] = j0 + u < splits ? base[(j0 + u) * stride + tid] : 0.0f;
#pragma unroll
    for (int u = 0; u < 32; ++u) {
      if (j0 + u < splits) acc += mj[j0 + u] * v[u];
    }
  }
  out.at(q0 + row / group, h * group + row % group)[tid] = acc / lsum;
}

}  // namespace infergate::kernels::cuda::decode
