// The reason table: stable, distinct, complete, and documented in docs/agent.md.
#include "infergate/agent/reasons.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

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

// The table rows of a Markdown document, as trimmed cells.
std::vector<std::vector<std::string>> table_rows(const std::string& doc) {
  std::vector<std::vector<std::string>> rows;
  size_t pos = 0;
  while (pos < doc.size()) {
    size_t nl = doc.find('\n', pos);
    std::string line = doc.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? doc.size() : nl + 1;
    if (line.empty() || line[0] != '|') continue;
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t bar = line.find('|', start); bar != std::string::npos; bar = line.find('|', start)) {
      std::string cell = line.substr(start, bar - start);
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
      start = bar + 1;
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(Reasons, AreAllListedInTheDocsWithTheirExitCodes) {
  auto doc = read_file(std::string(INFERGATE_SOURCE_DIR) + "/docs/agent.md");
  ASSERT_TRUE(doc.ok()) << doc.error().to_string();
  auto rows = table_rows(*doc);
  for (const auto& r : all_reasons()) {
    bool found = std::any_of(rows.begin(), rows.end(), [&](const std::vector<std::string>& row) {
      return row.size() >= 2 && row[0] == std::to_string(r.exit_code) &&
             row[1] == "`" + std::string(r.word) + "`";
    });
    EXPECT_TRUE(found) << "docs/agent.md lacks the row | " << r.exit_code << " | `" << r.word << "` |";
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
