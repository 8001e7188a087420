// MoE routing (moe_route_ref): the scores, the group limit, the selection bias, top-k order and the
// weights, on cases small enough to check by hand, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infergate/kernels/ref.h"

namespace infergate::kernels {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Routed {
  Status status;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const MoeRouting& r, const std::vector<float>& logits) {
  const int64_t t = static_cast<int64_t>(logits.size()) / r.num_experts;
  Routed out;
  out.experts.assign(static_cast<size_t>(t * r.top_k), -1);
  out.weights.assign(static_cast<size_t>(t * r.top_k), 0.0f);
  out.status = moe_route_ref(r, contiguous<const float>(logits.data(), t, r.num_experts), out.experts.data(),
                             out.weights.data());
  return out;
}

TEST(MoeRoute, TopKBySigmoidScoreBestFirstWithRenormalisedScaledWeights) {
  MoeRouting r;
  r.num_experts = 4;
  r.top_k = 2;
  r.scaling = 2.5f;
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.0f};
  Routed got = route(r, logits);
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_EQ(got.experts, (std::vector<int32_t>{2, 3}));
  const double s2 = sigmoid(2.0), s3 = sigmoid(1.0);
  EXPECT_NEAR(got.weights[0], 2.5 * s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(got.weights[1], 2.5 * s3 / (s2 + s3), 1e-6);
  r.normalize = false;
  got = route(r, logits);
  EXPECT_NEAR(got.weights[0], 2.5 * s2, 1e-6) << "without norm_topk_prob the scores are used as they are";
}

TEST(MoeRoute, TheBiasChangesWhichExpertsButNeverTheirWeights) {
  MoeRouting r;
  r.num_experts = 4;
  r.top_k = 1;
  r.normalize = false;
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.5f};
  r.bias = bias.data();
  // Expert 2 has the best score, but expert 3's bias lifts it above: 3 is chosen with its own score.
  Routed got = route(r, {0.0f, 0.0f, 1.0f, 0.2f});
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.experts[0], 3);
  EXPECT_NEAR(got.weights[0], sigmoid(0.2), 1e-6);
}

TEST(MoeRoute, OnlyTheBestGroupsByTheirTwoBestScoresAreEligible) {
  // 6 experts in 3 groups of 2; one group kept. Group 0 has the single best expert (logit 3) but a
  // weak partner; group 1's two experts sum higher, so the token gets group 1's experts only.
  MoeRouting r;
  r.num_experts = 6;
  r.top_k = 2;
  r.num_groups = 3;
  r.topk_groups = 1;
  const std::vector<float> logits = {3.0f, -4.0f, 1.5f, 1.5f, -1.0f, -1.0f};
  Routed got = route(r, logits);
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.experts, (std::vector<int32_t>{2, 3})) << "ties go to the lower index first";
  EXPECT_NEAR(got.weights[0], 0.5, 1e-6);
  // Without the group limit the best expert overall is chosen.
  r.num_groups = 1;
  got = route(r, logits);
  EXPECT_EQ(got.experts[0], 0);
  // Two groups kept: expert 0 (group 0) and one of group 1.
  r.num_groups = 3;
  r.topk_groups = 2;
  got = route(r, logits);
  EXPECT_EQ(got.experts, (std::vector<int32_t>{0, 2}));
}

TEST(MoeRoute, EachTokenIsRoutedOnItsOwn) {
  MoeRouting r;
  r.num_experts = 3;
  r.top_k = 1;
  Routed got = route(r, {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f});
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.experts, (std::vector<int32_t>{0, 2}));
  EXPECT_FLOAT_EQ(got.weights[0], 1.0f);
}

TEST(MoeRoute, SoftmaxScoringNormalisesOverAllExperts) {
  MoeRouting r;
  r.num_experts = 3;
  r.top_k = 1;
  r.softmax = true;
  r.normalize = false;
  Routed got = route(r, {0.0f, std::log(3.0f), 0.0f});
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.experts[0], 1);
  EXPECT_NEAR(got.weights[0], 0.6, 1e-6);
}

TEST(MoeRoute, RefusesRoutingTheExpertCountCannotHoldAndNonFiniteLogits) {
  auto refused = [](MoeRouting r, std::vector<float> logits, const char* what) {
    Routed got = route(r, logits);
    EXPECT_FALSE(got.status.ok()) << what;
    return got.status.message();
  };
  MoeRouting r;
  r.num_experts = 4;
  r.top_k = 5;
  EXPECT_NE(refused(r, {0, 0, 0, 0}, "top_k > experts").find("top_k"), std::string::npos);
  r.top_k = 2;
  r.num_groups = 3;
  EXPECT_NE(refused(r, {0, 0, 0, 0}, "groups do not divide").find("num_groups"), std::string::npos);
  r.num_groups = 4;
  const std::string one = refused(r, {0, 0, 0, 0}, "groups of one");
  EXPECT_NE(one.find("two best experts"), std::string::npos) << one;
  r.num_groups = 2;
  r.topk_groups = 1;
  r.top_k = 3;
  const std::string small = refused(r, {0, 0, 0, 0}, "one group of two cannot hold three");
  EXPECT_NE(small.find("1 groups of 2"), std::string::npos) << small;
  r.top_k = 2;
  const std::string m = refused(r, {0, NAN, 0, 0}, "NaN logit");
  EXPECT_NE(m.find("token 0"), std::string::npos) << m;
}

}  // namespace
}  // namespace infergate::kernels
