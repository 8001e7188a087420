// The runtime server end to end on loopback: the OpenAI API with our client, curl and Python's standard
// library; every bad input; back-pressure (429); disconnects; a bounded load test; metrics through
// promtool; the verified manifest; SIGTERM drain of the real binary; traffic replay.
#include "infergate/runtime/server/server.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "infergate/engine/engine.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/unicode.h"
#include "infergate/runtime/server/bench.h"
#include "testing.h"

namespace infergate::runtime::server {
namespace {

using testing::get;
using testing::post;
using testing::sse_events;
using testing::start;
using testing::tiny_options;

Json body_json(const http::ClientResponse& r) {
  Json j = Json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.body;
  return j;
}

// Runs the Python client; returns its JSON line.
Json python_client(const Server& s, const std::string& endpoint, const Json& body) {
  auto r = run_command({INFERGATE_SYSTEM_PYTHON, std::string(INFERGATE_SERVER_TEST_DIR) + "/sse_client.py",
                        s.url(), endpoint, dump_json(body)},
                       std::chrono::seconds(120));
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return {};
  EXPECT_TRUE(r->status.success()) << r->err;
  Json j = Json::parse(r->out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->out << r->err;
  return j;
}

Json curl(const Server& s, const std::string& endpoint, const std::string& body, int* status) {
  auto r = run_command({"curl", "-sS", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d",
                        body, s.url() + endpoint},
                       std::chrono::seconds(120));
  EXPECT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : "");
  if (!r.ok()) return {};
  const size_t nl = r->out.rfind('\n');
  *status = std::stoi(r->out.substr(nl + 1));
  return Json::parse(r->out.substr(0, nl), nullptr, false);
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = start(tiny_options()).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static Server* server_;
};
Server* ServerTest::server_ = nullptr;

TEST_F(ServerTest, ServesHealthReadinessModelsAndMetrics) {
  ASSERT_NE(server_, nullptr);
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
  EXPECT_EQ(get(*server_, "/readyz").status, 200);
  auto models = get(*server_, "/v1/models");
  EXPECT_EQ(models.status, 200);
  Json m = body_json(models);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
  auto metrics = get(*server_, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("infergate_model_info{"), std::string::npos);
  EXPECT_NE(metrics.body.find("kv_cache_dtype=\"fp16\""), std::string::npos);
}

TEST_F(ServerTest, CompletesTheSameGreedyTextForOurClientCurlAndPython) {
  const Json req = {
      {"model", "tiny"}, {"prompt", "The quick brown fox"}, {"max_tokens", 12}, {"temperature", 0}};
  auto ours = post(*server_, "/v1/completions", dump_json(req));
  ASSERT_EQ(ours.status, 200) << ours.body;
  Json j = body_json(ours);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(),
            j["usage"]["total_tokens"].get<int>());
  const std::string text = j["choices"][0]["text"];
  EXPECT_FALSE(text.empty());

  int status = 0;
  Json c = curl(*server_, "/v1/completions", dump_json(req), &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(c["choices"][0]["text"], text);

  Json py = python_client(*server_, "/v1/completions", req);
  EXPECT_EQ(py["text"], text);

  // Streamed: the chunks join to the same text, checked by the independent client's strict parser.
  Json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  Json streamed = python_client(*server_, "/v1/completions", sreq);
  EXPECT_EQ(streamed["text"], text);
  EXPECT_EQ(streamed["finish_reason"], j["choices"][0]["finish_reason"]);
  EXPECT_EQ(streamed["usage"]["completion_tokens"], j["usage"]["completion_tokens"]);
  EXPECT_GE(streamed["chunks"].get<int>(), 2);
}

TEST_F(ServerTest, StreamsChatInTheOpenAiShape) {
  const Json req = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}}},
      {"max_tokens", 10},
      {"temperature", 0}};
  auto plain = post(*server_, "/v1/chat/completions", dump_json(req));
  ASSERT_EQ(plain.status, 200) << plain.body;
  Json j = body_json(plain);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  Json sreq = req;
  sreq["stream"] = true;
  Json py = python_client(*server_, "/v1/chat/completions", sreq);
  EXPECT_EQ(py["text"], j["choices"][0]["message"]["content"]);
  // Our client sees the raw events: the last two are the finish chunk and [DONE].
  auto raw = post(*server_, "/v1/chat/completions", dump_json(sreq));
  EXPECT_EQ(raw.header("content-type"), "text/event-stream");
  auto events = sse_events(raw.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json last = Json::parse(events[events.size() - 2]);
  EXPECT_FALSE(last["choices"][0]["finish_reason"].is_null());
}

