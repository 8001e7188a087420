// The launchers of CUDA paged attention: decode (max_q_len == 1) with f16 / bf16 / fp8 / int8 / int4
// pages of a multiple of 16 tokens on the streaming kernel of attention_decode.cuh, everything else on
// the general kernels of attention_prefill.cuh; every launch through launch_kernel.
#include <algorithm>

#include "../validate.h"
#include "attention_decode.cuh"
#include "attention_prefill.cuh"
#include "common.cuh"
#include "tuning.h"

namespace infergate::kernels::cuda {
namespace {

using prefill::kRows;
using prefill::kSimpleMaxDimPerLane;
using prefill::kWarps;

template <KvDtype DT, int D>
Status launch_mma(const KvCache& cache, const AttentionBatch& b, View3<const float> q, View3<float> out,
                  int32_t row_tiles, int32_t splits, int32_t split_tokens, float* ws, int32_t num_seqs,
                  Stream stream) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(num_seqs * cache.layout.num_kv_heads));
  INFERGATE_K_RETURN_IF_ERROR(launch_kernel(prefill::attention_mma_kernel<DT, D>, grid, dim3(kWarps * 32),
                                            sizeof(prefill::MmaShared<D>), stream, false, "attention", cache,
                                            b, q, out, row_tiles, splits, split_tokens, ws));
  if (splits > 1) {
    const dim3 mgrid(1, static_cast<unsigned>(row_tiles),
                     static_cast<unsigned>(num_seqs * cache.layout.num_kv_heads));
    return launch_kernel(prefill::attention_merge_kernel<>, mgrid, dim3(256), 0, stream, false,
                         "attention (merge)", b, cache.layout.num_kv_heads, D, out, row_tiles, splits,
                         static_cast<const float*>(ws));
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
  return launch_kernel(prefill::attention_simple_kernel<>, dim3(grid_for(rows, 8)), dim3(256), 0, stream,
                       false, "attention (simple)", cache, b, q, out, q.dim0);
}

}  // namespace infergate::kernels::cuda
