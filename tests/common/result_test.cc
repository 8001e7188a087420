// Result<T>, Status and Error behaviour.
#include "infergate/common/result.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

namespace infergate {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  INFERGATE_ASSIGN_OR_RETURN(int h, half(x).context("first half"));
  INFERGATE_ASSIGN_OR_RETURN(int q, half(h).context("second half"));
  return q;
}

Status check_even(int x) {
  INFERGATE_RETURN_IF_ERROR(half(x));
  return ok_status();
}

TEST(Result, CarriesValueOrError) {
  auto r = half(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  auto e = half(3);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.error().message(), "odd: 3");
}

TEST(Result, ContextGrowsAsTheErrorTravelsUp) {
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "second half: odd: 3");
  EXPECT_EQ(r.error().to_string(), "InvalidArgument: second half: odd: 3");
  EXPECT_EQ(*quarter(8), 2);
}

TEST(Result, StatusPropagatesErrors) {
  EXPECT_TRUE(check_even(2).ok());
  Status s = check_even(1);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "odd: 1");
}

TEST(Result, HoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(Error, ReasonAndDetailsAreKept) {
  Error e = Error(ErrorCode::kDataLoss, "digest mismatch")
                .with_reason("DigestMismatch")
                .with_detail("file", "a.bin");
  EXPECT_EQ(e.reason(), "DigestMismatch");
  EXPECT_EQ(e.detail("file"), "a.bin");
  EXPECT_EQ(e.detail("absent"), "");
  EXPECT_EQ(e.to_string(), "DigestMismatch: digest mismatch");
}

TEST(Error, ErrnoMapsToCodes) {
  EXPECT_EQ(errno_error("open x", ENOENT).code(), ErrorCode::kNotFound);
  EXPECT_EQ(errno_error("open x", EACCES).code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(errno_error("read x", EIO).code(), ErrorCode::kIo);
  EXPECT_NE(errno_error("open x", ENOENT).message().find("open x: "), std::string::npos);
}

}  // namespace
}  // namespace infergate
