// The tree against its manifest: building it as sha256sum would, and the order of refusals.
#include "infergate/agent/manifest/tree_check.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"

namespace infergate::agent {
namespace {

using testing::write_file;
namespace fs = std::filesystem;

struct Dir {
  TempDir tmp = *TempDir::create("tree-check-test");
  fs::path dir = tmp.path();
  ArtifactRoot root() { return *ArtifactRoot::open(dir); }
};

TEST(BuildManifest, ListsEveryFileButTheManifestAndTheRelease) {
  Dir d;
  write_file(d.dir, "a", "1");
  write_file(d.dir, "sub/b", "2");
  write_file(d.dir, "SHA256SUMS", "old");
  write_file(d.dir, "release.dsse.json", "{}");
  write_file(d.dir, "sub/release.dsse.json", "nested ones are ordinary files");
  auto m = build_manifest(d.root().fd());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->find("a")->digest, *sha256("1"));
  EXPECT_NE(m->find("sub/release.dsse.json"), nullptr);
  EXPECT_EQ(m->find("SHA256SUMS"), nullptr);
}

TEST(BuildManifest, RefusesANestedSha256sumsThatFindWouldSkip) {
  Dir d;
  write_file(d.dir, "a", "1");
  write_file(d.dir, "sub/SHA256SUMS", "x");
  auto m = build_manifest(d.root().fd());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "UnlistedFile");
  EXPECT_EQ(m.error().detail("file"), "sub/SHA256SUMS");
}

Manifest manifest_of(const std::map<std::string, std::string>& files) {
  std::vector<ManifestEntry> e;
  for (const auto& [p, c] : files) e.push_back({p, *sha256(c)});
  return *Manifest::from_entries(e);
}

TEST(CheckTree, AcceptsAMatchingTreeAndCountsIt) {
  Dir d;
  write_file(d.dir, "a", "1");
  write_file(d.dir, "b/c", "22");
  auto s = check_tree(d.root().fd(), manifest_of({{"a", "1"}, {"b/c", "22"}}), std::nullopt);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->files, 2u);
  EXPECT_EQ(s->bytes, 3u);
  EXPECT_EQ(s->sizes.at("b/c"), 2u);
}

TEST(CheckTree, RefusesMissingBeforeUnlisted) {
  Dir d;
  write_file(d.dir, "a-unlisted", "1");
  write_file(d.dir, "c", "3");
  auto s = check_tree(d.root().fd(), manifest_of({{"b-missing", "2"}, {"c", "3"}}), std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "MissingFile");
  EXPECT_EQ(s.error().detail("file"), "b-missing");
  write_file(d.dir, "b-missing", "2");
  s = check_tree(d.root().fd(), manifest_of({{"b-missing", "2"}, {"c", "3"}}), std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "UnlistedFile");
  EXPECT_EQ(s.error().detail("file"), "a-unlisted");
}

TEST(CheckTree, RefusesASizeMismatchBeforeHashingAnything) {
  Dir d;
  write_file(d.dir, "big", std::string(1 << 20, 'x'));
  write_file(d.dir, "small", "truncated");
  std::atomic<uint64_t> hashed{0};
  TreeOptions o;
  o.bytes_hashed = &hashed;
  std::map<std::string, uint64_t> sizes = {{"big", 1 << 20}, {"small", 100}};
  auto s =
      check_tree(d.root().fd(), manifest_of({{"big", std::string(1 << 20, 'x')}, {"small", "x"}}), sizes, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "SizeMismatch");
  EXPECT_EQ(s.error().detail("file"), "small");
  EXPECT_EQ(s.error().detail("expected"), "100");
  EXPECT_EQ(s.error().detail("actual"), "9");
  EXPECT_EQ(hashed.load(), 0u) << "sizes are checked before any byte is hashed";
}

TEST(CheckTree, RefusesADigestMismatch) {
  Dir d;
  write_file(d.dir, "a", "flipped");
  auto s = check_tree(d.root().fd(), manifest_of({{"a", "original"}}), std::nullopt);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "DigestMismatch");
  EXPECT_EQ(s.error().detail("expected"), sha256("original")->hex());
  EXPECT_EQ(s.error().detail("actual"), sha256("flipped")->hex());
}

}  // namespace
}  // namespace infergate::agent
