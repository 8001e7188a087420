// Block and slot bookkeeping for the paged KV cache, and the byte arithmetic of its pool.
#include "infergate/engine/block_manager.h"

#include <algorithm>
#include <limits>
#include <string>

#include "infergate/kernels/formats.h"

namespace infergate::runtime::engine {
namespace {

Status check_spec(const KvSpec& s) {
  auto bad = [](std::string field, int64_t v) {
    return invalid_argument("KV spec: " + field + " must be positive, got " + std::to_string(v))
        .with_detail("field", field);
  };
  if (s.num_layers <= 0) return bad("num_layers", s.num_layers);
  if (s.num_kv_heads <= 0) return bad("num_kv_heads", s.num_kv_heads);
  if (s.head_dim <= 0) return bad("head_dim", s.head_dim);
  if (s.block_tokens <= 0) return bad("block_tokens", s.block_tokens);
  if (auto kd = kernel_kv_dtype(s.dtype)) {
    kernels::Status ks = kernels::validate_kv_layout({*kd, s.block_tokens, s.num_kv_heads, s.head_dim});
    if (!ks.ok()) return invalid_argument("KV spec: " + ks.to_string());
  }
  if (s.latent && s.dtype == KvCacheDtype::kInt4Kivi) {
    return invalid_argument(
               "--kv-cache-dtype int4-kivi has no latent form (multi-head latent attention caches one row "
               "per "
               "token; int4 keeps per-token groups of 64)")
        .with_reason("UnsupportedCombination")
        .with_detail("kv_cache_dtype", "int4-kivi");
  }
  if (s.latent && s.num_kv_heads != 1)
    return invalid_argument("KV spec: a latent cache has one row per token");
  if (s.latent && (s.latent_rank <= 0 || s.latent_rank > s.head_dim)) {
    return invalid_argument("KV spec: a latent cache's latent_rank must be in [1, head_dim], got " +
                            std::to_string(s.latent_rank))
        .with_detail("field", "latent_rank");
  }
  return ok_status();
}

}  // namespace

int32_t kv_int4_group(const KvSpec& s) {
  auto kd = kernel_kv_dtype(s.dtype);
  if (!s.latent || !kd) return kernels::kKvInt4Group;
  return kernels::kv_latent_layout(*kd, s.block_tokens, s.latent_rank, s.head_dim - s.latent_rank).int4_group;
}

double KvBytes::bytes_per_token() const {
  return static_cast<double>(block_bytes) / static_cast<double>(kBlockTokens);
}

Result<KvBytes> kv_bytes(const KvSpec& s) {
  INFERGATE_RETURN_IF_ERROR(check_spec(s));
  KvBytes b;
  if (auto kd = kernel_kv_dtype(s.dtype)) {
    kernels::KvPageLayout l{*kd, s.block_tokens, s.num_kv_heads, s.head_dim};
    l.int4_group = kv_int4_group(s);
    b.page_bytes = s.latent ? kernels::kv_latent_page_bytes(l) : kernels::kv_page_bytes(l);
    b.staging_bytes = kernels::kv_staging_bytes(l) * s.num_layers;
  } else {
    // fp32 reference cache: K and V rows of fp32 (a latent cache: its one row), no scales.
    b.page_bytes = int64_t{s.latent ? 1 : 2} * s.num_kv_heads * s.block_tokens * s.head_dim * 4;
  }
  b.block_bytes = b.page_bytes * s.num_layers;
  return b;
}

int64_t blocks_for_tokens(int64_t tokens, int32_t block_tokens) {
  if (tokens <= 0 || block_tokens <= 0) return 0;
  return (tokens + block_tokens - 1) / block_tokens;
}

Result<int64_t> blocks_for_budget(const KvSpec& spec, int64_t budget_bytes, int32_t max_sequences) {
  INFERGATE_ASSIGN_OR_RETURN(KvBytes b, kv_bytes(spec));
  if (budget_bytes < 0 || max_sequences < 0) {
    return invalid_argument("KV budget and sequence count must not be negative");
  }
  const int64_t staging = b.staging_bytes * max_sequences;
  if (budget_bytes <= staging) return int64_t{0};
  return (budget_bytes - staging) / b.block_bytes;
}

Result<int64_t> kv_pool_bytes(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) {
  INFERGATE_ASSIGN_OR_RETURN(KvBytes b, kv_bytes(spec));
  if (num_blocks < 0 || max_sequences < 0) return invalid_argument("negative KV pool size");
  if (num_blocks > std::numeric_limits<int64_t>::max() / std::max<int64_t>(1, b.block_bytes)) {
    return invalid_argument("KV pool size overflows");
  }
  return num_blocks * b.block_bytes + b.staging_bytes * max_sequences;
}

Result<BlockManager> BlockManager::create(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) {
  INFERGATE_ASSIGN_OR_RETURN(KvBytes b, kv_bytes(spec));
  if (num_blocks <= 0 || num_blocks > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("KV pool: the number of blocks must be in 1..2^31-1, got " +
                            std::to_string(num_blocks))
        .with_reason("KvBudgetTooSmall");
  }
  if (max_sequences <= 0) {
    return invalid_argument("KV pool: max_sequences must be positive, got " + std::to_string(max_sequences));
  }
  BlockManager m;
  m.spec_ = spec;
  m.bytes_ = b;
  m.total_blocks_ = num_blocks;
  m.max_sequences_ = max_sequences;
  // Free lists are stacks; the lowest ids come out first.
  m.free_.resize(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i)
    m.free_[static_cast<size_t>(i)] = static_cast<int32_t>(num_blocks - 1 - i);
  m.free_slots_.resize(static_cast<size_t>(max_sequences));
  for (int32_t i = 0; i < max_sequences; ++i) m.free_slots_[static_cast<size_t>(i)] = max_sequences - 1 - i;
  return m;
}

Status BlockManager::add_sequence(SeqId id) {
  if (seqs_.count(id)) {
    return invalid_argument("sequence " + std::to_string(id) + " already holds a slot");
  }
  if (free_slots_.empty()) {
    return resource_exhausted("every one of the " + std::to_string(max_sequences_) +
                              " sequence slots is taken")
        .with_reason("NoSequenceSlot");
  }
  Seq s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  seqs_.emplace(id, std::move(s));
  return ok_status();
}

int64_t BlockManager::blocks_needed(SeqId id, int64_t tokens) const {
  const int64_t want = blocks_for_tokens(tokens, spec_.block_tokens);
  auto it = seqs_.find(id);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  return std::max<int64_t>(0, want - have);
}

Status BlockManager::reserve(SeqId id, int64_t tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return not_found("sequence " + std::to_string(id) + " holds no slot");
  const int64_t n = blocks_needed(id, tokens);
  if (!can_allocate(n)) {
    return resource_exhausted("KV cache full: " + std::to_string(n) + " blocks needed, " +
                              std::to_string(free_blocks()) + " free of " + std::to_string(total_blocks_))
        .with_reason("OutOfKvBlocks");
  }
  for (int64_t i = 0; i < n; ++i) {
    it->second.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return ok_status();
}

void BlockManager::release_blocks(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  auto& b = it->second.blocks;
  // Pushed in reverse so that a sequence that comes back gets the same blocks in the same order.
  for (auto r = b.rbegin(); r != b.rend(); ++r) free_.push_back(*r);
  b.clear();
}

void BlockManager::free_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  release_blocks(id);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
}

const std::vector<int32_t>& BlockManager::block_table(SeqId id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(id);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

int32_t BlockManager::slot(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.slot;
}

}  // namespace infergate::runtime::engine
