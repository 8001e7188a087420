// The informer store and its indexes.
#include "infergate/operator/cache/store.h"

#include <gtest/gtest.h>

namespace infergate::op::cache {
namespace {

Object pod(const std::string& name, const std::string& model, const std::string& rv = "1") {
  return std::make_shared<const Json>(
      Json{{"metadata",
            {{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}, {"labels", {{"model", model}}}}}});
}

void index_by_model(Store& s) {
  s.add_index("model", [](const Json& o) {
    return std::vector<std::string>{o["metadata"]["labels"].value("model", "")};
  });
}

TEST(Store, UpsertReturnsThePreviousVersionAndReindexes) {
  Store s;
  index_by_model(s);
  EXPECT_EQ(s.upsert(pod("p", "a")), nullptr);
  auto old = s.upsert(pod("p", "b", "2"));
  ASSERT_NE(old, nullptr);
  EXPECT_EQ((*old)["metadata"]["resourceVersion"], "1");
  EXPECT_TRUE(s.by_index("model", "a").empty());
  EXPECT_EQ(s.by_index("model", "b").size(), 1u);
  EXPECT_EQ((*s.get("ns/p"))["metadata"]["resourceVersion"], "2");
}

TEST(Store, ReplaceReportsWhatDisappeared) {
  Store s;
  index_by_model(s);
  s.upsert(pod("p1", "a"));
  s.upsert(pod("p2", "a"));
  auto gone = s.replace({pod("p2", "a"), pod("p3", "c")});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ((*gone[0])["metadata"]["name"], "p1");
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.by_index("model", "a").size(), 1u);
  EXPECT_EQ(s.by_index("model", "c").size(), 1u);
}

TEST(Store, SnapshotsOutliveReplacement) {
  Store s;
  s.upsert(pod("p", "a"));
  Object held = s.get("ns/p");
  s.remove("ns/p");
  EXPECT_EQ(s.get("ns/p"), nullptr);
  EXPECT_EQ((*held)["metadata"]["name"], "p");
}

}  // namespace
}  // namespace infergate::op::cache
