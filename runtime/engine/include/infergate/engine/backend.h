// The backend interface: where the weights live and the forward pass runs. CpuBackend (here, over
// kernels/ CPU ops) and CudaBackend (runtime/cuda) implement it. A backend
//   - holds the weights in their compressed form (int8/int4 with scales, never expanded to fp16 for
//     the whole model), uploaded once;
//   - owns the paged KV pool in the chosen dtype, sized in blocks by the engine (block_manager.h);
//   - runs one forward step over a batch of sequences, each with its new tokens (a prefill chunk or a
//     single decode token, mixed freely), their positions and block table, and returns logits only
//     where asked. Sampling happens on the host (sampling.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/block_manager.h"
#include "infergate/engine/types.h"

namespace infergate::runtime::model {
class Model;
}

namespace infergate::runtime::engine {

// Which logits a sequence of the batch wants back.
enum class LogitsWanted : uint8_t {
  kNone,  // none (a prefill chunk that does not end the prompt)
  kLast,  // the last new token's (decode, or the end of the prompt)
  kAll,   // every new token's (evaluation, perplexity, teacher forcing)
};

// One sequence's part of a forward step. Spans point at memory the caller keeps alive for the call.
struct SequenceInput {
  std::span<const int32_t> tokens;       // new tokens, >= 1
  int32_t start_position = 0;            // position of tokens[0] == tokens already in the cache
  std::span<const int32_t> block_table;  // >= ceil((start_position + tokens.size()) / 16) blocks
  int32_t slot = 0;                      // the sequence's slot (int4-kivi staging window)
  LogitsWanted logits = LogitsWanted::kLast;
};

struct ForwardOutput {
  // Rows of logits, [rows, vocab] fp32: the wanted rows of every sequence in batch order.
  std::vector<float> logits;
  int64_t vocab = 0;
  // row_start[i] is sequence i's first row, row_start[size] == rows (a sequence with kNone has none).
  std::vector<int64_t> row_start;
  const float* row(int64_t r) const { return logits.data() + r * vocab; }
};

// The model dimensions the engine needs.
struct ModelShape {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t max_position = 0;  // max_position_embeddings
  // Multi-head latent attention (DeepSeek-V3, Kimi K2): the cache holds one row per token, so
  // num_kv_heads is 1 and head_dim is the row's width (kv_lora_rank + qk_rope_head_dim).
  bool latent_kv = false;
  int32_t latent_rank = 0;  // kv_lora_rank when latent_kv
};

// Guarantees: forward() either writes every K/V of its tokens into the pool and fills `out`, or
// returns an error leaving the pool's other blocks untouched. Tokens already in the cache are never
// rewritten. Not thread-safe: one forward at a time.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda"
  virtual const ModelShape& shape() const = 0;
  virtual WeightFormat weight_format() const = 0;
  // Bytes the weights occupy as held by the backend (compressed data, scales, zeros, norms,
  // embeddings, lm_head), whether owned or mapped from the checkpoint.
  virtual int64_t weight_bytes() const = 0;

  // Allocates the KV pool: `num_blocks` blocks and `max_sequences` slots of `spec` (its dtype must be
  // one this backend runs: otherwise Unimplemented, reason "UnsupportedCombination"). Replaces any
  // earlier pool.
  virtual Status allocate_kv(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) = 0;
  // Bytes of the KV pool as allocated (kv_pool_bytes of the same arguments).
  virtual int64_t kv_bytes() const = 0;

  // One step over a batch. Errors: InvalidArgument for a malformed batch (token id outside the
  // vocabulary, a block table too short, a position past max_position), or the device's error.
  virtual Status forward(std::span<const SequenceInput> batch, ForwardOutput* out) = 0;
};

struct CpuBackendOptions {
  WeightFormat weight_format = WeightFormat::kF16;
  int threads = 0;  // 0: the kernels' default (INFERGATE_KERNELS_THREADS or all cores)
  // Run the kernels' scalar references (ref.h) instead of the optimised ops: a second code path for
  // the quality noise floor and for checking the optimised path; slow.
  bool reference_ops = false;
  // Key smoothing (as QServe's SmoothAttention, but data-free): key channels whose expected magnitude
  // (from k_proj's rows and the input norm) exceeds their head's median by 2^n are scaled down by 2^n
  // and the matching query channels up by 2^n, folded into q_proj/k_proj once at load. q.k is unchanged
  // (powers of two, whole RoPE pairs), so fp16/bf16 caches give the same scores; caches that share one
  // scale across a key's channels (int8, int4 per token, fp8 per head) stop losing the ordinary
  // channels to a few outliers. load_engine turns it on for int8 and fp8 KV (SmoothKeys::kAuto).
  bool smooth_keys = false;
};

// A CPU backend over `model` (which must outlive it: mapped weights are used in place). Refuses
// (reason "WeightFormatMismatch") a format the checkpoint cannot be served in: int8/int4 need a
// checkpoint quantized to that format, fp16/bf16/fp32 a dense one (converted at load when its float
// dtype differs); unknown architectures ("UnsupportedArchitecture").
Result<std::unique_ptr<Backend>> make_cpu_backend(std::shared_ptr<const model::Model> model,
                                                  const CpuBackendOptions& options);

}  // namespace infergate::runtime::engine
