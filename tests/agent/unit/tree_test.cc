// The no-follow walk: what it lists, and every kind of entry it refuses without opening it.
#include "infergate/agent/hashing/tree.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent_test_util.h"

namespace infergate::agent {
namespace {

using testing::write_file;
namespace fs = std::filesystem;

struct Tree {
  TempDir tmp = *TempDir::create("tree-test");
  fs::path dir = tmp.path() / "root";
  Tree() { fs::create_directories(dir); }
  Result<std::vector<FileInfo>> walk(const WalkLimits& limits = {}) {
    auto root = ArtifactRoot::open(dir);
    if (!root.ok()) return std::move(root).error();
    return walk_tree(root->fd(), limits);
  }
};

std::string reason(const Result<std::vector<FileInfo>>& r) { return r.ok() ? "ok" : r.error().reason(); }

TEST(WalkTree, ListsRegularFilesSortedByPathWithSizes) {
  Tree t;
  write_file(t.dir, "b", "bb");
  write_file(t.dir, "a/z", "z");
  write_file(t.dir, "a-b", "");
  write_file(t.dir, ".hidden", "h");
  fs::create_directories(t.dir / "empty/dir");
  auto files = t.walk();
  ASSERT_TRUE(files.ok()) << files.error().to_string();
  std::vector<std::string> paths;
  for (const auto& f : *files) paths.push_back(f.path);
  EXPECT_EQ(paths, (std::vector<std::string>{".hidden", "a-b", "a/z", "b"}));
  EXPECT_EQ((*files)[3].size, 2u);
}

TEST(WalkTree, RefusesASymlinkToASibling) {
  Tree t;
  write_file(t.dir, "real", "x");
  fs::create_symlink("real", t.dir / "link");
  auto r = t.walk();
  ASSERT_EQ(reason(r), "Symlink");
  EXPECT_EQ(r.error().detail("file"), "link");
}

TEST(WalkTree, RefusesASymlinkToASecretWithoutReadingIt) {
  Tree t;
  fs::create_directories(t.dir / "sub");
  fs::create_symlink("/proc/self/environ", t.dir / "sub/environ");
  auto r = t.walk();
  ASSERT_EQ(reason(r), "Symlink");
  EXPECT_EQ(r.error().detail("file"), "sub/environ");
}

TEST(WalkTree, RefusesASymlinkedDirectory) {
  Tree t;
  fs::create_directories(t.tmp.path() / "elsewhere");
  write_file(t.tmp.path() / "elsewhere", "f", "x");
  fs::create_directory_symlink(t.tmp.path() / "elsewhere", t.dir / "d");
  EXPECT_EQ(reason(t.walk()), "Symlink");
}

TEST(WalkTree, RefusesAFifoWithoutBlocking) {
  Tree t;
  ASSERT_EQ(::mkfifo((t.dir / "pipe").c_str(), 0644), 0);
  auto r = t.walk();
  ASSERT_EQ(reason(r), "SpecialFile");
  EXPECT_EQ(r.error().detail("file"), "pipe");
  EXPECT_NE(r.error().message().find("FIFO"), std::string::npos);
}

TEST(WalkTree, RefusesASocket) {
  Tree t;
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = (t.dir / "sock").string();
  ASSERT_LT(p.size(), sizeof addr.sun_path);
  std::strncpy(addr.sun_path, p.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(s);
  EXPECT_EQ(reason(t.walk()), "SpecialFile");
}

TEST(WalkTree, RefusesADeviceNode) {
  Tree t;
  if (::mknod((t.dir / "null").c_str(), S_IFCHR | 0644, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot create a device node here (needs CAP_MKNOD)";
  }
  auto r = t.walk();
  ASSERT_EQ(reason(r), "SpecialFile");
  EXPECT_NE(r.error().message().find("character device"), std::string::npos);
}

TEST(WalkTree, RefusesTreesDeeperOrLargerThanItsCaps) {
  Tree t;
  write_file(t.dir, "a/b/c/d/f", "x");
  auto limits = [](size_t files, size_t depth) {
    WalkLimits l;
    l.max_files = files;
    l.max_depth = depth;
    return l;
  };
  EXPECT_EQ(reason(t.walk(limits(100, 3))), "LimitExceeded");
  EXPECT_EQ(reason(t.walk(limits(100, 4))), "ok");
  EXPECT_EQ(reason(t.walk(limits(3, 10))), "LimitExceeded");
}

TEST(ArtifactRoot, RefusesARootThatIsASymlink) {
  Tree t;
  fs::create_directory_symlink(t.dir, t.tmp.path() / "link");
  auto r = ArtifactRoot::open(t.tmp.path() / "link");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "Symlink");
  auto slash = ArtifactRoot::open((t.tmp.path() / "link").string() + "/");
  ASSERT_FALSE(slash.ok()) << "a trailing slash must not make the link followed";
  EXPECT_EQ(slash.error().reason(), "Symlink");
}

TEST(ArtifactRoot, RefusesAMissingRootOrAFile) {
  Tree t;
  EXPECT_EQ(ArtifactRoot::open(t.tmp.path() / "absent").error().reason(), "ArtifactDirInvalid");
  write_file(t.tmp.path(), "file", "x");
  EXPECT_EQ(ArtifactRoot::open(t.tmp.path() / "file").error().reason(), "ArtifactDirInvalid");
  EXPECT_TRUE(ArtifactRoot::open(t.dir.string() + "/").ok());
}

TEST(OpenBeneath, RefusesASymlinkOnTheWay) {
  Tree t;
  write_file(t.tmp.path() / "outside", "secret", "s");
  fs::create_directory_symlink(t.tmp.path() / "outside", t.dir / "d");
  auto root = *ArtifactRoot::open(t.dir);
  auto fd = open_beneath(root.fd(), "d/secret");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().reason(), "Symlink");
  EXPECT_EQ(open_beneath(root.fd(), "../x").error().reason(), "UnsafePath");
  EXPECT_EQ(open_beneath(root.fd(), "missing").error().reason(), "MissingFile");
}

TEST(ReadSmallFile, RefusesFilesOverTheCapLinksAndFifos) {
  Tree t;
  write_file(t.dir, "big", std::string(100, 'x'));
  ASSERT_EQ(::mkfifo((t.dir / "pipe").c_str(), 0644), 0);
  fs::create_symlink("big", t.dir / "link");
  auto root = *ArtifactRoot::open(t.dir);
  EXPECT_EQ(*read_small_file(root.fd(), "big", 100, Reason::kManifestTooLarge), std::string(100, 'x'));
  EXPECT_EQ(read_small_file(root.fd(), "big", 99, Reason::kManifestTooLarge).error().reason(),
            "ManifestTooLarge");
  EXPECT_EQ(read_small_file(root.fd(), "pipe", 99, Reason::kManifestTooLarge).error().reason(),
            "SpecialFile");
  EXPECT_EQ(read_small_file(root.fd(), "link", 999, Reason::kManifestTooLarge).error().reason(), "Symlink");
  EXPECT_EQ(read_small_file(root.fd(), "absent", 99, Reason::kManifestTooLarge).error().reason(),
            "MissingFile");
}

}  // namespace
}  // namespace infergate::agent
