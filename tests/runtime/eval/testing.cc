// Test helpers for runtime/eval (see testing.h).
#include "testing.h"

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>

#include "infergate/common/json.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::eval::testing {

const char* const kTinySuite = R"({
  "name": "tiny", "top_logprobs": 20, "seed": 0, "max_tokens": 16,
  "perplexity_text": "The river valley below the old mill was quiet in the early morning. Mist lay over the fields and the only sound was the water running over the stones.",
  "tasks": [
    {"id": "text-1", "kind": "summarisation", "prompt": "Document: The authority repaired leaks, cut losses to 18 percent and raised tariffs. Summary:"},
    {"id": "code-1", "kind": "code", "prompt": "def add(a, b):\n    return"},
    {"id": "chat-1", "kind": "chat", "messages": [{"role": "user", "content": "Hello there."},
      {"role": "assistant", "content": "Hi! How can I help?"}, {"role": "user", "content": "Name a colour."}]},
    {"id": "needle", "kind": "needle", "max_tokens": 6, "haystack": "The bus came at seven. The baker lit the oven. Rain fell in the evening.",
     "needle": "The gate code is 7341.", "question": "What is the gate code?", "answer": "7341",
     "context_words": [60], "depths": [0.2, 0.8]},
    {"id": "json-1", "kind": "json", "required_keys": ["name"], "prompt": "Give a JSON object with a name.\nJSON: {"}
  ]})";

TempDir temp_dir() {
  auto d = TempDir::create("infergate-eval-test");
  EXPECT_TRUE(d.ok());
  return std::move(*d);
}

std::filesystem::path make_tiny_model(const std::filesystem::path& dir, int64_t outlier_channels,
                                      uint64_t seed) {
  namespace m = infergate::runtime::model;
  m::TestModelOptions o;
  o.out = dir;
  o.arch = m::Architecture::kLlama;
  o.layers = 2;
  o.hidden = 128;  // head_dim 32: one int4 group per head
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 512;
  o.seed = seed;
  o.outlier_channels = outlier_channels;
  o.dtype = m::DType::kF16;
  o.max_position = 4096;
  Status s = m::make_test_model(o);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
  return dir;
}

namespace {
uint64_t fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
constexpr int kTokens = 8;
}  // namespace

std::vector<TopToken> FakeTarget::distribution(const std::string& context) const {
  const uint64_t h = fnv(context);
  std::vector<double> logits(kTokens);
  for (int i = 0; i < kTokens; ++i) {
    logits[i] = static_cast<double>((h >> (i * 7)) & 127) / 16.0 +
                noise * static_cast<double>((h >> (i * 3)) & 7) / 8.0;
  }
  double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (double l : logits) sum += std::exp(l - mx);
  std::vector<TopToken> out;
  for (int i = 0; i < kTokens; ++i)
    out.push_back({std::string(1, static_cast<char>('a' + i)), logits[i] - mx - std::log(sum)});
  std::sort(out.begin(), out.end(), [](const TopToken& a, const TopToken& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.text < b.text;
  });
  if (std::find(flip_at.begin(), flip_at.end(), context.size()) != flip_at.end()) {
    std::swap(out[0].text, out[1].text);
  }
  return out;
}

Result<Completion> FakeTarget::complete(const CompletionRequest& request) {
  requests.push_back(request);
  Completion c;
  std::string context = request.prompt;
  for (int32_t n = 0; n < request.max_tokens; ++n) {
    contexts.push_back(context);
    auto d = distribution(context);
    GeneratedToken g;
    g.text = d[0].text;
    g.logprob = d[0].logprob;
    d.resize(std::min<size_t>(d.size(), static_cast<size_t>(request.top_logprobs)));
    g.top = d;
    context += g.text;
    c.text += g.text;
    c.tokens.push_back(std::move(g));
  }
  c.first_token_seconds = 0.001;
  c.seconds = 0.001 * request.max_tokens;
  return c;
}

Result<TextScore> FakeTarget::score_text(std::string_view text) {
  if (!can_score) return Error(ErrorCode::kUnimplemented, "no echo here", "ScoringUnsupported");
  TextScore s;
  s.tokens = static_cast<int64_t>(text.size());
  for (size_t i = 1; i < text.size(); ++i) {
    for (const auto& t : distribution(std::string(text.substr(0, i)))) {
      if (t.text[0] == text[i]) s.sum_logprob += t.logprob;
    }
    ++s.scored;
  }
  return s;
}

LoopbackServer::LoopbackServer(Handler handler) : handler_(std::move(handler)) {
  auto s = http::Server::start({}, pool_.wrap([this](std::shared_ptr<http::Exchange> ex) {
    ++requests_;
    const http::Request& r = ex->request();
    auto [status, body] = handler_(r.method, r.target, r.body);
    ex->respond(http::Response{status, "application/json", {}, std::move(body)});
  }));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
  if (s.ok()) server_ = std::move(*s);
}

LoopbackServer::~LoopbackServer() {
  if (server_) server_->stop();
  pool_.stop();
}

LoopbackServer::Handler openai_handler(Target& target, std::mutex& mu, std::string model) {
  return [&target, &mu, model](const std::string& method, const std::string& path,
                               const std::string& body) -> std::pair<int, std::string> {
    auto err = [](int status, const std::string& message) {
      return std::make_pair(
          status, dump_json(Json{{"error", {{"message", message}, {"type", "invalid_request_error"}}}}));
    };
    if (method == "GET" && path == "/v1/models") {
      return {200, dump_json(Json{{"object", "list"},
                                  {"data", Json::array({Json{{"id", model}, {"object", "model"}}})}})};
    }
    if (method != "POST" || path != "/v1/completions") return err(404, "no route " + path);
    Json j = Json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return err(400, "malformed JSON");
    if (j.value("model", "") != model) return err(404, "unknown model");
    if (j.value("echo", false)) return err(400, "'echo' is not supported");
    CompletionRequest r;
    r.prompt = j.value("prompt", "");
    r.max_tokens = j.value("max_tokens", 16);
    r.top_logprobs = j.value("logprobs", 0);
    r.seed = j.value("seed", 0ull);
    Result<Completion> c = [&] {
      std::lock_guard<std::mutex> lock(mu);
      return target.complete(r);
    }();
    if (!c.ok()) return err(400, c.error().to_string());
    Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    size_t off = 0;
    for (const auto& t : c->tokens) {
      tokens.push_back(t.text);
      lps.push_back(t.logprob);
      Json alt = Json::object();
      for (const auto& a : t.top) {
        if (!alt.contains(a.text)) alt[a.text] = a.logprob;
      }
      tops.push_back(alt);
      offsets.push_back(off);
      off += t.text.size();
    }
    Json choice = {
        {"index", 0},
        {"text", c->text},
        {"finish_reason", "length"},
        {"logprobs",
         {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}}}};
    return {200, dump_json(Json{{"id", "cmpl-1"},
                                {"object", "text_completion"},
                                {"model", model},
                                {"choices", Json::array({choice})},
                                {"usage", {{"prompt_tokens", 1}, {"completion_tokens", c->tokens.size()}}}})};
  };
}

}  // namespace infergate::runtime::eval::testing
