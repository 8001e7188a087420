// File utilities: capped reads, atomic writes, temporary directories.
#include "infergate/common/fs.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include "common/refusal.h"

#include <fstream>

namespace infergate {
namespace {

using infergate::testing::refused;

namespace fs = std::filesystem;

TEST(ReadFile, RefusesFilesOverTheCapBeforeReading) {
  auto dir = *TempDir::create("fs-test");
  fs::path p = dir.path() / "big";
  std::ofstream(p) << std::string(1000, 'x');
  auto r = read_file(p, 999);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "TooLarge");
  EXPECT_EQ(read_file(p, 1000)->size(), 1000u);
}

TEST(ReadFile, NamesThePathOnError) {
  auto r = read_file("/nonexistent/infergate/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.error().message().find("/nonexistent/infergate/file"), std::string::npos);
}

TEST(WriteFileAtomic, ReplacesContentAndLeavesNoTemporaries) {
  auto dir = *TempDir::create("fs-test");
  fs::path p = dir.path() / "status.json";
  ASSERT_TRUE(write_file_atomic(p, "one").ok());
  ASSERT_TRUE(write_file_atomic(p, "two", 0600).ok());
  EXPECT_EQ(*read_file(p), "two");
  struct stat st {};
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  int entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(WriteFileAtomic, FailsCleanlyInAMissingDirectory) {
  auto st = write_file_atomic("/nonexistent/infergate/x", "data");
  EXPECT_TRUE(refused(st, "", {"/nonexistent/infergate"}));
  EXPECT_EQ(st.error().code(), ErrorCode::kNotFound) << st.error().to_string();
}

TEST(TempDir, RemovesItselfEvenWithReadOnlySubdirectories) {
  fs::path kept;
  {
    auto dir = *TempDir::create("fs-test");
    kept = dir.path();
    fs::create_directories(kept / "a/b");
    std::ofstream(kept / "a/b/f") << "x";
    chmod((kept / "a/b").c_str(), 0500);
    chmod((kept / "a").c_str(), 0500);
  }
  EXPECT_FALSE(fs::exists(kept));
}

}  // namespace
}  // namespace infergate
