// The Engine: sequences, steps, sampling, streaming text, stop conditions, preemption; load_engine and
// generate().
#include "infergate/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "infergate/common/log.h"
#include "infergate/engine/cuda_backend.h"
#include "infergate/engine/device.h"
#include "infergate/engine/verified_load.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::engine {
namespace m = infergate::runtime::model;

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStopToken:
    case FinishReason::kStopString: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "";
}

struct Engine::Seq {
  SequenceState state;
  std::vector<int32_t> tokens;  // prompt then output
  Rng rng{0};
  std::string raw;  // every output byte decoded so far
};

namespace {

// Bytes at the end of s that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

Engine::Engine(std::shared_ptr<const m::Model> model, std::unique_ptr<Backend> backend, BlockManager blocks,
               EngineInfo info)
    : model_(std::move(model)),
      backend_(std::move(backend)),
      blocks_(std::move(blocks)),
      info_(std::move(info)) {}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const m::Model> model,
                                               std::unique_ptr<Backend> backend, const EngineOptions& o) {
  if (!model || !backend) return invalid_argument("Engine::create: model and backend are required");
  const m::ModelConfig& c = model->config();
  const ModelShape& shape = backend->shape();
  EngineInfo info;
  info.architecture = std::string(m::architecture_name(c.architecture));
  info.weight_format = backend->weight_format();
  info.kv_dtype = o.kv_dtype;
  info.max_context = o.max_context > 0 ? o.max_context : shape.max_position;
  if (o.max_context < 0) return invalid_argument("max context length must be positive");
  if (info.max_context > shape.max_position) {
    return out_of_range("max context length " + std::to_string(info.max_context) +
                        " is longer than the model supports (max_position_embeddings " +
                        std::to_string(shape.max_position) + ")")
        .with_reason("ContextTooLong")
        .with_detail("max_context_length", std::to_string(info.max_context));
  }
  if (c.sliding_window && info.max_context > *c.sliding_window) {
    return out_of_range(
               "max context length " + std::to_string(info.max_context) + " is longer than the model's " +
               "sliding window (" + std::to_string(*c.sliding_window) +
               "); the engine runs full attention only, which equals sliding-window attention up to the " +
               "window")
        .with_reason("ContextTooLong")
        .with_detail("max_context_length", std::to_string(info.max_context));
  }
  if (o.max_sequences <= 0) return invalid_argument("max sequences must be positive");
  KvSpec spec{o.kv_dtype,   shape.num_layers, shape.num_kv_heads, shape.head_dim,
              kBlockTokens, shape.latent_kv,  shape.latent_rank};
  int64_t num_blocks = o.num_blocks;
  if (num_blocks <= 0 && o.kv_budget_bytes > 0) {
    INFERGATE_ASSIGN_OR_RETURN(num_blocks, blocks_for_budget(spec, o.kv_budget_bytes, o.max_sequences));
    if (num_blocks < blocks_for_tokens(info.max_context)) {
      return resource_exhausted("a KV budget of " + std::to_string(o.kv_budget_bytes) + " bytes holds " +
                                std::to_string(num_blocks) + " blocks, fewer than one sequence of " +
                                std::to_string(info.max_context) + " tokens needs")
          .with_reason("KvBudgetTooSmall");
    }
  }
  if (num_blocks <= 0) num_blocks = int64_t{o.max_sequences} * blocks_for_tokens(info.max_context);
  INFERGATE_ASSIGN_OR_RETURN(BlockManager blocks, BlockManager::create(spec, num_blocks, o.max_sequences));
  INFERGATE_RETURN_IF_ERROR(backend->allocate_kv(spec, num_blocks, o.max_sequences));
  info.weight_bytes = backend->weight_bytes();
  info.kv_bytes = backend->kv_bytes();
  std::vector<int64_t> eos = model->generation_config().eos_token_ids;
  if (eos.empty()) eos = c.eos_token_ids;
  for (int64_t e : eos) info.eos_token_ids.push_back(static_cast<int32_t>(e));
  return std::unique_ptr<Engine>(
      new Engine(std::move(model), std::move(backend), std::move(blocks), std::move(info)));
}

Result<std::unique_ptr<Engine>> Engine::reconfigure(std::unique_ptr<Engine> old,
                                                    const EngineOptions& options) {
  if (!old) return invalid_argument("reconfigure: no engine");
  if (old->blocks_.used_blocks() > 0) {
    return failed_precondition("reconfigure: sequences still hold KV blocks");
  }
  return create(std::move(old->model_), std::move(old->backend_), options);
}

