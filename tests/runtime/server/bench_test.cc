// Traffic replay: the arrival schedule, percentiles and the prompt file format.
#include "infergate/runtime/server/bench.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

namespace infergate::runtime::server {
namespace {

using infergate::testing::refused;

TEST(Bench, PoissonArrivalsAreDeterministicPerSeedWithTheAskedRate) {
  auto a = poisson_arrivals(50, 100, 7);
  auto b = poisson_arrivals(50, 100, 7);
  auto c = poisson_arrivals(50, 100, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // 5000 expected arrivals; a Poisson count has sd ~71: 5 sd either side.
  EXPECT_GT(a.size(), 4640u);
  EXPECT_LT(a.size(), 5360u);
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GT(a[i], a[i - 1]);
  EXPECT_LT(a.back(), 100.0);
  EXPECT_TRUE(poisson_arrivals(0, 10, 1).empty());
}

TEST(Bench, PercentilesUseNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  Percentiles p = percentiles(v);
  EXPECT_DOUBLE_EQ(p.p50, 50);
  EXPECT_DOUBLE_EQ(p.p95, 95);
  EXPECT_DOUBLE_EQ(p.p99, 99);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_EQ(p.count, 100u);
  EXPECT_EQ(percentiles({}).count, 0u);
}

TEST(Bench, TheBundledPromptSetCoversTheFourWorkloads) {
  auto p = parse_prompts(default_prompts_jsonl(), "default");
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  bool summary = false, code = false, multi_turn = false, retrieval = false;
  for (const auto& x : *p) {
    if (x.name.find("summar") != std::string::npos) summary = true;
    if (x.name.find("code") != std::string::npos) code = true;
    if (x.endpoint == Endpoint::kChat && x.messages.size() >= 3) multi_turn = true;
    if (x.name.find("retrieval") != std::string::npos) retrieval = true;
  }
  EXPECT_TRUE(summary && code && multi_turn && retrieval);
}

TEST(Bench, RefusesBadPromptLinesNamingTheLine) {
  auto bad_kind = parse_prompts("{\"kind\":\"image\",\"prompt\":\"x\"}\n", "p.jsonl");
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.error().message().find("p.jsonl:1"), std::string::npos);
  auto no_prompt = parse_prompts("# c\n\n{\"kind\":\"completion\"}\n", "p.jsonl");
  ASSERT_FALSE(no_prompt.ok());
  EXPECT_NE(no_prompt.error().message().find("p.jsonl:3"), std::string::npos);
  EXPECT_TRUE(refused(parse_prompts("not json\n", "p"), "InvalidJson", {"p:1"}));
  EXPECT_TRUE(refused(parse_prompts("", "p"), "InvalidPrompts", {"no prompts"}));
  EXPECT_TRUE(refused(parse_prompts("{\"prompt\":\"x\",\"max_tokens\":0}", "p"), "InvalidPrompts",
                      {"'max_tokens' must be at least 1"}));
}

TEST(Bench, RefusesBadRatesAndUrls) {
  std::vector<BenchPrompt> prompts(1);
  BenchOptions o;
  o.url = "http://127.0.0.1:1";
  o.rate = 0;
  EXPECT_EQ(run_bench(o, prompts).error().reason(), "BadFlag");
  o.rate = 1;
  o.duration = -1;
  EXPECT_EQ(run_bench(o, prompts).error().reason(), "BadFlag");
  o.duration = 1;
  o.url = "ftp://x";
  EXPECT_EQ(run_bench(o, prompts).error().reason(), "BadUrl");
}

}  // namespace
}  // namespace infergate::runtime::server
