// The CUDA MLA ops: absorbed decode attention over latent pages (mla_decode.cuh), split across blocks
// when one wave of (sequence, head tile) blocks would leave the GPU idle, and merged by the decode
// merge kernel (attention_decode.cuh).
#include <string>

#include "../mla.h"
#include "attention_decode.cuh"
#include "common.cuh"
#include "mla_decode.cuh"
#include "tuning.h"

namespace infergate::kernels::cuda {
namespace {

// The value widths the merge kernel is instantiated for (DeepSeek-V3 / Kimi K2: 512); other widths run
// in one pass per (sequence, head tile).
bool merge_has(int32_t value_dim) {
  return value_dim == 64 || value_dim == 128 || value_dim == 256 || value_dim == 512;
}

Status launch_merge(const AttentionBatch& b, View3<float> out, const mla::MlaArgs& a, bool pdl,
                    Stream stream) {
  const dim3 grid(mla::kHeads, static_cast<unsigned>(a.row_tiles), static_cast<unsigned>(b.num_seqs));
  const size_t smem = static_cast<size_t>(decode::merge_smem_bytes(a.splits));
  const float* ws = a.workspace;
  const char* op = "mla_decode (merge)";
  switch (a.value_dim) {
    case 64:
      return launch_kernel(decode::attention_decode_merge_kernel<64>, grid, dim3(64), smem, stream, pdl, op,
                           b, 1, out, a.row_tiles, a.splits, ws);
    case 128:
      return launch_kernel(decode::attention_decode_merge_kernel<128>, grid, dim3(128), smem, stream, pdl, op,
                           b, 1, out, a.row_tiles, a.splits, ws);
    case 256:
      return launch_kernel(decode::attention_decode_merge_kernel<256>, grid, dim3(256), smem, stream, pdl, op,
                           b, 1, out, a.row_tiles, a.splits, ws);
    default:
      return launch_kernel(decode::attention_decode_merge_kernel<512>, grid, dim3(512), smem, stream, pdl, op,
                           b, 1, out, a.row_tiles, a.splits, ws);
  }
}

mla::MlaPlan plan_for(int32_t num_seqs, int32_t num_q_heads, int32_t value_dim, int32_t head_dim,
                      int32_t max_kv_len, int32_t split_tokens) {
  const size_t smem = static_cast<size_t>(mla::mla_smem_bytes(head_dim));
  const int per_sm =
      blocks_per_sm(reinterpret_cast<const void*>(mla::mla_decode_kernel<>), mla::kThreads, smem);
  const int64_t slots = int64_t{per_sm} * device_info().sm_count;
  return mla::plan_mla_decode(num_seqs, num_q_heads, value_dim, max_kv_len, split_tokens, slots,
                              merge_has(value_dim));
}

}  // namespace

size_t mla_decode_workspace_bytes(int32_t num_seqs, int32_t num_q_heads, int32_t value_dim, int32_t head_dim,
                                  int32_t max_kv_len) {
  if (num_seqs <= 0 || num_q_heads <= 0 || value_dim <= 0 || head_dim <= 0 || max_kv_len <= 0) return 0;
  return static_cast<size_t>(
      plan_for(num_seqs, num_q_heads, value_dim, head_dim, max_kv_len, 0).workspace_bytes);
}

Status mla_decode(const LatentCache& cache, const AttentionBatch& b, int32_t max_kv_len, View3<const float> q,
                  int32_t value_dim, View3<float> out, void* workspace, size_t workspace_bytes,
                  Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(
      validate_mla_attention(cache, b, q, value_dim, out, "mla_decode", /*host_arrays=*/false));
  const KvPageLayout& l = cache.layout;
  if (!mla::mla_dtype(l.dtype)) return invalid_argument("mla_decode: no latent form for this dtype");
  if (l.head_dim > mla::kMaxHeadDim || value_dim > mla::kMaxValueDim) {
    return unsupported("mla_decode: at most " + std::to_string(mla::kMaxHeadDim) + " values per row and " +
                       std::to_string(mla::kMaxValueDim) + " per value on the GPU");
  }
  if (b.num_seqs == 0 || q.dim0 == 0) return ok_status();
  // At most one query token per sequence: the per-sequence counts are device memory, so only their
  // sum is checked here.
  if (q.dim0 > b.num_seqs) {
    return invalid_argument("mla_decode: decode takes at most one query token per sequence (" +
                            std::to_string(q.dim0) + " for " + std::to_string(b.num_seqs) + " sequences)");
  }
  if (max_kv_len < 1) return invalid_argument("mla_decode: max_kv_len must be positive");
  if (b.num_seqs > 65535) return unsupported("mla_decode: more than 65535 sequences in one call");
  mla::MlaPlan p = plan_for(b.num_seqs, b.num_q_heads, value_dim, l.head_dim, max_kv_len, b.split_tokens);
  if (p.args.splits > 1 &&
      (workspace == nullptr || workspace_bytes < static_cast<size_t>(p.workspace_bytes))) {
    p = mla::plan_mla_decode(b.num_seqs, b.num_q_heads, value_dim, max_kv_len, 0, 0, false);  // one pass
  }
  p.args.workspace = static_cast<float*>(workspace);
  const dim3 grid(static_cast<unsigned>(p.args.splits), static_cast<unsigned>(p.args.row_tiles),
                  static_cast<unsigned>(b.num_seqs));
  const bool pdl = tuning().pdl;
  INFERGATE_K_RETURN_IF_ERROR(launch_kernel(mla::mla_decode_kernel<>, grid, dim3(mla::kThreads),
                                            static_cast<size_t>(mla::mla_smem_bytes(l.head_dim)), stream, pdl,
                                            "mla_decode", cache, b, q, out, p.args));
  if (p.args.splits == 1) return ok_status();
  return launch_merge(b, out, p.args, pdl, stream);
}

}  // namespace infergate::kernels::cuda
