// The lockstep comparison on scripted targets, thresholds, the gate's JSON and the table.
#include "infergate/runtime/eval/compare.h"

#include <gtest/gtest.h>

#include <cmath>

#include "infergate/common/json.h"
#include "testing.h"

namespace infergate::runtime::eval {
namespace {

using testing::FakeTarget;

Suite one_task_suite(int32_t max_tokens, TaskKind kind = TaskKind::kText, std::string answer = "") {
  Suite s;
  s.name = "t";
  s.top_logprobs = 5;
  s.perplexity_text = "abcdefgh";
  Task t;
  t.id = "t0";
  t.kind = kind;
  t.prompt = "p:";
  t.max_tokens = max_tokens;
  t.answer = std::move(answer);
  s.tasks.push_back(t);
  return s;
}

TEST(Compare, IdenticalTargetsAgreeEverywhereWithZeroKlAndNoResync) {
  FakeTarget a, b;
  Suite s = one_task_suite(12);
  auto r = run_eval(s, a, b, {});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->metrics.pair.positions, 12);
  EXPECT_EQ(r->metrics.pair.top1_agreement, 1.0);
  EXPECT_NEAR(r->metrics.pair.mean_kl, 0.0, 1e-12);
  EXPECT_EQ(r->tasks.at(0).resyncs, 0);
  ASSERT_TRUE(r->metrics.perplexity_change.has_value());
  EXPECT_NEAR(*r->metrics.perplexity_change, 0.0, 1e-12);
  ASSERT_TRUE(r->noise_floor.has_value());
  EXPECT_EQ(r->noise_floor->top1_agreement, 1.0);
  EXPECT_EQ(r->noise_floor->positions, 12);
}

TEST(Compare, ADisagreementCountsOncePerPositionAndBothSidesResyncOnTheBaselineText) {
  FakeTarget a, b;
  // The prompt "p:" is 2 characters: the candidate's 4th generated token (context length 5) flips.
  b.flip_at = {5};
  Suite s = one_task_suite(10);
  EvalOptions o;
  o.noise_floor = false;
  auto r = run_eval(s, a, b, o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->metrics.pair.positions, 10);
  EXPECT_DOUBLE_EQ(r->metrics.pair.top1_agreement, 0.9);
  EXPECT_GT(r->metrics.pair.mean_kl, 0.0);
  EXPECT_EQ(r->tasks.at(0).resyncs, 1);
  // Round two: both were asked to continue from the prompt plus the baseline's first four tokens.
  ASSERT_EQ(a.requests.size(), 2u);
  ASSERT_EQ(b.requests.size(), 2u);
  EXPECT_EQ(a.requests[1].prompt, a.contexts[4]);
  EXPECT_EQ(b.requests[1].prompt, a.contexts[4]);
  EXPECT_EQ(a.requests[1].max_tokens, 6);
  // The free-running texts differ from the flip on.
  EXPECT_EQ(r->tasks[0].baseline_text.substr(0, 3), r->tasks[0].candidate_text.substr(0, 3));
  EXPECT_NE(r->tasks[0].baseline_text, r->tasks[0].candidate_text);
}

TEST(Compare, EveryComparedPositionHasTheSameContextOnBothSides) {
  FakeTarget a, b;
  b.flip_at = {3, 4, 8, 9};
  Suite s = one_task_suite(16);
  EvalOptions o;
  o.noise_floor = false;
  auto r = run_eval(s, a, b, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metrics.pair.positions, 16);
  // Per round the positions compared are a prefix of both sides' generations, which start from the same
  // context; the candidate's contexts for compared positions therefore appear among the baseline's.
  std::set<std::string> base(a.contexts.begin(), a.contexts.end());
  size_t matched = 0;
  for (const auto& c : b.contexts) matched += base.count(c);
  EXPECT_GE(matched, 16u);
  EXPECT_EQ(r->tasks[0].resyncs, 4);
  EXPECT_DOUBLE_EQ(r->metrics.pair.top1_agreement, 12.0 / 16.0);
}

TEST(Compare, NoiseFloorTakesTheBaselinesSecondPath) {
  FakeTarget a, b;
  Suite s = one_task_suite(4);
  EvalOptions o;
  o.noise_floor_prefill_chunk = 16;
  auto r = run_eval(s, a, b, o);
  ASSERT_TRUE(r.ok());
  bool chunked = false;
  for (const auto& req : a.requests) chunked |= req.prefill_chunk == 16;
  EXPECT_TRUE(chunked);
  for (const auto& req : b.requests) EXPECT_EQ(req.prefill_chunk, 0);
}

TEST(Compare, NoisyCandidateHasPositiveKlAndPerplexityChange) {
  FakeTarget a, b;
  b.noise = 2.0;
  Suite s = one_task_suite(24);
  auto r = run_eval(s, a, b, {});
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->metrics.pair.mean_kl, 0.001);
  ASSERT_TRUE(r->metrics.perplexity_change.has_value());
  EXPECT_NE(*r->metrics.perplexity_change, 0.0);
  EXPECT_NEAR(
      *r->metrics.perplexity_change,
      (*r->metrics.candidate_perplexity - *r->metrics.baseline_perplexity) / *r->metrics.baseline_perplexity,
      1e-12);
}

