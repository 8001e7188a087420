// Request validation and response shapes of the OpenAI-compatible API.
#include "infergate/runtime/server/api.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::server {
namespace {

using infergate::testing::refused;

struct Refusal {
  int status;
  std::string param;
  std::string code;
  std::string message;
};

Refusal refuse(std::string_view body, Endpoint ep = Endpoint::kCompletions) {
  ApiError e;
  auto r = parse_generate_request(body, ep, "tiny", &e);
  // The error names the parameter the OpenAI answer names.
  EXPECT_TRUE(refused(r, "", {e.param})) << body;
  Json j = Json::parse(e.body());
  // The OpenAI error shape: every field present.
  EXPECT_TRUE(j["error"].contains("message"));
  EXPECT_TRUE(j["error"].contains("type"));
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
  EXPECT_FALSE(e.message.empty());
  return {e.status, e.param, e.code, e.message};
}

TEST(Api, ParsesACompletionWithEveryParameter) {
  ApiError e;
  auto r = parse_generate_request(
      R"({"model":"tiny","prompt":"hi","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,)"
      R"("stop":["a","b"],"logprobs":3,"stream":true,"stream_options":{"include_usage":true},"n":1,"user":"x"})",
      Endpoint::kCompletions, "tiny", &e);
  ASSERT_TRUE(r.ok()) << e.message;
  EXPECT_EQ(*r->prompt_text, "hi");
  EXPECT_EQ(*r->max_tokens, 5);
  EXPECT_DOUBLE_EQ(r->temperature, 0.5);
  EXPECT_DOUBLE_EQ(r->top_p, 0.9);
  EXPECT_EQ(r->top_k, 40);
  EXPECT_EQ(*r->seed, 7u);
  EXPECT_EQ(r->stop.size(), 2u);
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(Api, AcceptsPromptsAsTokenIdsAndSingleElementLists) {
  ApiError e;
  auto ids = parse_generate_request(R"({"prompt":[1,2,3]})", Endpoint::kCompletions, "tiny", &e);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto nested = parse_generate_request(R"({"prompt":[[4,5]]})", Endpoint::kCompletions, "tiny", &e);
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->prompt_ids, (std::vector<int32_t>{4, 5}));
  auto text = parse_generate_request(R"({"prompt":["x"]})", Endpoint::kCompletions, "tiny", &e);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text->prompt_text, "x");
}

TEST(Api, ParsesChatWithContentPartsAndLogprobs) {
  ApiError e;
  auto r = parse_generate_request(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],)"
      R"("logprobs":true,"top_logprobs":2,"max_completion_tokens":9})",
      Endpoint::kChat, "tiny", &e);
  ASSERT_TRUE(r.ok()) << e.message;
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_EQ(*r->max_tokens, 9);
}

TEST(Api, RefusesMalformedJsonAndNonObjects) {
  auto a = refuse("{\"prompt\": ");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.code, "invalid_json");
  auto b = refuse("[1,2]");
  EXPECT_EQ(b.status, 400);
  EXPECT_EQ(b.code, "invalid_type");
}

TEST(Api, RefusesWrongTypesNamingTheParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt":5})", "prompt"},
      {R"({"prompt":"x","max_tokens":"5"})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":2.5})", "max_tokens"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"prompt":"x","top_p":true})", "top_p"},
      {R"({"prompt":"x","top_k":1.5})", "top_k"},
      {R"({"prompt":"x","seed":"1"})", "seed"},
      {R"({"prompt":"x","stop":7})", "stop"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","logprobs":true})", "logprobs"},
      {R"({"prompt":"x","model":3})", "model"},
      {R"({"prompt":[1,"a"]})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    auto r = refuse(body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.param, param) << body;
    EXPECT_EQ(r.code, "invalid_type") << body;
  }
}

