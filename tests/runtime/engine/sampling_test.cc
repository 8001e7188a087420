// Sampling: greedy, temperature, top-k, top-p, seeds, log-probabilities, parameter validation.
#include "infergate/engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace infergate::runtime::engine {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

TEST(Sampling, GreedyPicksTheFirstMaximumAndDrawsNothing) {
  SamplingParams p;
  Rng rng(1), untouched(1);
  SampledToken t = sample_token(kLogits, p, rng);
  EXPECT_EQ(t.token, 1);
  EXPECT_EQ(rng.next(), untouched.next());
}

TEST(Sampling, LogprobsAreTheUntemperedLogSoftmaxWithTopKMostLikelyFirst) {
  SamplingParams p;
  p.temperature = 0.7;
  p.top_logprobs = 3;
  Rng rng(5);
  SampledToken t = sample_token(kLogits, p, rng);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_NEAR(t.logprob, kLogits[static_cast<size_t>(t.token)] - std::log(z), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_EQ(t.top[1].token, 3);
  EXPECT_EQ(t.top[2].token, 2);
  EXPECT_NEAR(t.top[0].logprob, 3.0 - std::log(z), 1e-5);
}

TEST(Sampling, TheSameSeedGivesTheSameStream) {
  SamplingParams p;
  p.temperature = 1.0;
  Rng a(42), b(42), c(43);
  std::vector<int32_t> x, y, z;
  for (int i = 0; i < 50; ++i) {
    x.push_back(sample_token(kLogits, p, a).token);
    y.push_back(sample_token(kLogits, p, b).token);
    z.push_back(sample_token(kLogits, p, c).token);
  }
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  SamplingParams p;
  p.temperature = 2.0;
  Rng rng(7);
  std::map<int32_t, int> n;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++n[sample_token(kLogits, p, rng).token];
  double z = 0;
  for (float l : kLogits) z += std::exp(l / 2.0);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double want = std::exp(kLogits[i] / 2.0) / z;
    EXPECT_NEAR(n[static_cast<int32_t>(i)] / static_cast<double>(draws), want, 0.015) << i;
  }
}

TEST(Sampling, TopKAndTopPRestrictTheCandidates) {
  SamplingParams p;
  p.temperature = 5.0;  // nearly uniform: the cut decides
  p.top_k = 2;
  Rng rng(3);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = sample_token(kLogits, p, rng).token;
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  p.top_k = 0;
  p.temperature = 1.0;
  p.top_p = 0.3;  // token 1 alone holds about 0.38 of the mass
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sample_token(kLogits, p, rng).token, 1);
}

TEST(Sampling, RefusesBadParametersNamingTheField) {
  auto field = [](SamplingParams p) { return validate_sampling(p).error().detail("field"); };
  SamplingParams p;
  p.temperature = -1;
  EXPECT_EQ(field(p), "temperature");
  p = {};
  p.temperature = NAN;
  EXPECT_EQ(field(p), "temperature");
  p = {};
  p.top_p = 0;
  EXPECT_EQ(field(p), "top_p");
  p = {};
  p.top_k = -2;
  EXPECT_EQ(field(p), "top_k");
  p = {};
  p.max_tokens = -1;
  EXPECT_EQ(field(p), "max_tokens");
  p = {};
  p.top_logprobs = 21;
  EXPECT_EQ(field(p), "top_logprobs");
  p = {};
  p.stop_strings = {""};
  EXPECT_EQ(field(p), "stop");
  EXPECT_TRUE(validate_sampling(SamplingParams{}).ok());
}

TEST(Sampling, UniformDrawsAreInTheUnitInterval) {
  Rng rng(0);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace infergate::runtime::engine
