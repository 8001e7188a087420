// The Engine: sequences run step by step over a Backend and a BlockManager. The server's scheduler
// (runtime/server) decides which sequences run in each step, admits by free blocks and slots, and
// preempts; the engine provides the mechanisms: add a sequence, step a chosen set (prefill chunks and
// decode tokens mixed), stream out tokens and text, finish on stop token / stop string / length,
// cancel, and preempt (free a sequence's KV but keep its tokens, so that a later step recomputes it
// and continues with identical output). generate() is the simple loop on top.
//
// Thread-safety: none; one thread drives an Engine (the server's scheduler thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/backend.h"
#include "infergate/engine/block_manager.h"
#include "infergate/engine/sampling.h"
#include "infergate/engine/types.h"

namespace infergate::runtime::model {
class Model;
}

namespace infergate::runtime::engine {

enum class FinishReason : uint8_t {
  kNone,        // still running
  kStopToken,   // an EOS or stop token was generated (it is part of the output, not of the text)
  kStopString,  // a stop string appeared in the text (the text ends before it)
  kLength,      // max_tokens generated, or the context is full
  kCancelled,   // cancel()
};
// OpenAI's words: "stop" (token or string), "length", "cancelled"; "" for kNone.
std::string_view finish_reason_name(FinishReason r);

enum class SequenceStatus : uint8_t {
  kWaiting,   // added, or preempted: no KV held; the next step (re)computes its tokens
  kRunning,   // holds a slot and KV blocks
  kFinished,  // done; its KV is freed; readable until release()
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // params.top_logprobs alternatives
};

// A sequence as the engine holds it.
struct SequenceState {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<GeneratedToken> output;
  // params.prompt_logprobs >= 0: prompt tokens 1, 2, ... (the first has no context) with their logprobs
  // given the tokens before them, filled in as the prefill computes them. Kept across a preemption (a
  // recompute does not produce them again).
  std::vector<GeneratedToken> prompt_logprobs;
  std::string text;         // the output decoded (up to a stop string, when one matched)
  size_t text_emitted = 0;  // bytes of `text` already handed out in updates
  int64_t computed = 0;     // tokens (prompt + output) whose K/V are in the cache
  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  int64_t preemptions = 0;
  // All tokens the model has seen or produced, in order: prompt then output.
  int64_t total_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
};

// What one step did for one sequence.
struct SequenceUpdate {
  SeqId id = 0;
  int64_t tokens_computed = 0;          // prompt/recompute tokens plus the decode token run this step
  std::optional<GeneratedToken> token;  // the token sampled this step (none mid-prefill)
  // Prompt logprobs computed this step, continuing SequenceState::prompt_logprobs (empty unless asked).
  std::vector<GeneratedToken> prompt_logprobs;
  std::string text;  // newly final text: whole UTF-8 characters, never a possible stop-string prefix
  FinishReason finish = FinishReason::kNone;
};

struct StepRequest {
  SeqId id = 0;
  // At most this many tokens of the sequence are computed in this step (chunked prefill); 0: all
  // pending. A sequence samples a token only in the step that computes its last pending token.
  int32_t max_tokens = 0;
};

struct StepResult {
  std::vector<SequenceUpdate> updates;  // one per request, in request order
  int64_t tokens_computed = 0;
};

struct EngineOptions {
  KvCacheDtype kv_dtype = KvCacheDtype::kF16;
  int64_t max_context = 0;      // 0: the model's max_position_embeddings; larger is refused
  int32_t max_sequences = 8;    // sequences holding KV at once (slots)
  int64_t num_blocks = 0;       // 0: max_sequences x blocks_for_tokens(max_context)
  int64_t kv_budget_bytes = 0;  // when > 0 (and num_blocks == 0): blocks_for_budget(budget)
};

// Facts about a loaded engine, for logs and metrics.
struct EngineInfo {
  std::string architecture;  // "LlamaForCausalLM", ...
  WeightFormat weight_format = WeightFormat::kF16;
  KvCacheDtype kv_dtype = KvCacheDtype::kF16;
  int64_t max_context = 0;
  int64_t weight_bytes = 0;
  int64_t kv_bytes = 0;
  std::vector<int32_t> eos_token_ids;
};

class Engine {
 public:
  // Refuses: max_context beyond the model's max_position_embeddings or its sliding window
  // (OutOfRange, "ContextTooLong"), a KV dtype the backend cannot run ("UnsupportedCombination"),
  // a budget too small for one sequence at max_context ("KvBudgetTooSmall").
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const model::Model> model,
                                                std::unique_ptr<Backend> backend,
                                                const EngineOptions& options);
  ~Engine();

  // A new engine over the same model and backend (weights are not reloaded) with a new KV pool;
  // `old` must hold no sequences with KV. For sizing the pool after the prompt is known.
  static Result<std::unique_ptr<Engine>> reconfigure(std::unique_ptr<Engine> old,
                                                     const EngineOptions& options);

  // Validates and registers a sequence (no KV is used until it is stepped). Refuses an empty prompt,
  // a token id outside the vocabulary, bad sampling parameters (InvalidArgument), and
  // prompt + max_tokens beyond max_context (OutOfRange, "ContextTooLong").
  Result<SeqId> add_sequence(std::vector<int32_t> prompt, const SamplingParams& params);

  // Admission helpers for the scheduler: the blocks step({id, max_tokens}) would allocate, and
  // whether it would need a free slot (a waiting sequence takes one when stepped).
  int64_t blocks_needed(SeqId id, int32_t max_tokens = 0) const;
  bool needs_slot(SeqId id) const;
  // Whether step({id, max_tokens}) fits right now (slot and blocks).
  bool can_step(SeqId id, int32_t max_tokens = 0) const;