TEST(Compare, ATargetThatCannotScoreLeavesPerplexityUnmeasuredAndAThresholdInconclusive) {
  FakeTarget a, b;
  b.can_score = false;
  Suite s = one_task_suite(4);
  auto r = run_eval(s, a, b, {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->metrics.perplexity_change.has_value());
  EXPECT_NE(r->metrics.perplexity_note.find("no echo"), std::string::npos);
  Thresholds t;
  t.max_perplexity_change = 0.05;
  apply_thresholds(*r, t);
  EXPECT_FALSE(r->passed);
  EXPECT_TRUE(r->failed.empty());
  EXPECT_EQ(r->unmeasured, std::vector<std::string>{"perplexity_change"});
  Json j = Json::parse(result_json(*r));
  EXPECT_TRUE(j["metrics"]["perplexity_change"].is_null());
  EXPECT_EQ(j["inconclusive"], true);
}

TEST(Compare, NeedleAndJsonTasksPassWhenCorrectOrIdenticalToTheBaseline) {
  FakeTarget a, b;
  Suite s = one_task_suite(6, TaskKind::kNeedle, "zzz");  // never produced: correctness is false on both
  Task j;
  j.id = "j";
  j.kind = TaskKind::kJson;
  j.prompt = "q:";
  j.max_tokens = 6;
  s.tasks.push_back(j);
  EvalOptions o;
  o.noise_floor = false;
  auto same = run_eval(s, a, b, o);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->metrics.retrieval_accuracy, 1.0);
  EXPECT_EQ(same->metrics.format_following, 1.0);
  EXPECT_FALSE(same->tasks[0].candidate_correct);

  FakeTarget c;
  c.flip_at = {2};  // the very first generated token differs for both prompts ("p:" and "q:")
  auto differ = run_eval(s, a, c, o);
  ASSERT_TRUE(differ.ok());
  EXPECT_EQ(differ->metrics.retrieval_accuracy, 0.0);
  EXPECT_EQ(differ->metrics.format_following, 0.0);
  EXPECT_FALSE(differ->tasks[0].passed);
}

TEST(Compare, JsonFormatNeedsAnObjectWithTheRequiredKeys) {
  EXPECT_TRUE(follows_json_format("JSON: {", R"("a": 1, "b": "x"} and more)", {"a", "b"}));
  EXPECT_FALSE(follows_json_format("JSON: {", R"("a": 1} )", {"a", "b"}));
  EXPECT_TRUE(follows_json_format("Answer:", R"( here {"a": {"c": "}"}, "b": 2} done)", {"a", "b"}));
  EXPECT_FALSE(follows_json_format("Answer:", R"( [1, 2] )", {}));
  EXPECT_FALSE(follows_json_format("JSON: {", R"("a": 1, "b": )", {"a"}));
  EXPECT_FALSE(follows_json_format("x", "no braces at all", {}));
}

