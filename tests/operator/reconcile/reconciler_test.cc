// Request keys and Actions.
#include "infergate/operator/reconcile/reconciler.h"

#include <gtest/gtest.h>

namespace infergate::op::reconcile {
namespace {

using namespace std::chrono_literals;

TEST(Request, RoundTripsKeys) {
  EXPECT_EQ(Request::from_key("models/glm").namespace_, "models");
  EXPECT_EQ(Request::from_key("models/glm").name, "glm");
  EXPECT_EQ(Request::from_key("glm").key(), "glm");
  EXPECT_EQ((Request{"a", "b"}).key(), "a/b");
}

TEST(Action, MergeKeepsTheSoonerRequeue) {
  auto never = Action::await_change();
  auto soon = Action::requeue_after(5s);
  auto later = Action::requeue_after(30s);
  EXPECT_EQ(never.merge(soon), soon);
  EXPECT_EQ(later.merge(soon), soon);
  EXPECT_EQ(soon.merge(never), soon);
  EXPECT_FALSE(never.merge(never).requeue());
}

}  // namespace
}  // namespace infergate::op::reconcile
