// Tensor parallelism's arithmetic (Megatron style), shared by the CUDA backend and its CPU tests:
// which heads, KV heads, MLP columns and vocabulary rows each of T ranks holds, and slicing a
// compressed weight (int8/int4 with scales and zero points, or fp16/bf16) by rows or by columns
// without ever expanding it.
//
//   column-parallel (split output rows): q/k/v by heads, gate/up by MLP columns, lm_head and the
//     embedding table by vocabulary; each rank computes its own slice of the output.
//   row-parallel (split input columns): o_proj by heads, down_proj by MLP columns; each rank
//     computes a partial sum over its columns, and an all-reduce adds them (the bias once, on rank 0).
//   replicated: norms, RoPE tables.
//
// Every function here is pure (no device, no I/O) and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/backend.h"
#include "infergate/kernels/formats.h"

namespace infergate::runtime::engine {

// [begin, end) along one dimension.
struct TpRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const TpRange&) const = default;
};

// What rank `rank` of `size` holds. Heads and MLP columns split evenly (validate_tp refuses a T that
// does not divide them). KV heads split evenly when T divides them; when T is a multiple of them
// (more GPUs than KV heads, as vLLM allows) every rank holds one KV head, the one its query heads
// read, so T / KV-heads ranks hold copies of each (their k_proj / v_proj rows and their KV cache).
// The vocabulary splits in ceil(vocab / T) rows, the last rank taking the remainder.
struct TpShard {
  int32_t rank = 0;
  int32_t size = 1;
  TpRange heads;     // query heads
  TpRange kv_heads;  // KV heads
  TpRange q_rows;    // rows of q_proj, columns of o_proj: heads x head_dim
  TpRange kv_rows;   // rows of k_proj / v_proj: kv_heads x head_dim
  TpRange mlp;       // rows of gate/up, columns of down: the intermediate size
  TpRange vocab;     // rows of lm_head and of the embedding table
};

// Refuses (InvalidArgument, reason "InvalidTensorParallel", detail "tensor_parallel") a T < 1, one
// that does not divide the query heads or the intermediate size, or one that neither divides nor is
// a multiple of the KV heads.
Status validate_tp(const ModelShape& shape, int64_t intermediate, int32_t tp);
Result<TpShard> tp_shard(const ModelShape& shape, int64_t intermediate, int32_t tp, int32_t rank);

enum class TpSplit : uint8_t { kRows, kCols };

// A weight slice in host memory it owns; `view` points into the vectors (which keep their buffers
// when the HostWeight is moved).
struct HostWeight {
  kernels::WeightView view;
  std::vector<uint8_t> data, scales, zeros;
};

// Rows [r.begin, r.end) (kRows) or columns [r.begin, r.end) (kCols) of `w`, in the same format and
// scale dtype, bit for bit. Rows: any range. Columns: int8 keeps each row's scale; int4 needs the
// range on group boundaries (begin a multiple of the group size, end one too or the last column) so
// that every slice keeps whole groups, and an even begin (two codes per byte). Refused with
// InvalidArgument (reason "InvalidTensorParallel") naming the numbers otherwise.
Result<HostWeight> slice_weight(const kernels::WeightView& w, TpSplit split, TpRange r);

}  // namespace infergate::runtime::engine