TEST(Compare, ThresholdsFailWithTheValueTheThresholdAndTheOperator) {
  FakeTarget a, b;
  b.noise = 2.0;
  Suite s = one_task_suite(16);
  auto r = run_eval(s, a, b, {});
  ASSERT_TRUE(r.ok());
  Thresholds t;
  t.max_mean_kl = 1e-9;
  t.min_top1_agreement = 0.0;
  apply_thresholds(*r, t);
  EXPECT_FALSE(r->passed);
  ASSERT_EQ(r->failed.size(), 1u);
  EXPECT_EQ(r->failed[0].metric, "mean_kl");
  EXPECT_EQ(r->failed[0].op, "<=");
  EXPECT_EQ(r->failed[0].threshold, 1e-9);
  EXPECT_EQ(r->failed[0].value, r->metrics.pair.mean_kl);

  Thresholds loose;
  loose.max_mean_kl = 100;
  loose.min_top1_agreement = 0.0;
  apply_thresholds(*r, loose);
  EXPECT_TRUE(r->passed);
  EXPECT_TRUE(r->failed.empty());
}

TEST(Compare, ThresholdsOutsideTheirRangeAreRefused) {
  Thresholds t;
  t.min_top1_agreement = 1.5;
  EXPECT_EQ(validate_thresholds(t).error().reason(), "InvalidThreshold");
  Thresholds n;
  n.max_mean_kl = std::nan("");
  EXPECT_FALSE(validate_thresholds(n).ok());
  Thresholds neg;
  neg.max_perplexity_change = -0.1;
  EXPECT_NE(validate_thresholds(neg).error().message().find("--max-perplexity-change"), std::string::npos);
  EXPECT_TRUE(validate_thresholds(Thresholds{0.9, 0.01, 0.05, 0.8, 0.8}).ok());
}

TEST(Compare, ResultJsonHasTheContractShapeAndStaysUnder4096Bytes) {
  EvalResult r;
  r.suite = std::string(200, 's');
  r.metrics.pair = {100, 0.97, 0.004, 0.3};
  r.metrics.perplexity_change = 0.012;
  r.metrics.retrieval_accuracy = 1.0;
  r.metrics.format_following = 1.0;
  r.noise_floor = PairMetrics{100, 1.0, 0.0, 0.0};
  for (const char* m :
       {"top1_agreement", "mean_kl", "perplexity_change", "retrieval_accuracy", "format_following"}) {
    r.failed.push_back({m, 0.123456789012345, 0.987654321098765, "<="});
  }
  const std::string text = result_json(r);
  EXPECT_LE(text.size(), kMaxResultJsonBytes);
  Json j = Json::parse(text);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["metrics"]["top1_agreement"], 0.97);
  EXPECT_EQ(j["metrics"]["mean_kl"], 0.004);
  EXPECT_EQ(j["metrics"]["perplexity_change"], 0.012);
  EXPECT_EQ(j["noise_floor"]["top1_agreement"], 1.0);
  EXPECT_EQ(j["noise_floor"]["mean_kl"], 0.0);
  ASSERT_EQ(j["failed"].size(), 5u);
  EXPECT_EQ(j["failed"][1]["metric"], "mean_kl");
  EXPECT_EQ(j["failed"][1]["op"], "<=");
  EXPECT_EQ(j["failed"][1]["threshold"], 0.987654);
  EXPECT_FALSE(j.contains("inconclusive"));

  const std::string err =
      error_json("default", Error(ErrorCode::kUnavailable, std::string(10000, 'x'), "TargetUnreachable"));
  EXPECT_LE(err.size(), kMaxResultJsonBytes);
  Json e = Json::parse(err);
  EXPECT_EQ(e["passed"], false);
  EXPECT_EQ(e["inconclusive"], true);
  EXPECT_EQ(e["error"]["reason"], "TargetUnreachable");
  EXPECT_FALSE(e.contains("metrics"));
}

TEST(Compare, TableShowsMetricsNoiseFloorThresholdsAndVerdict) {
  FakeTarget a, b;
  b.flip_at = {4};
  Suite s = one_task_suite(8);
  auto r = run_eval(s, a, b, {});
  ASSERT_TRUE(r.ok());
  Thresholds t;
  t.min_top1_agreement = 0.99;
  apply_thresholds(*r, t);
  const std::string table = result_table(*r, t);
  EXPECT_NE(table.find("top1_agreement        0.8750"), std::string::npos) << table;
  EXPECT_NE(table.find(">= 0.99"), std::string::npos) << table;
  EXPECT_NE(table.find("FAILED: top1_agreement 0.875 (must be >= 0.99)"), std::string::npos) << table;
  EXPECT_NE(table.find("t0"), std::string::npos);
}

}  // namespace
}  // namespace infergate::runtime::eval
