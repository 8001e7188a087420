// HttpTarget against a loopback server speaking the OpenAI completions shape: the same numbers as asking
// the target directly, and every failure classified (unreachable, HTTP error, malformed response, no echo).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "infergate/common/json.h"
#include "infergate/runtime/eval/compare.h"
#include "infergate/runtime/eval/target.h"
#include "testing.h"

namespace infergate::runtime::eval {
namespace {

using testing::FakeTarget;
using testing::LoopbackServer;

Task text_task(std::string id, TaskKind kind, std::string prompt, int32_t max_tokens) {
  Task t;
  t.id = std::move(id);
  t.kind = kind;
  t.prompt = std::move(prompt);
  t.max_tokens = max_tokens;
  return t;
}

HttpTargetOptions options(const std::string& url) {
  HttpTargetOptions o;
  o.url = url;
  o.timeout = std::chrono::milliseconds(10'000);
  o.retries = 0;
  return o;
}

TEST(HttpTarget, CompletionsThroughTheApiEqualAskingTheTargetDirectly) {
  FakeTarget fake;
  std::mutex mu;
  LoopbackServer server(testing::openai_handler(fake, mu, "fake-model"));
  auto t = HttpTarget::connect(options(server.url()));
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ((*t)->model(), "fake-model");
  CompletionRequest req{"p:", 6, 5, 0, 0};
  auto via_http = (*t)->complete(req);
  ASSERT_TRUE(via_http.ok()) << via_http.error().to_string();
  FakeTarget direct;
  auto expected = direct.complete(req);
  ASSERT_EQ(via_http->tokens.size(), 6u);
  EXPECT_EQ(via_http->text, expected->text);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(via_http->tokens[i].text, expected->tokens[i].text);
    EXPECT_DOUBLE_EQ(via_http->tokens[i].logprob, expected->tokens[i].logprob);
    ASSERT_EQ(via_http->tokens[i].top.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(via_http->tokens[i].top[k].text, expected->tokens[i].top[k].text);
      EXPECT_DOUBLE_EQ(via_http->tokens[i].top[k].logprob, expected->tokens[i].top[k].logprob);
    }
  }
  EXPECT_GT(via_http->seconds, 0.0);
}

TEST(HttpTarget, EvalThroughUrlsGivesTheSameMetricsAsInProcess) {
  FakeTarget base_fake, cand_fake;
  cand_fake.flip_at = {4, 9};
  cand_fake.noise = 0.5;
  std::mutex mu1, mu2;
  LoopbackServer base_server(testing::openai_handler(base_fake, mu1));
  LoopbackServer cand_server(testing::openai_handler(cand_fake, mu2));
  auto base = HttpTarget::connect(options(base_server.url()));
  auto cand = HttpTarget::connect(options(cand_server.url()));
  ASSERT_TRUE(base.ok() && cand.ok());
  Suite s;
  s.name = "t";
  s.top_logprobs = 8;
  s.perplexity_text = "abcabc";
  s.tasks.push_back(text_task("a", TaskKind::kText, "p:", 12));
  s.tasks.push_back(text_task("b", TaskKind::kCode, "def f(", 10));
  EvalOptions o;
  o.noise_floor = false;
  auto via_http = run_eval(s, **base, **cand, o);
  ASSERT_TRUE(via_http.ok()) << via_http.error().to_string();
  FakeTarget a, b;
  b.flip_at = cand_fake.flip_at;
  b.noise = cand_fake.noise;
  auto direct = run_eval(s, a, b, o);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(via_http->metrics.pair.positions, direct->metrics.pair.positions);
  EXPECT_DOUBLE_EQ(via_http->metrics.pair.top1_agreement, direct->metrics.pair.top1_agreement);
  EXPECT_NEAR(via_http->metrics.pair.mean_kl, direct->metrics.pair.mean_kl, 1e-6);
  EXPECT_LT(via_http->metrics.pair.top1_agreement, 1.0);
  // The loopback server refuses echo (as servers without prompt logprobs do): perplexity is not
  // measured, and the note says why.
  EXPECT_FALSE(via_http->metrics.perplexity_change.has_value());
  EXPECT_NE(via_http->metrics.perplexity_note.find("echo"), std::string::npos);
}

TEST(HttpTarget, AnUnreachableServerIsReportedAsSuch) {
  int port;
  {
    FakeTarget f;
    std::mutex mu;
    LoopbackServer s(testing::openai_handler(f, mu));
    port = s.port();
  }  // closed: nothing listens there now
  auto t = HttpTarget::connect(options("http://127.0.0.1:" + std::to_string(port)));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().reason(), "TargetUnreachable");
  EXPECT_NE(t.error().message().find("/v1/models"), std::string::npos);
}

TEST(HttpTarget, HttpErrorsCarryTheServersMessage) {
  LoopbackServer s(
      [](const std::string& method, const std::string&, const std::string&) -> std::pair<int, std::string> {
        if (method == "GET") return {200, R"({"data":[{"id":"m"}]})"};
        return {400, R"({"error":{"message":"'prompt' is too long","type":"invalid_request_error"}})"};
      });
  auto t = HttpTarget::connect(options(s.url()));
  ASSERT_TRUE(t.ok());
  auto c = (*t)->complete({"x", 4, 2, 0, 0});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().reason(), "TargetHttpError");
  EXPECT_NE(c.error().message().find("'prompt' is too long"), std::string::npos);
  EXPECT_EQ(c.error().detail("status"), "400");
}

