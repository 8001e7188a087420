// Parameter structs shared by the reference, CPU and CUDA versions of the ops: the attention batch
// description and the RoPE configuration.
#pragma once

#include <cstdint>

namespace infergate::kernels {

// A batch of sequences for attention. Sequence s has q_len = q_start[s+1] - q_start[s] new query
// tokens (rows q_start[s] .. q_start[s+1]-1 of q), already appended to the cache, and kv_len[s]
// tokens in the cache in all (q_len <= kv_len). Decode is q_len == 1; prefill and chunked prefill
// are q_len > 1. Its pages, in order, are block_table[s * max_pages_per_seq + i] for
// i < ceil(kv_len / page_size). All arrays live where the op runs (host or device).
struct AttentionBatch {
  int32_t num_seqs = 0;
  int32_t num_q_heads = 0;
  float scale = 0.0f;                    // usually 1 / sqrt(head_dim)
  const int32_t* q_start = nullptr;      // [num_seqs + 1], q_start[0] == 0
  const int32_t* kv_len = nullptr;       // [num_seqs]
  const int32_t* block_table = nullptr;  // [num_seqs, max_pages_per_seq]
  int32_t max_pages_per_seq = 0;
  const int32_t* staging_ids = nullptr;  // [num_seqs], kInt4Kivi only: each sequence's window
  // Work partitioning (optimised versions only): at most this many KV tokens per work unit, so one
  // long sequence spreads over many threads / thread blocks (flash-decoding). 0 chooses by size.
  int32_t split_tokens = 0;
};

// Rotary position embedding.
//  kHalfSplit (Llama, Qwen2, Mistral): the rotated part is x[0:r]; pairs are (x[i], x[i + r/2]):
//     x[i]       <- x[i] cos - x[i+r/2] sin,   x[i+r/2] <- x[i+r/2] cos + x[i] sin,   i < r/2
//  kInterleaved (GLM, GLM-4): pairs are (x[2i], x[2i+1]):
//     x[2i]      <- x[2i] cos - x[2i+1] sin,   x[2i+1]  <- x[2i+1] cos + x[2i] sin,   i < r/2
// with angle_i = position * inv_freq[i] and r = rotary_dim (head_dim * partial_rotary_factor;
// GLM-4 uses half of head_dim). Dimensions r..head_dim pass through unchanged.
enum class RopeStyle : uint8_t { kHalfSplit = 0, kInterleaved };

struct Llama3RopeScaling {
  bool enabled = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

// YaRN (DeepSeek-V3, Kimi K2), as transformers' _compute_yarn_parameters: frequencies blend from
// extrapolated (unchanged) to interpolated (divided by factor) across the dimensions whose number of
// rotations over original_max_position lies between beta_fast and beta_slow. Its attention factor
// (the cos/sin multiplier) must be 1, as it is when mscale == mscale_all_dim; the softmax scale's
// mscale is the caller's.
struct YarnRopeScaling {
  bool enabled = false;
  float factor = 1.0f;
  int32_t original_max_position = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

struct RopeConfig {
  RopeStyle style = RopeStyle::kHalfSplit;
  int32_t head_dim = 0;
  int32_t rotary_dim = 0;  // even, <= head_dim
  float theta = 10000.0f;  // rope_theta
  Llama3RopeScaling llama3;
  YarnRopeScaling yarn;
};

}  // namespace infergate::kernels