TEST_F(ServerTest, ReturnsLogprobsInBothLegacyAndChatShapes) {
  auto c = post(*server_, "/v1/completions",
                dump_json({{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}}));
  ASSERT_EQ(c.status, 200) << c.body;
  Json lp = body_json(c)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  for (const auto& t : lp["top_logprobs"]) EXPECT_GE(t.size(), 1u);
  // Greedy: the chosen token is the most likely, so its logprob is the top alternative's.
  double best = -1e9;
  for (auto& [k, v] : lp["top_logprobs"][0].items()) best = std::max(best, v.get<double>());
  EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), best, 1e-5);
  auto chat = post(*server_, "/v1/chat/completions",
                   dump_json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                              {"max_tokens", 3},
                              {"temperature", 0},
                              {"logprobs", true},
                              {"top_logprobs", 2}}));
  ASSERT_EQ(chat.status, 200) << chat.body;
  Json content = body_json(chat)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(content[0].contains("bytes"));
}

// The tiny model in this process, with the server's settings: the numbers the server must reproduce.
std::unique_ptr<engine::Engine> in_process_engine() {
  engine::EngineConfig c;
  c.model_dir = testing::tiny_model();
  c.max_context = 512;
  c.max_sequences = 1;
  c.threads = 1;
  auto e = engine::load_engine(c);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().to_string());
  return e.ok() ? std::move(e->engine) : nullptr;
}

std::string shown(std::string_view bytes) { return model::unicode::replace_invalid_utf8(bytes); }

// Whether any JSON object in `text` names the same key twice (or the text is not JSON).
bool has_duplicate_keys(const std::string& text) {
  std::vector<std::set<std::string>> open;
  bool dup = false;
  Json::parser_callback_t cb = [&](int, Json::parse_event_t ev, Json& parsed) {
    if (ev == Json::parse_event_t::object_start) open.emplace_back();
    if (ev == Json::parse_event_t::object_end && !open.empty()) open.pop_back();
    if (ev == Json::parse_event_t::key && !open.empty())
      dup |= !open.back().insert(parsed.get<std::string>()).second;
    return true;
  };
  const Json whole = Json::parse(text, cb, false);
  return dup || whole.is_discarded();  // unparsable counts as failing the check
}

