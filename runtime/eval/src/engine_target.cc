// EngineTarget: a model directory run in this process through the engine, answering the same questions
// as a server would (greedy completions with top logprobs, a text's log-likelihood).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/engine/sampling.h"
#include "infergate/runtime/eval/target.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::eval {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Text as a server shows it: invalid UTF-8 (a token holding part of a character) replaced.
std::string as_server_text(std::string_view raw) { return model::unicode::replace_invalid_utf8(raw); }
}  // namespace

double TextScore::perplexity() const {
  return scored > 0 ? std::exp(-sum_logprob / static_cast<double>(scored)) : 1.0;
}

bool is_url(std::string_view target) {
  return target.starts_with("http://") || target.starts_with("https://");
}

Result<engine::WeightFormat> directory_weight_format(const std::filesystem::path& model_dir) {
  auto text = read_file(model_dir / "config.json", 16u << 20);
  if (!text.ok()) return std::move(text).error().context("reading the model directory's config.json");
  INFERGATE_ASSIGN_OR_RETURN(model::ModelConfig config, model::parse_model_config(*text));
  if (config.quantization && config.quantization->quant_method == "infergate") {
    return engine::parse_weight_format(config.quantization->weight_format);
  }
  return engine::WeightFormat::kF16;
}

EngineTarget::EngineTarget(std::unique_ptr<engine::Engine> engine, engine::LoadReport report,
                           std::string describe)
    : engine_(std::move(engine)), load_report_(report), describe_(std::move(describe)) {}

Result<std::unique_ptr<EngineTarget>> EngineTarget::open(const EngineTargetOptions& options) {
  engine::EngineConfig config;
  config.model_dir = options.model_dir;
  if (options.weight_format) {
    config.weight_format = *options.weight_format;
  } else {
    INFERGATE_ASSIGN_OR_RETURN(config.weight_format, directory_weight_format(options.model_dir));
  }
  config.kv_dtype = options.kv_dtype;
  config.max_context = options.max_context;
  config.max_sequences = 1;
  config.verified_manifest = options.verified_manifest;
  config.threads = options.threads;
  config.device = options.device;
  config.tensor_parallel = options.tensor_parallel;
  auto loaded = engine::load_engine(config);
  if (!loaded.ok()) return std::move(loaded).error().context("loading " + options.model_dir.string());
  std::string describe = options.model_dir.string() + " (" +
                         std::string(engine::weight_format_name(config.weight_format)) + " weights, " +
                         std::string(engine::kv_cache_dtype_name(options.kv_dtype)) + " KV)";
  return std::unique_ptr<EngineTarget>(
      new EngineTarget(std::move(loaded->engine), loaded->report, std::move(describe)));
}

std::string EngineTarget::describe() const { return describe_; }

std::string EngineTarget::token_text(int32_t id) const {
  return as_server_text(engine_->model().tokenizer().token_bytes(id));
}

Result<Completion> EngineTarget::complete(const CompletionRequest& request) {
  std::vector<int32_t> prompt = engine_->tokenize(request.prompt);
  const int64_t room = engine_->max_context() - static_cast<int64_t>(prompt.size());
  if (room < 1) {
    return out_of_range("the prompt is " + std::to_string(prompt.size()) + " tokens, the context " +
                        std::to_string(engine_->max_context()) + ": no room to generate")
        .with_reason("ContextTooLong");
  }
  engine::SamplingParams params;
  params.temperature = 0;
  params.seed = request.seed;
  params.max_tokens = static_cast<int32_t>(std::min<int64_t>(request.max_tokens, room));
  params.ignore_eos = true;
  params.top_logprobs = request.top_logprobs;
  const auto t0 = Clock::now();
  INFERGATE_ASSIGN_OR_RETURN(engine::SeqId id, engine_->add_sequence(std::move(prompt), params));
  Completion out;
  std::string raw;
  const engine::StepRequest step{id, request.prefill_chunk};
  for (;;) {
    auto r = engine_->step(std::span<const engine::StepRequest>(&step, 1));
    if (!r.ok()) {
      engine_->release(id);
      return std::move(r).error().context("generating");
    }
    const engine::SequenceUpdate& u = r->updates.at(0);
    if (u.token) {
      if (out.tokens.empty()) out.first_token_seconds = since(t0);
      GeneratedToken g;
      g.text = token_text(u.token->token);
      g.logprob = u.token->logprob;
      for (const auto& alt : u.token->top) g.top.push_back({token_text(alt.token), alt.logprob});
      if (request.top_logprobs > 0) canonicalize_alternatives(g);
      raw += engine_->model().tokenizer().token_bytes(u.token->token);
      out.tokens.push_back(std::move(g));
    }
    if (u.finish != engine::FinishReason::kNone) break;
  }
  out.seconds = since(t0);
  out.text = as_server_text(raw);
  engine_->release(id);
  return out;
}

Result<TextScore> EngineTarget::score_text(std::string_view text) {
  const std::vector<int32_t> tokens = engine_->tokenize(text);
  if (tokens.size() < 2) return invalid_argument("the perplexity text is shorter than two tokens");
  if (static_cast<int64_t>(tokens.size()) > engine_->max_context()) {
    return out_of_range("the perplexity text is " + std::to_string(tokens.size()) +
                        " tokens, longer than the context " + std::to_string(engine_->max_context()))
        .with_reason("ContextTooLong");
  }
  INFERGATE_ASSIGN_OR_RETURN(std::vector<float> logits, engine_->score(tokens));
  const size_t vocab = static_cast<size_t>(engine_->vocab());
  TextScore s;
  s.tokens = static_cast<int64_t>(tokens.size());
  std::vector<double> row(vocab);
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    engine::log_softmax(std::span<const float>(logits).subspan(i * vocab, vocab), row);
    s.sum_logprob += row[static_cast<size_t>(tokens[i + 1])];
    ++s.scored;
  }
  return s;
}

}  // namespace infergate::runtime::eval
