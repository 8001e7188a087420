// The hashing pool: same digests whatever the thread count, and a stop at the first mismatch.
#include "infergate/agent/hashing/parallel_hasher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "agent_test_util.h"

namespace infergate::agent {
namespace {

using testing::write_file;
namespace fs = std::filesystem;

struct Files {
  TempDir tmp = *TempDir::create("pool-test");
  std::vector<HashJob> jobs;
  std::vector<std::string> contents;
  explicit Files(int n) {
    for (int i = 0; i < n; ++i) {
      std::string name = "f" + std::to_string(i);
      contents.push_back(std::string(static_cast<size_t>(i) * 10007 + 1, static_cast<char>('a' + i % 26)));
      write_file(tmp.path(), name, contents.back());
      struct stat st {};
      ::stat((tmp.path() / name).c_str(), &st);
      jobs.push_back({FileInfo::from_stat(name, st), std::nullopt, {}});
    }
  }
};

TEST(HashFiles, ReturnsDigestsInJobOrderForAnyThreadCount) {
  Files f(23);
  auto root = *ArtifactRoot::open(f.tmp.path());
  for (unsigned threads : {1u, 2u, 8u, 64u}) {
    ParallelHashOptions o;
    o.threads = threads;
    auto d = hash_files(root.fd(), f.jobs, o);
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    ASSERT_EQ(d->size(), f.jobs.size());
    for (size_t i = 0; i < f.jobs.size(); ++i)
      EXPECT_EQ((*d)[i], *sha256(f.contents[i])) << i << "/" << threads;
  }
}

TEST(HashFiles, RefusesTheFirstMismatchNamingBothDigests) {
  Files f(5);
  auto root = *ArtifactRoot::open(f.tmp.path());
  for (size_t i = 0; i < f.jobs.size(); ++i) f.jobs[i].expected = *sha256(f.contents[i]);
  f.jobs[3].expected = *sha256("something else");
  ParallelHashOptions o;
  o.threads = 2;
  auto d = hash_files(root.fd(), f.jobs, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "DigestMismatch");
  EXPECT_EQ(d.error().detail("file"), "f3");
  EXPECT_EQ(d.error().detail("expected"), sha256("something else")->hex());
  EXPECT_EQ(d.error().detail("actual"), sha256(f.contents[3])->hex());
}

TEST(HashFiles, AcceptsNoJobs) {
  Files f(0);
  auto root = *ArtifactRoot::open(f.tmp.path());
  auto d = hash_files(root.fd(), {});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(AvailableCpus, IsAtLeastOne) { EXPECT_GE(available_cpus(), 1u); }

}  // namespace
}  // namespace infergate::agent
