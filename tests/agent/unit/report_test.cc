// Report lines: one JSON line, the documented fields, never over 4096 bytes.
#include "infergate/agent/report.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::agent {
namespace {

using infergate::testing::refused;

Json parse_line(const std::string& line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "more than one line";
  EXPECT_LE(line.size(), kMaxReportBytes);
  auto j = parse_json(line, "report");
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json();
}

TEST(RefusalReport, CarriesReasonMessageDetailsAndExitCode) {
  Error e = refusal(Reason::kDigestMismatch, "shard.safetensors: SHA-256 differs")
                .with_detail("file", "shard.safetensors")
                .with_detail("expected", "aa")
                .with_detail("actual", "bb");
  std::string line = refusal_report(e);
  EXPECT_EQ(line.rfind("{\"reason\":\"DigestMismatch\"", 0), 0u) << line;
  Json j = parse_line(line);
  EXPECT_EQ(j["reason"], "DigestMismatch");
  EXPECT_EQ(j["message"], "shard.safetensors: SHA-256 differs");
  EXPECT_EQ(j["file"], "shard.safetensors");
  EXPECT_EQ(j["expected"], "aa");
  EXPECT_EQ(j["actual"], "bb");
  EXPECT_EQ(j["exitCode"], 33);
}

TEST(RefusalReport, LeavesOutDetailsThatDoNotApply) {
  Json j = parse_line(refusal_report(refusal(Reason::kSignatureMissing, "absent")));
  EXPECT_FALSE(j.contains("file"));
  EXPECT_FALSE(j.contains("expected"));
  EXPECT_FALSE(j.contains("actual"));
  EXPECT_EQ(j["exitCode"], 10);
}

TEST(RefusalReport, FitsTheTerminationMessageLimitWhateverTheNames) {
  std::string control(5000, '\n');  // each byte becomes a six-byte escape
  std::string utf8;
  for (int i = 0; i < 3000; ++i) utf8 += "\xc3\xa9";
  Error e = refusal(Reason::kUnlistedFile, std::string(8000, 'm'))
                .with_detail("file", control + utf8)
                .with_detail("expected", std::string(9000, 'e'))
                .with_detail("actual", "\xff\xfe invalid utf-8");
  std::string line = refusal_report(e);
  Json j = parse_line(line);
  EXPECT_EQ(j["reason"], "UnlistedFile");
  EXPECT_EQ(j["exitCode"], 31);
  EXPECT_GT(line.size(), 2000u) << "shortened more than needed";
}

TEST(RefusalReport, NamesAnErrorWithoutOurReasonByItsCode) {
  Json j = parse_line(refusal_report(Error(ErrorCode::kIo, "read failed")));
  EXPECT_EQ(j["reason"], "IoError");
  EXPECT_EQ(j["exitCode"], 40);
}

TEST(SuccessReport, CarriesTheReleaseDigestAndCounts) {
  VerifiedRelease r;
  r.release_digest = "sha256:" + std::string(64, 'a');
  r.name = "glm-4-9b";
  r.version = 3;
  r.weight_format = "int8";
  r.created_at = "2026-01-01T00:00:00Z";
  r.files = 7;
  r.bytes = 1234;
  r.seconds = 0.5;
  std::string line = success_report(r);
  EXPECT_EQ(line.rfind("{\"reason\":\"Verified\"", 0), 0u);
  Json j = parse_line(line);
  EXPECT_EQ(j["releaseDigest"], r.release_digest);
  EXPECT_EQ(j["name"], "glm-4-9b");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["weightFormat"], "int8");
  EXPECT_EQ(j["files"], 7);
  EXPECT_EQ(j["bytes"], 1234);
  EXPECT_EQ(j["exitCode"], 0);
  EXPECT_FALSE(j.contains("expiresAt"));
  r.expires_at = "2026-02-01T00:00:00Z";
  EXPECT_EQ(parse_line(success_report(r))["expiresAt"], "2026-02-01T00:00:00Z");
}

TEST(WriteTerminationLog, RewritesAnExistingFileInPlace) {
  auto dir = *TempDir::create("report-test");
  auto path = dir.path() / "termination-log";
  ASSERT_TRUE(write_file_atomic(path, std::string(10000, 'x')).ok());
  struct stat before {};
  ::stat(path.c_str(), &before);
  ASSERT_TRUE(write_termination_log(path, "{\"reason\":\"Verified\"}\n").ok());
  struct stat after {};
  ::stat(path.c_str(), &after);
  EXPECT_EQ(before.st_ino, after.st_ino) << "a bind-mounted file cannot be renamed over";
  EXPECT_EQ(*read_file(path), "{\"reason\":\"Verified\"}\n");
}

TEST(WriteReportFile, ReplacesTheReport) {
  auto dir = *TempDir::create("report-test");
  ASSERT_TRUE(write_report_file(dir.path() / "r.json", "one\n").ok());
  ASSERT_TRUE(write_report_file(dir.path() / "r.json", "two\n").ok());
  EXPECT_EQ(*read_file(dir.path() / "r.json"), "two\n");
  EXPECT_TRUE(refused(write_report_file(dir.path() / "missing/r.json", "x\n"), "",
                      {"writing the report", "missing/r.json"}));
}

}  // namespace
}  // namespace infergate::agent
