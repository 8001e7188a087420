// The paged KV cache's bookkeeping: fixed 16-token blocks, the exact bytes each one costs, how many a
// memory budget holds, and which blocks each sequence owns.
//
// A block is one page per layer: block b is page b of every layer's pool, so one block table serves
// all layers. Its bytes are num_layers x kernels::kv_page_bytes (K and V data, scales, 16-byte
// alignment: docs/quant-formats.md). int4-kivi also keeps one fp16 staging window per running
// sequence per layer (kernels::kv_staging_bytes); those are reserved per sequence slot.
// Every block is interchangeable with every other, so the pool never fragments: any free block
// satisfies any request, and freeing a sequence returns all of its blocks at once.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/types.h"

namespace infergate::runtime::engine {

inline constexpr int32_t kBlockTokens = 16;

// The shape of a model's KV cache.
struct KvSpec {
  KvCacheDtype dtype = KvCacheDtype::kF16;
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_tokens = kBlockTokens;
  // Multi-head latent attention: one row per token (num_kv_heads 1, head_dim = latent + rope width),
  // no V side (kernels::kv_latent_page_bytes); int4-kivi has no latent form.
  bool latent = false;
  // A latent cache's latent width (kv_lora_rank; the rest of head_dim is the rope key). It decides the
  // int4 grouping (kv_int4_group), so the planner and the engine must agree on it.
  int32_t latent_rank = 0;
};

// Values per (d, m) pair of an int4 page: kernels::kv_latent_layout's rule for a latent cache (128
// when latent_rank is a multiple of 128), else 64.
int32_t kv_int4_group(const KvSpec& spec);

// The one memory model for the KV cache (the capacity planner predicts these same numbers).
struct KvBytes {
  int64_t page_bytes = 0;     // one layer's page: kernels::kv_page_bytes (kF32: 2 x heads x 16 x dim x 4),
                              // or for a latent cache kv_latent_page_bytes (kF32: 16 x dim x 4)
  int64_t block_bytes = 0;    // page_bytes x num_layers: what one 16-token block costs
  int64_t staging_bytes = 0;  // per sequence slot, all layers (int4-kivi only; else 0)
  // block_bytes / block_tokens: the marginal cost of one more token of context.
  double bytes_per_token() const;
};
Result<KvBytes> kv_bytes(const KvSpec& spec);

// Blocks covering `tokens` tokens: ceil(tokens / block_tokens).
int64_t blocks_for_tokens(int64_t tokens, int32_t block_tokens = kBlockTokens);

// How many blocks fit in `budget_bytes` once `max_sequences` staging windows are reserved:
// floor((budget - max_sequences x staging_bytes) / block_bytes), 0 when the budget is too small.
Result<int64_t> blocks_for_budget(const KvSpec& spec, int64_t budget_bytes, int32_t max_sequences);

// The exact bytes a pool of `num_blocks` blocks and `max_sequences` staging windows occupies
// (what the backend allocates).
Result<int64_t> kv_pool_bytes(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences);

// Hands out blocks and staging slots to sequences.
//
// Guarantees: a block belongs to at most one sequence; free_blocks() + used blocks == total_blocks();
// allocation order is deterministic (last freed, first reused). Not thread-safe (the engine's
// owner drives it from one thread).
class BlockManager {
 public:
  // `max_sequences` sequence slots (each holds a staging window for int4-kivi).
  static Result<BlockManager> create(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences);

  const KvSpec& spec() const { return spec_; }
  const KvBytes& bytes() const { return bytes_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return total_blocks_ - free_blocks(); }
  int32_t max_sequences() const { return max_sequences_; }
  int32_t free_sequence_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  // True when n more blocks are free.
  bool can_allocate(int64_t n) const { return n <= free_blocks(); }

  // Registers a sequence and gives it a slot; refused (ResourceExhausted, "NoSequenceSlot") when
  // every slot is taken, or InvalidArgument when the id is already registered.
  Status add_sequence(SeqId id);
  bool has_sequence(SeqId id) const { return seqs_.count(id) != 0; }
  // Blocks `id` would need to hold `tokens` tokens in all, beyond those it has.
  int64_t blocks_needed(SeqId id, int64_t tokens) const;
  // Grows `id`'s block table to hold `tokens` tokens; all or nothing (ResourceExhausted,
  // "OutOfKvBlocks", when not enough blocks are free).
  Status reserve(SeqId id, int64_t tokens);
  // Returns every block of `id` to the pool but keeps its slot (preemption).
  void release_blocks(SeqId id);
  // Returns the blocks and the slot (the sequence is forgotten). No-op for an unknown id.
  void free_sequence(SeqId id);

  // The sequence's blocks in token order (empty for an unknown id).
  const std::vector<int32_t>& block_table(SeqId id) const;
  // The sequence's slot (staging window index), or -1 for an unknown id.
  int32_t slot(SeqId id) const;

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int32_t slot = -1;
  };
  KvSpec spec_;
  KvBytes bytes_;
  int64_t total_blocks_ = 0;
  int32_t max_sequences_ = 0;
  std::vector<int32_t> free_;
  std::vector<int32_t> free_slots_;
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace infergate::runtime::engine