TEST(Api, RefusesNegativeAndAbsurdValues) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":-3})", "max_tokens"},
      {R"({"prompt":"x","temperature":-0.1})", "temperature"},
      {R"({"prompt":"x","temperature":1e9})", "temperature"},
      {R"({"prompt":"x","top_p":0})", "top_p"},
      {R"({"prompt":"x","top_p":1.5})", "top_p"},
      {R"({"prompt":"x","top_k":-5})", "top_k"},
      {R"({"prompt":"x","logprobs":21})", "logprobs"},
      {R"({"prompt":"x","logprobs":-1})", "logprobs"},
      {R"({"prompt":"x","stop":["a","b","c","d","e"]})", "stop"},
      {R"({"prompt":"x","stop":[""]})", "stop"},
      {R"({"prompt":[-1]})", "prompt"},
      {R"({"prompt":""})", "prompt"},
      {R"({"prompt":[]})", "prompt"},
      {R"({"prompt":["a","b"]})", "prompt"},
      {R"({"prompt":"x","n":2})", "n"},
      {R"({"prompt":"x","echo":true,"stream":true})", "echo"},
      {R"({"prompt":"x","echo":true,"max_tokens":-1})", "max_tokens"},
      {R"({"prompt":"x","presence_penalty":1})", "presence_penalty"},
      {R"({"prompt":"x","frequency_penalty":9})", "frequency_penalty"},
      {R"({"prompt":"x","logit_bias":{"1":5}})", "logit_bias"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {R"({})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    auto r = refuse(body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.param, param) << body;
  }
}

TEST(Api, RefusesBadChatMessages) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages":[]})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30})", "top_logprobs"},
      {R"({"prompt":"x"})", "messages"},
  };
  for (const auto& [body, param] : cases) {
    auto r = refuse(body, Endpoint::kChat);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.param, param) << body;
  }
}

TEST(Api, EchoAllowsZeroMaxTokensOnCompletionsOnly) {
  ApiError e;
  auto r = parse_generate_request(R"({"prompt":"x","echo":true,"max_tokens":0,"logprobs":1})",
                                  Endpoint::kCompletions, "", &e);
  ASSERT_TRUE(r.ok()) << e.message;
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->max_tokens, 0);
  EXPECT_EQ(r->logprobs, 1);
  auto no_echo = refuse(R"({"prompt":"x","max_tokens":0})");
  EXPECT_EQ(no_echo.param, "max_tokens");
  EXPECT_NE(no_echo.message.find("echo"), std::string::npos) << no_echo.message;
  auto chat = refuse(R"({"messages":[{"role":"user","content":"x"}],"echo":true})", Endpoint::kChat);
  EXPECT_EQ(chat.param, "echo");
}

