// INFERGATE_RETURN_IF_ERROR with .context(): the error must survive the temporary it came from
// (a dangling reference here is caught by the sanitizer build).
#include <gtest/gtest.h>

#include "infergate/common/result.h"

namespace infergate {
namespace {

Status fails() { return Error(ErrorCode::kIo, "disk on fire", "IoError").with_detail("file", "a"); }

Status caller() {
  INFERGATE_RETURN_IF_ERROR(fails().context("reading a"));
  return ok_status();
}

Result<int> value_caller() {
  INFERGATE_RETURN_IF_ERROR(Result<int>(7).context("unused"));
  INFERGATE_RETURN_IF_ERROR(Result<int>(Error(ErrorCode::kNotFound, "gone")).context("looking"));
  return 1;
}

TEST(ReturnIfError, KeepsTheErrorOfATemporaryWithContext) {
  Status st = caller();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message(), "reading a: disk on fire");
  EXPECT_EQ(st.error().reason(), "IoError");
  EXPECT_EQ(st.error().detail("file"), "a");
}

TEST(ReturnIfError, WorksOnValueResultsWithContext) {
  auto r = value_caller();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "looking: gone");
}

}  // namespace
}  // namespace infergate
