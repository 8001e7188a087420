// Label selectors in the cache.
#include "infergate/operator/cache/label_selector.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

namespace infergate::op::cache {
namespace {

using infergate::testing::refused;

Json obj(Json labels) { return {{"metadata", {{"labels", labels}}}}; }

TEST(LabelSelector, MatchesEqualitySetAndExistence) {
  Json o = obj({{"serving.infergate.dev/model", "glm"}, {"serving.infergate.dev/track", "stable"}});
  EXPECT_TRUE(LabelSelector::parse("serving.infergate.dev/model=glm")->matches(o));
  EXPECT_TRUE(LabelSelector::parse("serving.infergate.dev/model==glm, serving.infergate.dev/track!=canary")
                  ->matches(o));
  EXPECT_TRUE(LabelSelector::parse("serving.infergate.dev/track in (stable,canary)")->matches(o));
  EXPECT_FALSE(LabelSelector::parse("serving.infergate.dev/track notin (stable)")->matches(o));
  EXPECT_TRUE(LabelSelector::parse("serving.infergate.dev/model")->matches(o));
  EXPECT_FALSE(LabelSelector::parse("!serving.infergate.dev/model")->matches(o));
  EXPECT_TRUE(LabelSelector::parse("")->matches(o));
  EXPECT_FALSE(LabelSelector::parse("a=b")->matches(Json::object()));
  EXPECT_TRUE(LabelSelector::parse("a!=b")->matches(Json::object()));
}

TEST(LabelSelector, RefusesMalformedSelectors) {
  for (const char* s : {"a in b", "a in (b", "a=b,", "=b", "a ~ b", "a=b c=d"}) {
    EXPECT_TRUE(refused(LabelSelector::parse(s), "", {std::string("label selector \"") + s + "\""})) << s;
  }
}

}  // namespace
}  // namespace infergate::op::cache
