// The reason table: stable, distinct, complete, and documented in docs/agent.md.
#include "infergate/agent/reasons.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "infergate/common/fs.h"

namespace infergate::agent {
namespace {

TEST(Reasons, HaveDistinctWordsAndExitCodes) {
  std::set<std::string_view> words;
  std::set<int> codes;
  for (const auto& r : all_reasons()) {
    EXPECT_TRUE(words.insert(r.word).second) << r.word;
    EXPECT_TRUE(codes.insert(r.exit_code).second) << r.exit_code;
    EXPECT_GE(r.exit_code, 0);
    EXPECT_LE(r.exit_code, 127);  // 128+ look like signals to a shell
    EXPECT_NE(r.exit_code, 1);    // 1 is what anything else returns on failure
    EXPECT_EQ(r.exit_code == 0, r.reason == Reason::kVerified);
    EXPECT_EQ(&reason_info(r.reason), &r);
  }
}

TEST(Reasons, CoverEveryEnumerator) {
  for (int i = 0; i <= static_cast<int>(Reason::kInternalError); ++i) {
    auto r = static_cast<Reason>(i);
    EXPECT_EQ(reason_info(r).reason, r) << i;
  }
}

TEST(Reasons, KeepTheirPublishedExitCodes) {
  // The operator maps these; changing one is a breaking change.
  EXPECT_EQ(exit_code(Reason::kUsageError), 2);
  EXPECT_EQ(exit_code(Reason::kSignatureMissing), 10);
  EXPECT_EQ(exit_code(Reason::kManifestMalformed), 21);
  EXPECT_EQ(exit_code(Reason::kMissingFile), 30);
  EXPECT_EQ(exit_code(Reason::kDigestMismatch), 33);
  EXPECT_EQ(exit_code(Reason::kIoError), 40);
  EXPECT_EQ(exit_code(Reason::kExecFailed), 127);
}

TEST(Reasons, AreAllListedInTheDocsWithTheirExitCodes) {
  auto doc = read_file(std::string(INFERGATE_SOURCE_DIR) + "/docs/agent.md");
  ASSERT_TRUE(doc.ok()) << doc.error().to_string();
  for (const auto& r : all_reasons()) {
    std::regex row("\\|\\s*" + std::to_string(r.exit_code) + "\\s*\\|\\s*`" + std::string(r.word) +
                   "`\\s*\\|");
    EXPECT_TRUE(std::regex_search(*doc, row))
        << "docs/agent.md lacks the row | " << r.exit_code << " | `" << r.word << "` |";
  }
}

TEST(ReasonOf, ReadsOurWordsAndFallsBackOnTheCode) {
  EXPECT_EQ(reason_of(refusal(Reason::kDigestMismatch, "x")), Reason::kDigestMismatch);
  EXPECT_EQ(reason_of(Error(ErrorCode::kInvalidArgument, "x", "ManifestMalformed")),
            Reason::kManifestMalformed);
  EXPECT_EQ(reason_of(Error(ErrorCode::kIo, "x")), Reason::kIoError);
  EXPECT_EQ(reason_of(Error(ErrorCode::kPermissionDenied, "x")), Reason::kPermissionDenied);
  EXPECT_EQ(reason_of(Error(ErrorCode::kInvalidArgument, "x", "SomethingElse")), Reason::kInternalError);
  EXPECT_EQ(reason_of(Error(ErrorCode::kInvalidArgument, "x", "Verified")), Reason::kInternalError);
}

TEST(FileErrnoError, MapsErrnoToReasons) {
  EXPECT_EQ(reason_of(file_errno_error("open", "a", ELOOP)), Reason::kSymlink);
  EXPECT_EQ(reason_of(file_errno_error("open", "a", EACCES)), Reason::kPermissionDenied);
  EXPECT_EQ(reason_of(file_errno_error("open", "a", EPERM)), Reason::kPermissionDenied);
  EXPECT_EQ(reason_of(file_errno_error("open", "a", ENOENT)), Reason::kMissingFile);
  EXPECT_EQ(reason_of(file_errno_error("read", "a", EIO)), Reason::kIoError);
  Error e = file_errno_error("read", "dir/a", EIO);
  EXPECT_EQ(e.detail("file"), "dir/a");
  EXPECT_NE(e.message().find("dir/a"), std::string::npos);
}

}  // namespace
}  // namespace infergate::agent