std::vector<int32_t> Engine::tokenize(std::string_view text) const {
  return model_->tokenizer().encode(text);
}

Result<SeqId> Engine::add_sequence(std::vector<int32_t> prompt, const SamplingParams& params) {
  INFERGATE_RETURN_IF_ERROR(validate_sampling(params));
  if (prompt.empty()) return invalid_argument("the prompt has no tokens").with_reason("EmptyPrompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab()) {
      return invalid_argument("prompt token " + std::to_string(i) + " has id " + std::to_string(prompt[i]) +
                              ", outside the vocabulary of " + std::to_string(vocab()))
          .with_reason("TokenOutOfRange");
    }
  }
  const int64_t need = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (need > info_.max_context) {
    return out_of_range("prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                        std::to_string(params.max_tokens) + ") is longer than the context of " +
                        std::to_string(info_.max_context) + " tokens")
        .with_reason("ContextTooLong");
  }
  auto s = std::make_unique<Seq>();
  s->state.id = next_id_++;
  s->state.prompt = prompt;
  s->state.params = params;
  s->tokens = std::move(prompt);
  s->rng = Rng(params.seed);
  const SeqId id = s->state.id;
  seqs_.push_back(std::move(s));
  return id;
}

namespace {
template <class V>
auto find_seq(V& seqs, SeqId id) -> decltype(seqs.front().get()) {
  auto it =
      std::lower_bound(seqs.begin(), seqs.end(), id, [](const auto& s, SeqId v) { return s->state.id < v; });
  return it != seqs.end() && (*it)->state.id == id ? it->get() : nullptr;
}
}  // namespace

const SequenceState* Engine::sequence(SeqId id) const {
  const Seq* s = find_seq(seqs_, id);
  return s ? &s->state : nullptr;
}

std::vector<SeqId> Engine::sequences() const {
  std::vector<SeqId> out;
  for (const auto& s : seqs_) out.push_back(s->state.id);
  return out;
}

int64_t Engine::blocks_needed(SeqId id, int32_t max_tokens) const {
  const Seq* s = find_seq(seqs_, id);
  if (!s || s->state.status == SequenceStatus::kFinished) return 0;
  const int64_t pending = s->state.total_tokens() - s->state.computed;
  const int64_t n = max_tokens > 0 ? std::min<int64_t>(max_tokens, pending) : pending;
  return blocks_.blocks_needed(id, s->state.computed + n);
}

bool Engine::needs_slot(SeqId id) const {
  const Seq* s = find_seq(seqs_, id);
  return s && s->state.status == SequenceStatus::kWaiting;
}

bool Engine::can_step(SeqId id, int32_t max_tokens) const {
  if (needs_slot(id) && blocks_.free_sequence_slots() == 0) return false;
  return blocks_.can_allocate(blocks_needed(id, max_tokens));
}

std::pair<int64_t, int64_t> Engine::prompt_rows(const Seq& s, int64_t count) const {
  // Rows j of a chunk starting at c = computed predict position c + j + 1. Prompt logprobs still owed:
  // positions done + 1 .. P - 1 (done = how many are already known, P = the prompt's length).
  if (s.state.params.prompt_logprobs < 0) return {0, 0};
  const int64_t c = s.state.computed;
  const int64_t done = static_cast<int64_t>(s.state.prompt_logprobs.size());
  const int64_t p = static_cast<int64_t>(s.state.prompt.size());
  const int64_t first = std::max<int64_t>(0, done - c);
  const int64_t end = std::min<int64_t>(count, p - 1 - c);  // rows [first, end)
  // Positions are computed in order, so nothing owed is ever skipped (done >= c).
  if (end <= first || done < c) return {0, 0};
  return {first, end - first};
}

void Engine::finish(Seq& s, FinishReason r) {
  s.state.finish = r;
  s.state.status = SequenceStatus::kFinished;
  blocks_.free_sequence(s.state.id);
}