TEST_F(ServerTest, EchoReturnsThePromptTokensWithTheEnginesTeacherForcedLogprobs) {
  auto e = in_process_engine();
  ASSERT_NE(e, nullptr);
  const std::string prompt = "The river valley below the old mill was quiet.";
  const std::vector<int32_t> ids = e->tokenize(prompt);
  ASSERT_GE(ids.size(), 4u);
  auto logits = e->score(ids);
  ASSERT_TRUE(logits.ok());
  const size_t v = static_cast<size_t>(e->vocab());
  const auto& tok = e->model().tokenizer();

  // max_tokens 0: the prompt scored, nothing generated (as lm-eval-harness asks for log-likelihoods).
  auto r = post(*server_, "/v1/completions",
                dump_json({{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = body_json(r);
  EXPECT_EQ(j["choices"][0]["text"], prompt);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size());
  ASSERT_EQ(lp["top_logprobs"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::vector<double> row(v);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(lp["tokens"][i], shown(tok.token_bytes(ids[i]))) << i;
    if (i == 0) continue;
    engine::log_softmax(std::span<const float>(*logits).subspan((i - 1) * v, v), row);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), row[static_cast<size_t>(ids[i])], 1e-4) << i;
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
    double best = -1e9;
    for (double x : row) best = std::max(best, x);
    double listed_best = -1e9;
    for (auto& [k, val] : lp["top_logprobs"][i].items())
      listed_best = std::max(listed_best, val.get<double>());
    EXPECT_NEAR(listed_best, best, 1e-4) << i;
  }

  // With generation: the text is the prompt then the completion, the lists the prompt's then the
  // generated tokens', and the generated part is what a plain request gives.
  auto plain = post(*server_, "/v1/completions",
                    dump_json({{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}}));
  auto echoed =
      post(*server_, "/v1/completions",
           dump_json(
               {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}, {"echo", true}}));
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(echoed.status, 200) << echoed.body;
  Json p = body_json(plain)["choices"][0], q = body_json(echoed)["choices"][0];
  EXPECT_EQ(q["text"], prompt + p["text"].get<std::string>());
  ASSERT_EQ(q["logprobs"]["tokens"].size(), ids.size() + p["logprobs"]["tokens"].size());
  for (size_t i = 0; i < p["logprobs"]["tokens"].size(); ++i) {
    EXPECT_EQ(q["logprobs"]["tokens"][ids.size() + i], p["logprobs"]["tokens"][i]);
    EXPECT_NEAR(q["logprobs"]["token_logprobs"][ids.size() + i].get<double>(),
                p["logprobs"]["token_logprobs"][i].get<double>(), 1e-5);
  }
  // The generated tokens' offsets continue after the echoed prompt.
  EXPECT_EQ(q["logprobs"]["text_offset"][ids.size()], prompt.size());

  // A prompt given as token ids echoes their decoded text; echo without logprobs only prepends it.
  auto by_ids = post(*server_, "/v1/completions",
                     dump_json({{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}}));
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  Json bi = body_json(by_ids)["choices"][0];
  EXPECT_EQ(bi["text"], shown(*tok.decode(ids)));
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NEAR(bi["logprobs"]["token_logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(),
                1e-5);
    EXPECT_EQ(bi["logprobs"]["top_logprobs"][i], Json::object());
  }
  auto no_lp = post(*server_, "/v1/completions",
                    dump_json({{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}}));
  ASSERT_EQ(no_lp.status, 200) << no_lp.body;
  EXPECT_TRUE(body_json(no_lp)["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body_json(no_lp)["choices"][0]["text"].get<std::string>().rfind(prompt, 0), 0u);
}

TEST_F(ServerTest, EchoRefusesStreamingChatAndZeroMaxTokensWithoutIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})"},
      {"/v1/completions", R"({"prompt":"x","echo":true,"stream":true})"},
      {"/v1/completions", R"({"prompt":"x","echo":"yes"})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"echo":true})"},
  };
  for (const auto& [path, body] : cases) {
    auto r = post(*server_, path, body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    Json j = body_json(r);
    EXPECT_FALSE(j["error"]["param"].is_null()) << r.body;
  }
}

// The test model's byte-level tokenizer has a token per byte: 0x80..0xFF alone are not valid UTF-8,
// and a random model ranks several of them among its top 20. Each is shown as U+FFFD; the legacy
// top_logprobs object holds one "\uFFFD" key with the largest of their logprobs.
TEST_F(ServerTest, TopLogprobsOfPartialCharacterTokensMergeIntoOneReplacementKeyKeepingTheLargest) {
  auto e = in_process_engine();
  ASSERT_NE(e, nullptr);
  const std::string prompt = "Caf\xC3\xA9 na\xC3\xAFve \xE2\x82\xAC 12";
  engine::SamplingParams sp;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  sp.top_logprobs = 20;
  auto want = engine::generate(*e, e->tokenize(prompt), sp);
  ASSERT_TRUE(want.ok());
  auto r = post(*server_, "/v1/completions",
                dump_json({{"prompt", prompt},
                           {"max_tokens", 12},
                           {"temperature", 0},
                           {"logprobs", 20},
                           {"ignore_eos", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  // No object holds a key twice (a parser would silently keep one of them).
  EXPECT_FALSE(has_duplicate_keys(r.body));
  const Json lp = body_json(r)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["top_logprobs"].size(), want->tokens.size());
  const auto& tok = e->model().tokenizer();
  int merged = 0;
  for (size_t i = 0; i < want->tokens.size(); ++i) {
    std::map<std::string, double> expect;
    std::map<std::string, int> count;
    for (const auto& a : want->tokens[i].top) {
      const std::string key = shown(tok.token_bytes(a.token));
      auto it = expect.find(key);
      if (it == expect.end() || a.logprob > it->second) expect[key] = a.logprob;
      ++count[key];
    }
    for (const auto& [k, n] : count) merged += n > 1;
    const Json& got = lp["top_logprobs"][i];
    ASSERT_EQ(got.size(), expect.size()) << i << ": " << got.dump();
    for (const auto& [k, val] : expect) {
      ASSERT_TRUE(got.contains(k)) << i << " misses " << k;
      EXPECT_NEAR(got[k].get<double>(), val, 1e-4) << i << " " << k;
    }
    EXPECT_EQ(lp["tokens"][i], shown(tok.token_bytes(want->tokens[i].token)));
  }
  EXPECT_GT(merged, 0)
      << "no position had two alternatives with the same shown text; the test proves nothing";
  // Chat keeps every alternative as its own entry, with its raw bytes.
  auto chat = post(*server_, "/v1/chat/completions",
                   dump_json({{"messages", {{{"role", "user"}, {"content", prompt}}}},
                              {"max_tokens", 16},
                              {"ignore_eos", true},
                              {"temperature", 0},
                              {"logprobs", true},
                              {"top_logprobs", 20}}));
  ASSERT_EQ(chat.status, 200) << chat.body;
  int invalid_bytes = 0;
  const Json chat_json = body_json(chat);
  const Json& content = chat_json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 16u) << chat.body;
  for (const auto& item : content) {
    ASSERT_EQ(item["top_logprobs"].size(), 20u);
    for (const auto& alt : item["top_logprobs"]) {
      std::string bytes;
      for (const auto& b : alt["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
      EXPECT_EQ(alt["token"], shown(bytes));
      invalid_bytes += !model::unicode::is_valid_utf8(bytes);
    }
  }
  EXPECT_GT(invalid_bytes, 0) << "no alternative was a partial character; the chat check proves nothing";
}

TEST_F(ServerTest, SeededSamplingIsReproducible) {
  const Json req = {
      {"prompt", "Once upon"}, {"max_tokens", 10}, {"temperature", 1.0}, {"top_p", 0.9}, {"seed", 42}};
  auto a = post(*server_, "/v1/completions", dump_json(req));
  auto b = post(*server_, "/v1/completions", dump_json(req));
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(body_json(a)["choices"][0]["text"], body_json(b)["choices"][0]["text"]);
}

TEST_F(ServerTest, RefusesEveryBadInputWithItsStatusAndAnOpenAiError) {
  struct Case {
    std::string path, method, body;
    int status;
    std::string code;
  };
  const std::string long_prompt(3000, 'a');
  const std::vector<Case> cases = {
      {"/v1/completions", "POST", "{not json", 400, "invalid_json"},
      {"/v1/completions", "POST", R"({"prompt": 12})", 400, "invalid_type"},
      {"/v1/completions", "POST", R"({"prompt": "x", "temperature": -1})", 400, "invalid_value"},
      {"/v1/completions", "POST", R"({"prompt": "x", "max_tokens": 100000000})", 400,
       "context_length_exceeded"},
      {"/v1/completions", "POST", dump_json({{"prompt", long_prompt}}), 400, "context_length_exceeded"},
      {"/v1/completions", "POST", R"({"prompt": [1, 2, 999999]})", 400, "invalid_value"},
      {"/v1/completions", "POST", R"({"model": "other", "prompt": "x"})", 404, "model_not_found"},
      {"/v1/chat/completions", "POST", R"({"messages": [{"role": "user"}]})", 400,
       "missing_required_parameter"},
      {"/v1/completions", "GET", "", 405, "method_not_allowed"},
      {"/v1/nothing", "GET", "", 404, "not_found"},
  };
  for (const auto& c : cases) {
    http::ClientRequest r;
    r.method = c.method;
    r.body = c.body;
    if (c.method == "POST") r.content_type = "application/json";
    auto resp = http::fetch(server_->url() + c.path, r);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->status, c.status) << c.body << " -> " << resp->body;
    Json j = body_json(*resp);
    ASSERT_TRUE(j.contains("error")) << resp->body;
    EXPECT_EQ(j["error"]["code"], c.code) << c.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param"));
  }
  // Over the body limit (8 MiB by default): 413 with an OpenAI error, from curl too.
  auto dir = TempDir::create("body");
  ASSERT_TRUE(dir.ok());
  auto big = dir->path() / "big.json";
  ASSERT_TRUE(write_file_atomic(big, "{\"prompt\": \"" + std::string(9u << 20, 'a') + "\"}").ok());
  auto r = run_command({"curl", "-sS", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                        "--data-binary", "@" + big.string(), server_->url() + "/v1/completions"},
                       std::chrono::seconds(60));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->out.find("\n413"), std::string::npos) << r->out << r->err;
  EXPECT_NE(r->out.find("request_too_large"), std::string::npos) << r->out;
  // The server is still fine afterwards.
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
}

TEST_F(ServerTest, MetricsPassPromtoolAfterTraffic) {
  if (!std::filesystem::exists(INFERGATE_PROMTOOL)) GTEST_SKIP() << "promtool is not installed";
  ASSERT_EQ(post(*server_, "/v1/completions", R"({"prompt":"x","max_tokens":3})").status, 200);
  ASSERT_EQ(post(*server_, "/v1/completions", R"({"prompt":"x","top_p":7})").status, 400);
  auto m = get(*server_, "/metrics");
  auto dir = TempDir::create("metrics");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(write_file_atomic(dir->path() / "m.txt", m.body).ok());
  auto r =
      run_command({"/bin/sh", "-c",
                   std::string(INFERGATE_PROMTOOL) + " check metrics < " + (dir->path() / "m.txt").string()},
                  std::chrono::seconds(30));
  ASSERT_TRUE(r.ok());
  // promtool finds nothing to lint: no warnings at all.
  EXPECT_EQ(r->status.code, 0) << r->out << r->err;
  EXPECT_EQ(r->out + r->err, "");
  EXPECT_NE(m.body.find("infergate_kv_cache_blocks_capacity "), std::string::npos);
  EXPECT_NE(m.body.find("infergate_request_errors_total{reason=\"invalid_value\"}"), std::string::npos);
  EXPECT_EQ(m.body.find("infergate_requests_total 0"), std::string::npos);
}

// A long greedy generation that holds its sequence for a while (thousands of steps, so that even on a
// fast machine it is still running while the test acts), on a server with a 4096-token context.
std::string long_request(bool stream, int max_tokens = 4000) {
  return dump_json({{"prompt", "Count:"},
                    {"max_tokens", max_tokens},
                    {"temperature", 0},
                    {"ignore_eos", true},
                    {"stream", stream}});
}

ServeOptions long_context_options() {
  ServeOptions o = tiny_options();
  o.max_context_length = 4096;
  return o;
}

TEST(ServerLimits, AFullWaitingQueueGets429WithRetryAfter) {
  ServeOptions o = long_context_options();
  o.max_concurrency = 1;
  o.max_waiting = 1;
  auto s = start(o);
  ASSERT_NE(s, nullptr);
  // A runs (streaming, held open), B waits, C is refused.
  testing::RawConnection a(s->port());
  const std::string body = long_request(true);
  ASSERT_TRUE(a.send(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_NE(a.read_until("data: {", 30000).find("data: {"), std::string::npos);
  std::thread b([&] { post(*s, "/v1/completions", long_request(false, 8)); });
  for (int i = 0; i < 3000 && s->scheduler().stats().waiting < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(s->scheduler().stats().waiting, 1);
  auto c = post(*s, "/v1/completions", long_request(false, 8));
  EXPECT_EQ(c.status, 429) << c.body;
  EXPECT_EQ(c.header("retry-after"), "1");
  EXPECT_EQ(body_json(c)["error"]["code"], "queue_full");
  a.close();  // A's client goes away: B runs
  b.join();
  EXPECT_DOUBLE_EQ(s->metrics().errors_total("queue_full"), 1);
}

TEST(ServerLimits, AClientThatDisconnectsMidStreamIsCancelledAndItsBlocksFreed) {
  ServeOptions o = long_context_options();
  auto s = start(o);
  ASSERT_NE(s, nullptr);
  {
    testing::RawConnection c(s->port());
    const std::string body = long_request(true);
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
    ASSERT_NE(c.read_until("data: {", 30000).find("data: {"), std::string::npos);
    // The stats are published after each step: wait for the step that sent the chunk to show.
    for (int i = 0; i < 2000 && s->scheduler().stats().blocks_used == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_GT(s->scheduler().stats().blocks_used, 0);
  }
  for (int i = 0;
       i < 2000 && (s->scheduler().stats().blocks_used != 0 || s->scheduler().stats().running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto st = s->scheduler().stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.cancelled, 1);
  EXPECT_DOUBLE_EQ(s->metrics().errors_total("cancelled"), 1);
}

TEST(ServerLoad, ConcurrentClientsForABoundedTimeGetNoErrorsLeakNoBlocksAndKeepMemoryFlat) {
  ServeOptions o = tiny_options();
  o.max_concurrency = 8;
  auto s = start(o);
  ASSERT_NE(s, nullptr);
  constexpr int kClients = 8;
  auto round = [&](std::chrono::milliseconds length) {
    std::atomic<int> ok{0}, bad{0};
    std::vector<std::thread> clients;
    const auto end = std::chrono::steady_clock::now() + length;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
          Json req = {{"prompt", "Load test " + std::to_string(c) + " " + std::to_string(i)},
                      {"max_tokens", 8 + (i % 8)},
                      {"temperature", 0.7},
                      {"seed", i},
                      {"stream", (i + c) % 2 == 0}};
          auto r =
              post(*s, c % 3 == 0 ? "/v1/chat/completions" : "/v1/completions",
                   c % 3 == 0 ? dump_json({{"messages", {{{"role", "user"}, {"content", req["prompt"]}}}},
                                           {"max_tokens", req["max_tokens"]},
                                           {"stream", req["stream"]}})
                              : dump_json(req));
          (r.status == 200 ? ok : bad)++;
        }
      });
    }
    for (auto& t : clients) t.join();
    return std::make_pair(ok.load(), bad.load());
  };
  auto [ok1, bad1] = round(std::chrono::milliseconds(1500));  // warm-up: allocator pools, thread stacks
  const int64_t rss1 = testing::rss_bytes();
  auto [ok2, bad2] = round(std::chrono::milliseconds(3000));
  const int64_t rss2 = testing::rss_bytes();
  EXPECT_EQ(bad1 + bad2, 0);
  EXPECT_GT(ok2, kClients);
  ASSERT_TRUE(s->scheduler().wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(s->scheduler().stats().blocks_used, 0) << "blocks leaked";
  EXPECT_EQ(s->scheduler().stats().running, 0);
  // Flat: twice the traffic of the warm-up adds less than 16 MiB of resident memory.
  EXPECT_LT(rss2 - rss1, int64_t{16} << 20) << "rss " << rss1 << " -> " << rss2;
  std::printf("load: %d + %d requests ok, rss %.1f -> %.1f MiB\n", ok1, ok2, rss1 / 1048576.0,
              rss2 / 1048576.0);
}

TEST(ServerVerified, ReadyOnlyWhenEveryFileMatchesTheManifest) {
  auto dir = TempDir::create("verified");
  ASSERT_TRUE(dir.ok());
  const auto model = dir->path() / "tiny";
  std::filesystem::copy(testing::tiny_model(), model, std::filesystem::copy_options::recursive);
  auto sums = run_command(
      {"/bin/sh", "-c",
       "cd '" + model.string() +
           "' && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS"},
      std::chrono::seconds(30));
  ASSERT_TRUE(sums.ok() && sums->status.success());
  ServeOptions o = tiny_options();
  o.model_dir = model;
  o.verified_manifest = model / "SHA256SUMS";
  {
    auto s = start(o);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->info().verified);
    EXPECT_EQ(s->info().release_digest.rfind("sha256:", 0), 0u);
    auto m = get(*s, "/metrics").body;
    EXPECT_NE(m.find("verified=\"true\""), std::string::npos);
    EXPECT_NE(m.find("release_digest=\"" + s->info().release_digest + "\""), std::string::npos);
  }
  // One byte of the tokenizer changed after verification: the server refuses to start.
  auto tok = read_file(model / "tokenizer.json");
  ASSERT_TRUE(tok.ok());
  std::string changed = *tok;
  changed[changed.size() / 2] = changed[changed.size() / 2] == 'a' ? 'b' : 'a';
  ASSERT_TRUE(write_file_atomic(model / "tokenizer.json", changed).ok());
  auto refused = Server::start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().reason(), "DigestMismatch") << refused.error().to_string();
}

TEST(ServerBinary, SigtermTurnsReadinessOffDrainsInFlightRequestsAndExitsZero) {
  auto dir = TempDir::create("drain");
  ASSERT_TRUE(dir.ok());
  const auto log = dir->path() / "serve.log";
  SpawnOptions so;
  so.argv = {INFERGATE_RUNTIME_BIN,
             "serve",
             "--model",
             testing::tiny_model().string(),
             "--port",
             "0",
             "--max-context-length",
             "4096",
             "--max-concurrency",
             "2",
             "--drain-timeout",
             "60",
             "--threads",
             "1"};
  so.stderr_file = log;
  so.stdout_file = log;
  auto proc = Subprocess::spawn(so);
  ASSERT_TRUE(proc.ok());
  // The port comes from the "listening on http://H:PORT" line.
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto text = read_file(log);
    if (!text.ok()) continue;
    size_t at = text->find("listening on http://127.0.0.1:");
    if (at != std::string::npos)
      port = std::atoi(text->c_str() + at + std::strlen("listening on http://127.0.0.1:"));
  }
  ASSERT_GT(port, 0) << read_file(log).value_or("");
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto call = [&](const std::string& method, const std::string& path, const std::string& body = "") {
    http::ClientRequest r;
    r.method = method;
    r.body = body;
    if (method == "POST") r.content_type = "application/json";
    auto resp = http::fetch(url + path, r);
    return resp.ok() ? resp->status : -1;
  };
  for (int i = 0; i < 600 && call("GET", "/readyz") != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(call("GET", "/readyz"), 200);

  // An in-flight streaming request...
  testing::RawConnection c(port);
  const std::string body =
      dump_json({{"prompt", "Drain"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_NE(c.read_until("data: {", 30000).find("data: {"), std::string::npos);
  // ...then SIGTERM: readiness turns off and new requests are refused while it finishes.
  proc->signal(SIGTERM);
  int ready = 200;
  for (int i = 0; i < 200 && ready == 200; ++i) {
    ready = call("GET", "/readyz");
    if (ready == 200) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(ready, 503);
  EXPECT_EQ(call("POST", "/v1/completions", R"({"prompt":"late","max_tokens":2})"), 503);
  std::string rest = c.read_until("data: [DONE]", 60000);
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos) << "the in-flight stream did not finish";
  EXPECT_NE(rest.find("\"finish_reason\":\"length\""), std::string::npos);
  auto status = proc->wait_for(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->success()) << status->describe() << "\n" << read_file(log).value_or("");
}

TEST(ServerBench, ReplaysTheBundledPromptsAgainstALiveServer) {
  ServeOptions o = tiny_options();
  // The retrieval prompt is long in the tiny 512-token vocabulary (about one token per 1.5 bytes).
  o.max_context_length = 4096;
  auto s = start(o);
  ASSERT_NE(s, nullptr);
  auto prompts = parse_prompts(default_prompts_jsonl(), "default");
  ASSERT_TRUE(prompts.ok());
  BenchOptions b;
  b.url = s->url();
  b.rate = 20;
  b.duration = 1.0;
  b.seed = 1;
  b.max_tokens = 8;
  auto report = run_bench(b, *prompts);
  ASSERT_TRUE(report.ok()) << report.error().to_string();
  EXPECT_EQ(report->sent, static_cast<int64_t>(poisson_arrivals(20, 1.0, 1).size()));
  EXPECT_EQ(report->errors, 0) << report->to_table();
  EXPECT_EQ(report->ok, report->sent);
  EXPECT_GT(report->output_tokens, 0);
  EXPECT_GT(report->ttft.p50, 0);
  EXPECT_LE(report->ttft.p50, report->e2e.p99);
  Json j = report->to_json();
  EXPECT_TRUE(j.contains("ttft_seconds") && j["ttft_seconds"].contains("p99"));
}

}  // namespace
}  // namespace infergate::runtime::server
