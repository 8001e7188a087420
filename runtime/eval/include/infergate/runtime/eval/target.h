// A Target is a model that eval and report ask for greedy completions with top logprobs and for the
// log-likelihood of a fixed text: either a running server (HttpTarget, through the OpenAI completions
// API, so any OpenAI-compatible server works) or a model directory run in this process through the
// engine (EngineTarget). Both speak in token *texts*, the only identity an OpenAI server gives a token,
// so the two kinds are measured the same way and can be compared with each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/engine.h"
#include "infergate/engine/types.h"

namespace infergate::runtime::eval {

struct TopToken {
  std::string text;
  double logprob = 0;
};

// One generated token.
struct GeneratedToken {
  std::string text;           // its bytes (possibly a partial UTF-8 sequence)
  double logprob = 0;         // of the chosen token
  std::vector<TopToken> top;  // the most likely alternatives, most likely first
};

struct CompletionRequest {
  std::string prompt;
  int32_t max_tokens = 16;
  int32_t top_logprobs = 20;
  uint64_t seed = 0;
  // In-process targets only: prefill the prompt in chunks of this many tokens (0: one chunk). The
  // noise-floor run uses it to take a second code path through the same model.
  int32_t prefill_chunk = 0;
};

// A greedy completion that ignores end-of-sequence tokens, so both sides produce max_tokens tokens
// unless the context fills up.
struct Completion {
  std::vector<GeneratedToken> tokens;
  std::string text;
  double first_token_seconds = 0;  // request sent to the first token
  double seconds = 0;              // request sent to the last token
};

// The log-likelihood of a text under the model: the sum of log p(token_i | tokens_<i) over every token
// but the first (whose probability has no context).
struct TextScore {
  int64_t tokens = 0;  // tokens in the text (as the model tokenizes it)
  int64_t scored = 0;  // tokens - 1
  double sum_logprob = 0;
  double perplexity() const;  // exp(-sum_logprob / scored)
};

class Target {
 public:
  virtual ~Target() = default;
  // For tables and errors: the URL, or "DIR (int8 weights, fp8 KV)".
  virtual std::string describe() const = 0;
  virtual Result<Completion> complete(const CompletionRequest& request) = 0;
  // Refused with reason "ScoringUnsupported" when the target cannot return prompt logprobs (a server
  // without `echo`).
  virtual Result<TextScore> score_text(std::string_view text) = 0;
};

// ---- A server, through the OpenAI completions API ---------------------------------------------------

struct HttpTargetOptions {
  std::string url;                             // http://host:port[/prefix]; https:// also accepted
  std::string model;                           // the "model" field; empty: the first id from GET /v1/models
  std::chrono::milliseconds timeout{300'000};  // per request
  int retries = 2;  // retries of a request that failed with a connection error or a 5xx/429
};

// Requests: POST /v1/completions with {"model", "prompt", "max_tokens", "temperature": 0, "logprobs": K,
// "seed", "ignore_eos": true}; score_text sends "echo": true with "max_tokens": 0 and "logprobs": 0 and
// reads the prompt tokens' logprobs (OpenAI legacy shape; a server that refuses max_tokens 0 is asked
// again with 1, as lm-eval-harness asks). Errors: unreachable server (Unavailable, reason
// "TargetUnreachable"), an HTTP error status (reason "TargetHttpError", with the server's message),
// a response without the expected fields (reason "TargetBadResponse").
class HttpTarget final : public Target {
 public:
  static Result<std::unique_ptr<HttpTarget>> connect(const HttpTargetOptions& options);
  ~HttpTarget() override;
  std::string describe() const override;
  Result<Completion> complete(const CompletionRequest& request) override;
  Result<TextScore> score_text(std::string_view text) override;
  const std::string& model() const { return model_; }

 private:
  struct Impl;
  explicit HttpTarget(std::unique_ptr<Impl> impl, std::string model);
  std::unique_ptr<Impl> impl_;
  std::string model_;
};

// The one key space both kinds of target report alternatives in (so eval's KL compares like with
// like): texts as a server shows them (invalid UTF-8 replaced by U+FFFD, see
// model::unicode::replace_invalid_utf8), alternatives with equal texts merged keeping the LARGEST
// logprob (the server's rule for its top_logprobs object), the chosen token listed under its own text
// with at least its own logprob, most likely first (ties by text).
void canonicalize_alternatives(GeneratedToken& g);

// Parses an OpenAI legacy completion response's choices[0] (text and logprobs) into a Completion.
// Exposed for tests; `k` is the number of alternatives asked for.
Result<Completion> parse_completion_response(std::string_view body, int32_t k);
// Parses an echo response into a TextScore.
Result<TextScore> parse_echo_response(std::string_view body);

// ---- A model directory, in this process ------------------------------------------------------------

struct EngineTargetOptions {
  std::filesystem::path model_dir;
  // nullopt: the directory's own format (int8 / int4 when it is compressed, else fp16).
  std::optional<engine::WeightFormat> weight_format;
  engine::KvCacheDtype kv_dtype = engine::KvCacheDtype::kF16;
  int64_t max_context = 0;  // 0: the model's
  std::optional<std::filesystem::path> verified_manifest;
  int threads = 0;
  std::string device = "cpu";   // cpu, cuda or auto (engine/device.h)
  int32_t tensor_parallel = 1;  // GPUs (cuda only)
};

// Tokens are reported as a server reports them (so both kinds of target give the same numbers): their
// text with invalid UTF-8 replaced by U+FFFD, and alternatives in canonicalize_alternatives' key space.
class EngineTarget final : public Target {
 public:
  // Loads the engine (one sequence slot; blocks for one sequence at max_context).
  static Result<std::unique_ptr<EngineTarget>> open(const EngineTargetOptions& options);
  std::string describe() const override;
  Result<Completion> complete(const CompletionRequest& request) override;
  Result<TextScore> score_text(std::string_view text) override;

  engine::Engine& engine() { return *engine_; }
  const engine::LoadReport& load_report() const { return load_report_; }

 private:
  EngineTarget(std::unique_ptr<engine::Engine> engine, engine::LoadReport report, std::string describe);
  std::string token_text(int32_t id) const;
  std::unique_ptr<engine::Engine> engine_;
  engine::LoadReport load_report_;
  std::string describe_;
};

// The weight format a model directory is stored in: its config.json's quantization_config (int8, int4)
// or fp16 for a dense checkpoint.
Result<engine::WeightFormat> directory_weight_format(const std::filesystem::path& model_dir);

// True for "http://..." and "https://..." (the rest is taken as a model directory).
bool is_url(std::string_view target);

}  // namespace infergate::runtime::eval