  // Runs one forward over the requested sequences (each at most once; finished ones refused) and
  // samples where a sequence's pending tokens are done. Allocation is all-or-nothing: if the blocks
  // or slots for the whole step are not free, nothing runs (ResourceExhausted, "OutOfKvBlocks" /
  // "NoSequenceSlot"). A sequence that finishes releases its KV in the same step.
  Result<StepResult> step(std::span<const StepRequest> requests);

  // Frees the sequence's blocks and slot but keeps prompt, output, text and its generator state: it
  // becomes kWaiting and the next step recomputes it, continuing with the same output. No-op for a
  // waiting or finished sequence; NotFound for an unknown id.
  Status preempt(SeqId id);
  // Finishes the sequence with kCancelled and frees its KV at once. No-op when already finished.
  Status cancel(SeqId id);
  // Forgets a sequence (cancelling it first if needed).
  void release(SeqId id);

  const SequenceState* sequence(SeqId id) const;
  // Ids of every sequence not yet released, in the order added.
  std::vector<SeqId> sequences() const;

  // Teacher forcing: logits [tokens.size(), vocab] at every position of `tokens`, computed in chunks of
  // `chunk` tokens (0: one chunk), using a temporary sequence that is freed afterwards. Needs one free
  // slot and the blocks for tokens.size() tokens. For eval, perplexity and the quality helpers.
  Result<std::vector<float>> score(std::span<const int32_t> tokens, int32_t chunk = 0);

  const model::Model& model() const { return *model_; }
  std::shared_ptr<const model::Model> shared_model() const { return model_; }
  const BlockManager& blocks() const { return blocks_; }
  Backend& backend() { return *backend_; }
  const EngineInfo& info() const { return info_; }
  int64_t max_context() const { return info_.max_context; }
  int64_t vocab() const { return backend_->shape().vocab; }

  // The prompt's token ids as the model's tokenizer encodes text (with its BOS when it adds one).
  std::vector<int32_t> tokenize(std::string_view text) const;

 private:
  struct Seq;
  Engine(std::shared_ptr<const model::Model> model, std::unique_ptr<Backend> backend, BlockManager blocks,
         EngineInfo info);
  void finish(Seq& s, FinishReason r);
  void append_token(Seq& s, const SampledToken& t, SequenceUpdate* u);
  // Of a step computing `count` tokens of s: the first row and the number of rows whose logits give
  // prompt logprobs still owed ({0, 0}: none, the step needs no kAll logits).
  std::pair<int64_t, int64_t> prompt_rows(const Seq& s, int64_t count) const;

  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Backend> backend_;
  BlockManager blocks_;
  EngineInfo info_;
  SeqId next_id_ = 1;
  std::vector<std::unique_ptr<Seq>> seqs_;  // in order added
};

// ---- Loading ----------------------------------------------------------------------------------------

struct EngineConfig {
  std::filesystem::path model_dir;
  WeightFormat weight_format = WeightFormat::kF16;
  KvCacheDtype kv_dtype = KvCacheDtype::kF16;
  int64_t max_context = 0;  // 0: the model's
  int32_t max_sequences = 8;
  int64_t num_blocks = 0;
  int64_t kv_budget_bytes = 0;
  // Hash while loading: every file's SHA-256 is computed on the bytes the loader reads and compared
  // with this SHA256SUMS (path of the manifest; its directory must be the model directory's content).
  std::optional<std::filesystem::path> verified_manifest;
  SmoothKeys smooth_keys = SmoothKeys::kAuto;
  // "cpu", "cuda" or "auto" (device.h: auto picks CUDA when a GPU is present; cuda without one is
  // refused with reason "NoDevice").
  std::string device = "cpu";
  // GPUs the model is split over (CUDA only; 1 on the CPU, where anything else is refused with
  // reason "InvalidTensorParallel").
  int32_t tensor_parallel = 1;
  // CUDA only: decode steps replay captured CUDA graphs (CudaBackendOptions::cuda_graphs).
  bool cuda_graphs = true;
  int threads = 0;
};

struct LoadReport {
  double load_seconds = 0;  // opening the model + building the backend + allocating the KV pool
  bool verified = false;    // every file the loader read matched the manifest
  int64_t files_verified = 0;
  int64_t bytes_hashed = 0;
  double hash_seconds = 0;  // time the hasher spent (overlapping the reads)
};

struct LoadedEngine {
  std::unique_ptr<Engine> engine;
  LoadReport report;
};

// Opens the model (hashing while loading when a manifest is given: a mismatch refuses with
// DataLoss, reason "DigestMismatch", naming the file, expected and actual digests; a file the
// manifest does not list, "UnlistedFile"), builds the backend and allocates the KV pool.
Result<LoadedEngine> load_engine(const EngineConfig& config);

// ---- generate() -------------------------------------------------------------------------------------

struct GenerationResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<GeneratedToken> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  double prefill_seconds = 0;  // time to the first token
  double decode_seconds = 0;   // the remaining tokens
};

// Runs one sequence to completion (its prompt as one prefill, then one token per step). `on_text`,
// when given, receives each piece of final text as it is produced.
Result<GenerationResult> generate(Engine& engine, std::vector<int32_t> prompt, const SamplingParams& params,
                                  const std::function<void(std::string_view)>& on_text = {});

}  // namespace infergate::runtime::engine