TEST(Api, TopLogprobsShowInvalidUtf8AsReplacementAndMergeEqualTextsKeepingTheLargest) {
  // Three byte tokens that are each part of a character: all shown as U+FFFD, one key, the largest value.
  const std::string fffd = "\xEF\xBF\xBD";
  Json top = merged_top_logprobs({{"a", -0.5}, {"\xE2", -2.0}, {"\xE2\x82", -1.0}, {"\xC3", -3.0}});
  EXPECT_EQ(top.size(), 2u) << top.dump();
  EXPECT_DOUBLE_EQ(top[fffd].get<double>(), -1.0);
  EXPECT_DOUBLE_EQ(top["a"].get<double>(), -0.5);

  GenerateRequest req;
  std::vector<TokenLogprob> lps = {{"\xE2\x82", -1.0, {{"\xE2\x82", -1.0}, {"\xE2", -2.0}}}};
  Json c = completion_response(req, "cmpl-1", 1, "tiny", "\xE2\x82", "length", &lps, Usage{1, 1});
  EXPECT_EQ(c["choices"][0]["text"], fffd);
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"][0], fffd);
  EXPECT_EQ(c["choices"][0]["logprobs"]["top_logprobs"][0].size(), 1u);
  EXPECT_DOUBLE_EQ(c["choices"][0]["logprobs"]["top_logprobs"][0][fffd].get<double>(), -1.0);
  // The serialised body is valid UTF-8 as it is (nothing left for the serialiser to replace).
  EXPECT_TRUE(model::unicode::is_valid_utf8(dump_json(c)));

  req.endpoint = Endpoint::kChat;
  Json chat = completion_response(req, "chatcmpl-1", 1, "tiny", "", "length", &lps, Usage{1, 1});
  const Json& item = chat["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(item["token"], fffd);
  EXPECT_EQ(item["bytes"], Json({0xE2, 0x82}));
  ASSERT_EQ(item["top_logprobs"].size(), 2u);  // chat lists every alternative, with its own bytes
  EXPECT_EQ(item["top_logprobs"][1]["bytes"], Json({0xE2}));
}

TEST(Api, EchoedPromptTokensHaveNullFirstEntriesAndOffsetsIntoTheText) {
  GenerateRequest req;
  req.echo = true;
  TokenLogprob bos{"<s>", 0, {}, true, 0};
  TokenLogprob hi{"Hi", -2.0, {{"Hi", -1.5}}, false, 2};
  TokenLogprob gen{"!", -0.1, {{"!", -0.1}}};
  std::vector<TokenLogprob> lps = {bos, hi, gen};
  Json c = completion_response(req, "cmpl-1", 1, "tiny", "Hi!", "length", &lps, Usage{2, 1});
  const Json& lp = c["choices"][0]["logprobs"];
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["tokens"], Json({"<s>", "Hi", "!"}));
  EXPECT_EQ(lp["text_offset"], Json({0, 0, 2}));
}

TEST(Api, AnUnknownModelIsNotFound) {
  auto r = refuse(R"({"model":"gpt-9","prompt":"x"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.code, "model_not_found");
}

TEST(Api, CompleteUtf8PrefixHoldsBackACutCharacter) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  const std::string euro = "\xE2\x82\xAC";  // 3 bytes
  EXPECT_EQ(complete_utf8_prefix("a" + euro), 4u);
  EXPECT_EQ(complete_utf8_prefix("a" + euro.substr(0, 2)), 1u);
  EXPECT_EQ(complete_utf8_prefix("a" + euro.substr(0, 1)), 1u);
  const std::string emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(complete_utf8_prefix(emoji.substr(0, 3)), 0u);
  EXPECT_EQ(complete_utf8_prefix(emoji), 4u);
}

TEST(Api, StopSafePrefixHoldsBackAPossibleStopStringStart) {
  EXPECT_EQ(stop_safe_prefix("hello wor", {"world"}), 6u);
  EXPECT_EQ(stop_safe_prefix("hello", {"xyz"}), 5u);
  EXPECT_EQ(stop_safe_prefix("ab", {"abc", "b"}), 0u);
}

TEST(Api, ResponsesHaveTheOpenAiShapes) {
  GenerateRequest req;
  req.endpoint = Endpoint::kCompletions;
  std::vector<TokenLogprob> lps = {{"he", -0.5, {{"he", -0.5}, {"ha", -1.5}}}, {"llo", -0.1, {}}};
  Json c = completion_response(req, "cmpl-1", 100, "tiny", "hello", "length", &lps, Usage{3, 2});
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hello");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], Json({"he", "llo"}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], Json({0, 2}));
  EXPECT_DOUBLE_EQ(c["choices"][0]["logprobs"]["top_logprobs"][0]["ha"].get<double>(), -1.5);
  EXPECT_EQ(c["usage"]["total_tokens"], 5);

  req.endpoint = Endpoint::kChat;
  Json chat = completion_response(req, "chatcmpl-1", 100, "tiny", "hi", "stop", &lps, Usage{3, 2});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["token"], "he");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "ha");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["bytes"], Json({104, 101}));

  Json first = stream_chunk(req, "chatcmpl-1", 100, "tiny", "h", nullptr, 0, "", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  Json last = stream_chunk(req, "chatcmpl-1", 100, "tiny", "", nullptr, 1, "stop", false);
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(sse_event(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace infergate::runtime::server
