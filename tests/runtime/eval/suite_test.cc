// Suites: the bundled one, needle expansion, chat rendering, and refusals that name the field.
#include "infergate/runtime/eval/suite.h"

#include <gtest/gtest.h>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "testing.h"

namespace infergate::runtime::eval {
namespace {

std::string minimal(const std::string& tasks, const std::string& extra = "") {
  return R"({"name":"t","perplexity_text":"some text here",)" + extra + R"("tasks":)" + tasks + "}";
}

void expect_refused(const std::string& text, const std::string& needle) {
  auto s = parse_suite(text, "test.json");
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.error().reason(), "InvalidSuite");
  EXPECT_NE(s.error().message().find(needle), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("test.json"), std::string::npos) << s.error().message();
}

TEST(Suite, BundledDefaultCoversEveryKindWithNeedlesAtThreeLengthsAndDepths) {
  auto s = load_suite("default");
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->name, "default");
  EXPECT_EQ(s->top_logprobs, 20);
  EXPECT_GE(s->count(TaskKind::kSummarisation), 1u);
  EXPECT_GE(s->count(TaskKind::kCode), 1u);
  EXPECT_GE(s->count(TaskKind::kChat), 1u);
  EXPECT_EQ(s->count(TaskKind::kNeedle), 9u);
  EXPECT_GE(s->count(TaskKind::kJson), 1u);
  EXPECT_FALSE(s->perplexity_text.empty());
  std::set<int64_t> lengths;
  std::set<double> depths;
  for (const auto& t : s->tasks) {
    if (t.kind != TaskKind::kNeedle) continue;
    lengths.insert(t.context_words);
    depths.insert(t.depth);
    EXPECT_NE(t.prompt.find(t.answer), std::string::npos) << t.id;
  }
  EXPECT_EQ(lengths.size(), 3u);
  EXPECT_EQ(depths.size(), 3u);
  EXPECT_EQ(bundled_suite_names(), std::vector<std::string>{"default"});
}

TEST(Suite, NeedleSitsAtTheSentenceBoundaryNearestItsDepth) {
  const std::string hay = "One two three. Four five six. Seven eight nine. Ten eleven twelve.";
  const std::string start = needle_prompt(hay, "NEEDLE 42.", "Q?", 12, 0.0);
  EXPECT_EQ(start.rfind("NEEDLE 42. One two three.", 0), 0u) << start;
  const std::string end = needle_prompt(hay, "NEEDLE 42.", "Q?", 12, 1.0);
  EXPECT_NE(end.find("twelve. NEEDLE 42.\n\nQuestion: Q?\nAnswer:"), std::string::npos) << end;
  const std::string mid = needle_prompt(hay, "NEEDLE 42.", "Q?", 12, 0.5);
  EXPECT_NE(mid.find("six. NEEDLE 42. Seven"), std::string::npos) << mid;
  // The haystack's words are cycled up to the length asked.
  const std::string longer = needle_prompt(hay, "N 1.", "Q?", 30, 0.5);
  size_t words = 0;
  for (size_t i = 0; i < longer.find("\n\n"); ++i) words += longer[i] == ' ';
  EXPECT_EQ(words + 1, 32u);  // 30 haystack words + the needle's two
}