void Engine::append_token(Seq& s, const SampledToken& t, SequenceUpdate* u) {
  GeneratedToken g{t.token, t.logprob, t.top};
  s.state.output.push_back(g);
  s.tokens.push_back(t.token);
  u->token = g;
  const SamplingParams& p = s.state.params;
  const auto& eos = info_.eos_token_ids;
  const bool stop_token =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end() ||
      (!p.ignore_eos && std::find(eos.begin(), eos.end(), t.token) != eos.end());
  const m::Tokenizer& tok = model_->tokenizer();
  if (!stop_token && !tok.is_special(t.token)) s.raw.append(tok.token_bytes(t.token));

  size_t final_len = s.raw.size();
  FinishReason finish_now = FinishReason::kNone;
  // The earliest stop string in the text not yet emitted (it may begin inside held-back bytes).
  size_t cut = std::string::npos;
  size_t longest = 0;
  for (const auto& stop : p.stop_strings) longest = std::max(longest, stop.size());
  if (!p.stop_strings.empty()) {
    const size_t from = s.state.text_emitted;
    for (const auto& stop : p.stop_strings) {
      const size_t at = s.raw.find(stop, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
  }
  if (cut != std::string::npos) {
    final_len = cut;
    finish_now = FinishReason::kStopString;
  } else if (stop_token) {
    finish_now = FinishReason::kStopToken;
  } else if (static_cast<int64_t>(s.state.output.size()) >= p.max_tokens ||
             s.state.total_tokens() >= info_.max_context) {
    finish_now = FinishReason::kLength;
  }
  if (finish_now == FinishReason::kNone) {
    // Hold back an incomplete UTF-8 character and any suffix that could start a stop string.
    final_len -= incomplete_utf8_tail(s.raw);
    size_t hold = 0;
    for (const auto& stop : p.stop_strings) {
      for (size_t k = std::min(stop.size() - 1, final_len); k > hold; --k) {
        if (std::string_view(s.raw).substr(final_len - k, k) == std::string_view(stop).substr(0, k)) {
          hold = k;
          break;
        }
      }
    }
    final_len -= hold;
  }
  if (final_len > s.state.text_emitted) {
    u->text = s.raw.substr(s.state.text_emitted, final_len - s.state.text_emitted);
    s.state.text += u->text;
    s.state.text_emitted = final_len;
  }
  if (finish_now != FinishReason::kNone) {
    finish(s, finish_now);
    u->finish = finish_now;
  }
}

Result<StepResult> Engine::step(std::span<const StepRequest> requests) {
  if (requests.empty()) return StepResult{};
  std::vector<Seq*> seqs;
  std::vector<int64_t> counts;
  std::set<SeqId> seen;
  int32_t slots_needed = 0;
  int64_t blocks_needed_total = 0;
  for (const StepRequest& r : requests) {
    Seq* s = find_seq(seqs_, r.id);
    if (!s) return not_found("step: no sequence " + std::to_string(r.id));
    if (!seen.insert(r.id).second)
      return invalid_argument("step: sequence " + std::to_string(r.id) + " requested twice");
    if (s->state.status == SequenceStatus::kFinished) {
      return failed_precondition("step: sequence " + std::to_string(r.id) + " has finished");
    }
    if (r.max_tokens < 0) return invalid_argument("step: negative max_tokens");
    const int64_t pending = s->state.total_tokens() - s->state.computed;
    const int64_t n = r.max_tokens > 0 ? std::min<int64_t>(r.max_tokens, pending) : pending;
    if (s->state.status == SequenceStatus::kWaiting) ++slots_needed;
    blocks_needed_total += blocks_.blocks_needed(r.id, s->state.computed + n);
    seqs.push_back(s);
    counts.push_back(n);
  }
  if (slots_needed > blocks_.free_sequence_slots()) {
    return resource_exhausted("step needs " + std::to_string(slots_needed) + " sequence slots, " +
                              std::to_string(blocks_.free_sequence_slots()) + " are free")
        .with_reason("NoSequenceSlot");
  }
  if (!blocks_.can_allocate(blocks_needed_total)) {
    return resource_exhausted("step needs " + std::to_string(blocks_needed_total) + " KV blocks, " +
                              std::to_string(blocks_.free_blocks()) + " are free")
        .with_reason("OutOfKvBlocks");
  }
  std::vector<SequenceInput> batch(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    if (s.state.status == SequenceStatus::kWaiting) {
      INFERGATE_RETURN_IF_ERROR(blocks_.add_sequence(s.state.id));
      s.state.status = SequenceStatus::kRunning;
    }
    INFERGATE_RETURN_IF_ERROR(blocks_.reserve(s.state.id, s.state.computed + counts[i]));
    SequenceInput& in = batch[i];
    in.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.state.computed),
                                                           static_cast<size_t>(counts[i]));
    in.start_position = static_cast<int32_t>(s.state.computed);
    in.block_table = blocks_.block_table(s.state.id);
    in.slot = blocks_.slot(s.state.id);
    const bool last = s.state.computed + counts[i] == s.state.total_tokens();
    in.logits = last ? LogitsWanted::kLast : LogitsWanted::kNone;
    if (prompt_rows(s, counts[i]).second > 0) in.logits = LogitsWanted::kAll;
  }
  ForwardOutput out;
  INFERGATE_RETURN_IF_ERROR(backend_->forward(batch, &out));
  StepResult result;
  result.updates.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    SequenceUpdate& u = result.updates[i];
    u.id = s.state.id;
    u.tokens_computed = counts[i];
    result.tokens_computed += counts[i];
    if (batch[i].logits == LogitsWanted::kAll) {
      // Row j predicts the token after position computed + j: a prompt token's logprob.
      const auto [first, rows] = prompt_rows(s, counts[i]);
      const int32_t k = s.state.params.prompt_logprobs;
      for (int64_t j = first; j < first + rows; ++j) {
        const float* row = out.row(out.row_start[i] + j);
        const int32_t next = s.tokens[static_cast<size_t>(s.state.computed + j + 1)];
        SampledToken t = score_token(std::span<const float>(row, static_cast<size_t>(out.vocab)), next, k);
        GeneratedToken g{t.token, t.logprob, std::move(t.top)};
        s.state.prompt_logprobs.push_back(g);
        u.prompt_logprobs.push_back(std::move(g));
      }
    }
    const bool last = s.state.computed + counts[i] == s.state.total_tokens();
    s.state.computed += counts[i];
    if (!last) continue;
    if (static_cast<int64_t>(s.state.output.size()) >= s.state.params.max_tokens) {
      finish(s, FinishReason::kLength);  // max_tokens == 0: the prompt only
      u.finish = FinishReason::kLength;
      continue;
    }
    // The sampling row: the step's only row, or the last of its kAll rows.
    const int64_t last_row = out.row_start[i] + (batch[i].logits == LogitsWanted::kAll ? counts[i] - 1 : 0);
    const float* row = out.row(last_row);
    SampledToken t =
        sample_token(std::span<const float>(row, static_cast<size_t>(out.vocab)), s.state.params, s.rng);
    append_token(s, t, &u);
  }
  return result;
}

