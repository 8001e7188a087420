// Helpers shared by the eval tests: tiny generated models, a scripted Target, and a loopback HTTP
// server (the project's, infergate/http/server.h) that speaks the OpenAI completions shape.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/http/server.h"
#include "infergate/runtime/eval/target.h"

namespace infergate::runtime::eval::testing {

TempDir temp_dir();

// A small suite named "tiny": a few prompts of each kind (some longer than the engine's recent window,
// so KV quantization shows), short generations, a 60-word needle at two depths.
extern const char* const kTinySuite;

// A generated llama model (2 layers, hidden 128, 4 heads, 2 KV heads, vocab 512, f16) with
// `outlier_channels` large key channels per KV head; written once per path.
std::filesystem::path make_tiny_model(const std::filesystem::path& dir, int64_t outlier_channels,
                                      uint64_t seed = 7);

// A deterministic "model" over the tokens a..h: the next token's logits are a hash of the whole
// context. The candidate variant flips its top two tokens whenever the context length is in `flip_at`,
// and adds `noise` to every logit. Records every request it gets.
class FakeTarget final : public Target {
 public:
  std::vector<size_t> flip_at;
  double noise = 0;
  bool can_score = true;
  std::string name = "fake";
  std::vector<CompletionRequest> requests;
  std::vector<std::string> contexts;  // the context of every position it generated

  std::string describe() const override { return name; }
  Result<Completion> complete(const CompletionRequest& request) override;
  Result<TextScore> score_text(std::string_view text) override;
  // The sorted next-token distribution after `context`.
  std::vector<TopToken> distribution(const std::string& context) const;
};

// handler(method, target, body) -> {status, JSON body}, called on a thread of its own per request.
class LoopbackServer {
 public:
  using Handler = std::function<std::pair<int, std::string>(
      const std::string& method, const std::string& target, const std::string& body)>;
  explicit LoopbackServer(Handler handler);
  ~LoopbackServer();
  int port() const { return server_ ? server_->port() : 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  int requests() const { return requests_.load(); }

 private:
  Handler handler_;
  std::atomic<int> requests_{0};
  http::BlockingHandlers pool_{8};
  std::unique_ptr<http::Server> server_;
};

// An OpenAI completions handler in front of a Target (legacy logprobs shape; "echo" refused with 400,
// as a server without prompt logprobs does).
LoopbackServer::Handler openai_handler(Target& target, std::mutex& mu, std::string model = "tiny");

}  // namespace infergate::runtime::eval::testing