TEST(Suite, ChatIsRenderedAsChatMlEndingWithTheAssistantTurn) {
  EXPECT_EQ(render_chat({{"system", "S"}, {"user", "Hi"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Suite, ParsesEveryTaskKindWithDefaults) {
  auto s = parse_suite(minimal(R"([
      {"id":"p","kind":"text","prompt":"hello"},
      {"id":"c","kind":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":5},
      {"id":"j","kind":"json","prompt":"JSON: {","required_keys":["a"]},
      {"id":"n","kind":"needle","haystack":"a b c.","needle":"Code 9.","question":"Code?","answer":"9",
       "context_words":[4],"depths":[0.5, 1]}])",
                               R"("max_tokens":7,"top_logprobs":5,"seed":3,)"),
                       "t.json");
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  ASSERT_EQ(s->tasks.size(), 5u);
  EXPECT_EQ(s->top_logprobs, 5);
  EXPECT_EQ(s->seed, 3u);
  EXPECT_EQ(s->tasks[0].max_tokens, 7);
  EXPECT_EQ(s->tasks[1].max_tokens, 5);
  EXPECT_EQ(s->tasks[2].required_keys, std::vector<std::string>{"a"});
  EXPECT_EQ(s->tasks[3].id, "n-4w-50pct");
  EXPECT_EQ(s->tasks[4].id, "n-4w-100pct");
}

TEST(Suite, RefusesBadSuitesNamingTheField) {
  expect_refused("[1]", "expected a JSON object");
  expect_refused("{", "test.json");
  expect_refused(R"({"name":"t","tasks":[{"id":"a","kind":"text","prompt":"x"}]})", "perplexity_text");
  expect_refused(minimal("[]"), "tasks: must not be empty");
  expect_refused(minimal(R"([{"id":"a","kind":"poem","prompt":"x"}])"), "tasks[0].kind");
  expect_refused(minimal(R"([{"id":"a","kind":"text","prompt":"x","max_tokens":0}])"), "tasks[0].max_tokens");
  expect_refused(minimal(R"([{"id":"a","kind":"text"}])"), "tasks[0].prompt");
  expect_refused(minimal(R"([{"id":"a b","kind":"text","prompt":"x"}])"), "tasks[0].id");
  expect_refused(minimal(R"([{"id":"a","kind":"text","prompt":"x"},{"id":"a","kind":"code","prompt":"y"}])"),
                 "used twice");
  expect_refused(minimal(R"([{"id":"a","kind":"text","prompt":"x","colour":1}])"),
                 "tasks[0].colour: unknown field");
  expect_refused(minimal(R"([{"id":"a","kind":"chat","messages":[{"role":"assistant","content":"x"}]}])"),
                 "last message must be the user's");
  expect_refused(minimal(R"([{"id":"a","kind":"chat","messages":[{"role":"robot","content":"x"}]}])"),
                 "tasks[0].messages[0].role");
  expect_refused(minimal(R"([{"id":"n","kind":"needle","haystack":"a b.","needle":"Code 9.","question":"?",
                              "answer":"7","context_words":[4],"depths":[0.5]}])"),
                 "does not occur in the needle");
  expect_refused(minimal(R"([{"id":"n","kind":"needle","haystack":"a 9 b.","needle":"Code 9.","question":"?",
                              "answer":"9","context_words":[4],"depths":[0.5]}])"),
                 "tasks[0].haystack");
  expect_refused(minimal(R"([{"id":"n","kind":"needle","haystack":"a b.","needle":"Code 9.","question":"?",
                              "answer":"9","context_words":[4],"depths":[1.5]}])"),
                 "tasks[0].depths[0]");
  expect_refused(minimal(R"([{"id":"n","kind":"needle","haystack":"a b.","needle":"Code 9.","question":"?",
                              "answer":"9","context_words":[0],"depths":[0.5]}])"),
                 "tasks[0].context_words[0]");
  expect_refused(minimal(R"([{"id":"a","kind":"text","prompt":"x","required_keys":["k"]}])"),
                 "required_keys");
  expect_refused(minimal(R"([{"id":"a","kind":"text","prompt":"x"}])", R"("top_logprobs":21,)"),
                 "top_logprobs");
}

TEST(Suite, LoadsACustomSuiteFromAFileAndRefusesUnknownNames) {
  TempDir d = testing::temp_dir();
  const auto path = d.path() / "mine.json";
  ASSERT_TRUE(write_file_atomic(path, minimal(R"([{"id":"a","kind":"code","prompt":"int main("}])")).ok());
  auto s = load_suite(path.string());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->tasks.at(0).kind, TaskKind::kCode);

  auto missing = load_suite((d.path() / "absent.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().reason(), "SuiteUnreadable");

  auto unknown = load_suite("nightly");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().reason(), "UnknownSuite");
  EXPECT_NE(unknown.error().message().find("default"), std::string::npos);
}

}  // namespace
}  // namespace infergate::runtime::eval