Status Engine::preempt(SeqId id) {
  Seq* s = find_seq(seqs_, id);
  if (!s) return not_found("preempt: no sequence " + std::to_string(id));
  if (s->state.status != SequenceStatus::kRunning) return ok_status();
  blocks_.free_sequence(id);
  s->state.computed = 0;
  s->state.status = SequenceStatus::kWaiting;
  ++s->state.preemptions;
  return ok_status();
}

Status Engine::cancel(SeqId id) {
  Seq* s = find_seq(seqs_, id);
  if (!s) return not_found("cancel: no sequence " + std::to_string(id));
  if (s->state.status != SequenceStatus::kFinished) finish(*s, FinishReason::kCancelled);
  return ok_status();
}

void Engine::release(SeqId id) {
  auto it = std::lower_bound(seqs_.begin(), seqs_.end(), id,
                             [](const auto& s, SeqId v) { return s->state.id < v; });
  if (it == seqs_.end() || (*it)->state.id != id) return;
  blocks_.free_sequence(id);
  seqs_.erase(it);
}

Result<std::vector<float>> Engine::score(std::span<const int32_t> tokens, int32_t chunk) {
  if (tokens.empty()) return invalid_argument("score: no tokens");
  if (static_cast<int64_t>(tokens.size()) > info_.max_context) {
    return out_of_range("score: " + std::to_string(tokens.size()) +
                        " tokens are longer than the context of " + std::to_string(info_.max_context))
        .with_reason("ContextTooLong");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab())
      return invalid_argument("score: token id " + std::to_string(t) + " outside the vocabulary");
  }
  const SeqId id = next_id_++;
  INFERGATE_RETURN_IF_ERROR(blocks_.add_sequence(id));
  struct Free {
    BlockManager& b;
    SeqId id;
    ~Free() { b.free_sequence(id); }
  } guard{blocks_, id};
  INFERGATE_RETURN_IF_ERROR(blocks_.reserve(id, static_cast<int64_t>(tokens.size())));
  const size_t n = tokens.size(), step = chunk > 0 ? static_cast<size_t>(chunk) : n;
  const size_t v = static_cast<size_t>(vocab());
  std::vector<float> logits(n * v);
  for (size_t at = 0; at < n; at += step) {
    const size_t len = std::min(step, n - at);
    SequenceInput in;
    in.tokens = tokens.subspan(at, len);
    in.start_position = static_cast<int32_t>(at);
    in.block_table = blocks_.block_table(id);
    in.slot = blocks_.slot(id);
    in.logits = LogitsWanted::kAll;
    ForwardOutput out;
    INFERGATE_RETURN_IF_ERROR(backend_->forward(std::span<const SequenceInput>(&in, 1), &out));
    std::copy(out.logits.begin(), out.logits.end(), logits.begin() + static_cast<std::ptrdiff_t>(at * v));
  }
  return logits;
}