TEST(HttpTarget, ServerErrorsAreRetriedThenReported) {
  std::atomic<int> posts{0};
  LoopbackServer s(
      [&](const std::string& method, const std::string&, const std::string&) -> std::pair<int, std::string> {
        if (method == "GET") return {200, R"({"data":[{"id":"m"}]})"};
        ++posts;
        return {503, R"({"error":{"message":"draining"}})"};
      });
  HttpTargetOptions o = options(s.url());
  o.retries = 1;
  auto t = HttpTarget::connect(o);
  ASSERT_TRUE(t.ok());
  auto c = (*t)->complete({"x", 4, 2, 0, 0});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(posts.load(), 2);
}

TEST(HttpTarget, MalformedResponsesAreRefusedNamingWhatIsMissing) {
  for (const char* body :
       {R"({"choices":[]})", R"({"choices":[{"text":"a"}]})",
        R"({"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[]}}]})",
        R"({"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1]}}]})", "not json"}) {
    auto c = parse_completion_response(body, 2);
    ASSERT_FALSE(c.ok()) << body;
    EXPECT_TRUE(c.error().reason() == "TargetBadResponse" || c.error().code() == ErrorCode::kInvalidArgument)
        << body;
  }
  LoopbackServer s(
      [](const std::string&, const std::string&, const std::string&) -> std::pair<int, std::string> {
        return {200, R"({"data":[]})"};
      });
  auto t = HttpTarget::connect(options(s.url()));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().reason(), "TargetBadResponse");
}

TEST(HttpTarget, TopLogprobsComeBackMostLikelyFirstWhateverTheObjectOrder) {
  auto c = parse_completion_response(
      R"({"choices":[{"text":"b","logprobs":{"tokens":["b"],"token_logprobs":[-0.1],
          "top_logprobs":[{"a":-3.0,"b":-0.1,"c":-2.0}]}}]})",
      3);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  ASSERT_EQ(c->tokens.at(0).top.size(), 3u);
  EXPECT_EQ(c->tokens[0].top[0].text, "b");
  EXPECT_EQ(c->tokens[0].top[1].text, "c");
  EXPECT_EQ(c->tokens[0].top[2].text, "a");
}

TEST(HttpTarget, EchoResponsesScoreThePromptTokensOnly) {
  auto s = parse_echo_response(
      R"({"choices":[{"text":"abcd","logprobs":{"tokens":["a","b","c","d"],"token_logprobs":[null,-1.0,-2.0,-9.0]}}],
          "usage":{"prompt_tokens":3,"completion_tokens":1}})");
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->tokens, 3);
  EXPECT_EQ(s->scored, 2);
  EXPECT_DOUBLE_EQ(s->sum_logprob, -3.0);
  EXPECT_DOUBLE_EQ(s->perplexity(), std::exp(1.5));
  EXPECT_FALSE(parse_echo_response(
                   R"({"choices":[{"logprobs":{"token_logprobs":[null]}}],"usage":{"prompt_tokens":5}})")
                   .ok());
}

TEST(HttpTarget, OnlyHttpUrlsAreTargets) {
  EXPECT_TRUE(is_url("http://10.0.0.1:8000"));
  EXPECT_TRUE(is_url("https://svc"));
  EXPECT_FALSE(is_url("/models/glm"));
  EXPECT_FALSE(is_url("ftp://x"));
  auto t = HttpTarget::connect(options("ftp://x"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().reason(), "BadTarget");
}

}  // namespace
}  // namespace infergate::runtime::eval