// ---- load_engine ----

Result<LoadedEngine> load_engine(const EngineConfig& config) {
  const auto t0 = std::chrono::steady_clock::now();
  INFERGATE_ASSIGN_OR_RETURN(const Device device, resolve_device(config.device));
  if (device == Device::kCpu && config.tensor_parallel != 1) {
    return invalid_argument("--tensor-parallel " + std::to_string(config.tensor_parallel) +
                            " needs --device cuda (the CPU backend runs on one host)")
        .with_reason("InvalidTensorParallel");
  }
  std::optional<ManifestHasher> hasher;
  if (config.verified_manifest) {
    INFERGATE_ASSIGN_OR_RETURN(ManifestHasher h, ManifestHasher::from_file(*config.verified_manifest));
    hasher.emplace(std::move(h));
  }
  m::ModelOptions mo;
  mo.hasher = hasher ? &*hasher : nullptr;
  auto opened = m::Model::open(config.model_dir, mo);
  if (!opened.ok()) return std::move(opened).error().context("loading " + config.model_dir.string());
  auto model = std::make_shared<const m::Model>(std::move(*opened));
  std::unique_ptr<Backend> backend;
  if (device == Device::kCuda) {
    CudaBackendOptions co;
    co.weight_format = config.weight_format;
    co.tensor_parallel = config.tensor_parallel;
    co.cuda_graphs = config.cuda_graphs;
    co.smooth_keys = smooth_keys_enabled(config.smooth_keys, config.kv_dtype);
    INFERGATE_ASSIGN_OR_RETURN(backend, make_cuda_backend(model, co));
  } else {
    CpuBackendOptions bo;
    bo.weight_format = config.weight_format;
    bo.threads = config.threads;
    bo.smooth_keys = smooth_keys_enabled(config.smooth_keys, config.kv_dtype);
    INFERGATE_ASSIGN_OR_RETURN(backend, make_cpu_backend(model, bo));
  }
  EngineOptions eo;
  eo.kv_dtype = config.kv_dtype;
  eo.max_context = config.max_context;
  eo.max_sequences = config.max_sequences;
  eo.num_blocks = config.num_blocks;
  eo.kv_budget_bytes = config.kv_budget_bytes;
  INFERGATE_ASSIGN_OR_RETURN(auto engine, Engine::create(model, std::move(backend), eo));
  LoadedEngine le;
  le.engine = std::move(engine);
  le.report.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (hasher) {
    le.report.verified = true;
    le.report.files_verified = hasher->files_verified();
    le.report.bytes_hashed = hasher->bytes_hashed();
    le.report.hash_seconds = hasher->hash_seconds();
  }
  return le;
}

// ---- generate ----

Result<GenerationResult> generate(Engine& engine, std::vector<int32_t> prompt, const SamplingParams& params,
                                  const std::function<void(std::string_view)>& on_text) {
  GenerationResult r;
  r.prompt_tokens = prompt;
  INFERGATE_ASSIGN_OR_RETURN(SeqId id, engine.add_sequence(std::move(prompt), params));
  struct Release {
    Engine& e;
    SeqId id;
    ~Release() { e.release(id); }
  } guard{engine, id};
  auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  for (;;) {
    StepRequest req{id, 0};
    INFERGATE_ASSIGN_OR_RETURN(StepResult sr, engine.step(std::span<const StepRequest>(&req, 1)));
    const SequenceUpdate& u = sr.updates[0];
    if (first) {
      r.prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      t0 = std::chrono::steady_clock::now();
      first = false;
    }
    if (!u.text.empty() && on_text) on_text(u.text);
    if (u.finish != FinishReason::kNone) break;
  }
  r.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const SequenceState* s = engine.sequence(id);
  r.tokens = s->output;
  r.text = s->text;
  r.finish = s->finish;
  return r;
}

}  // namespace infergate::runtime::engine
