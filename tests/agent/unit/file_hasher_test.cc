// One file's hash: correct across mapping windows, and refused when the file changes under it.
#include "infergate/agent/hashing/file_hasher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "agent_test_util.h"

namespace infergate::agent {
namespace {

using testing::write_file;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct OneFile {
  TempDir tmp = *TempDir::create("hasher-test");
  fs::path dir = tmp.path();
  std::string content;
  ArtifactRoot root;
  FileInfo info;

  explicit OneFile(size_t size, unsigned seed = 7) : root(open_root(size, seed)) { info = stat_info(); }

  ArtifactRoot open_root(size_t size, unsigned seed) {
    std::mt19937 rng(seed);
    content.resize(size);
    for (auto& c : content) c = static_cast<char>(rng());
    write_file(dir, "f", content);
    return *ArtifactRoot::open(dir);
  }
  FileInfo stat_info() {
    struct stat st {};
    ::stat((dir / "f").c_str(), &st);
    return FileInfo::from_stat("f", st);
  }
};

TEST(HashFile, EqualsTheDigestOfTheContentAcrossWindows) {
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{4096}, size_t{kHashChunkBytes + 1}, size_t{kHashWindowBytes + 12345}}) {
    OneFile f(size);
    std::atomic<uint64_t> counted{0};
    HashOptions o;
    o.bytes_hashed = &counted;
    auto d = hash_file(f.root.fd(), f.info, o);
    ASSERT_TRUE(d.ok()) << size << ": " << d.error().to_string();
    EXPECT_EQ(*d, *sha256(f.content)) << size;
    EXPECT_EQ(counted.load(), size);
  }
}

TEST(HashFile, HashesAnyByteRangeEvenOneThatStartsOffAPageAndCrossesWindows) {
  OneFile f(kHashWindowBytes + 3 * 4096 + 77);
  struct Range {
    uint64_t offset, length;
  };
  for (Range r : {Range{0, 10}, Range{1, 4096}, Range{4095, 2}, Range{12345, kHashWindowBytes},
                  Range{f.content.size() - 5, 5}, Range{f.content.size(), 0}}) {
    auto d = hash_file(f.root.fd(), f.info, {}, ByteRange{r.offset, r.length});
    ASSERT_TRUE(d.ok()) << r.offset << ": " << d.error().to_string();
    EXPECT_EQ(*d, *sha256(std::string_view(f.content).substr(r.offset, r.length)))
        << r.offset << "+" << r.length;
  }
  EXPECT_EQ(hash_file(f.root.fd(), f.info, {}, ByteRange{f.content.size() - 5, 6}).error().reason(),
            "FileChanged");
}

TEST(HashFile, RefusesAFileThatGrowsWhileHashed) {
  OneFile f(4 * kHashChunkBytes);
  HashOptions o;
  o.after_chunk = [&](const FileInfo&, uint64_t done) {
    if (done == kHashChunkBytes) std::ofstream(f.dir / "f", std::ios::app) << "appended";
  };
  auto d = hash_file(f.root.fd(), f.info, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "FileChanged");
  EXPECT_EQ(d.error().detail("file"), "f");
}

TEST(HashFile, RefusesAFileThatShrinksUnderTheMapping) {
  OneFile f(4 * kHashChunkBytes);
  HashOptions o;
  o.after_chunk = [&](const FileInfo&, uint64_t done) {
    if (done == kHashChunkBytes) {
      ASSERT_EQ(::truncate((f.dir / "f").c_str(), 0), 0);
    }
  };
  auto d = hash_file(f.root.fd(), f.info, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "FileChanged");
  // The guard is per hash: a later hash of a good file still works.
  OneFile g(3 * kHashChunkBytes, 9);
  EXPECT_EQ(*hash_file(g.root.fd(), g.info), *sha256(g.content));
}

TEST(HashFile, RefusesAFileRewrittenInPlaceWhileHashed) {
  OneFile f(4 * kHashChunkBytes);
  std::this_thread::sleep_for(20ms);  // so that the rewrite gets a new ctime even on coarse clocks
  HashOptions o;
  o.after_chunk = [&](const FileInfo&, uint64_t done) {
    if (done != kHashChunkBytes) return;
    std::fstream out(f.dir / "f", std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(3 * kHashChunkBytes));
    out << "tampered";
  };
  auto d = hash_file(f.root.fd(), f.info, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "FileChanged");
}

TEST(HashFile, RefusesAFileReplacedAfterTheWalk) {
  OneFile f(1000);
  write_file(f.dir, "other", "replacement");
  fs::rename(f.dir / "other", f.dir / "f");
  auto d = hash_file(f.root.fd(), f.info);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "FileChanged");
}

TEST(HashFile, RefusesAFifoSwappedInAfterTheWalkWithoutBlocking) {
  OneFile f(1000);
  fs::remove(f.dir / "f");
  ASSERT_EQ(::mkfifo((f.dir / "f").c_str(), 0644), 0);
  auto d = hash_file(f.root.fd(), f.info);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "SpecialFile");
}

TEST(HashFile, RefusesASymlinkSwappedInAfterTheWalk) {
  OneFile f(1000);
  fs::remove(f.dir / "f");
  fs::create_symlink("/etc/passwd", f.dir / "f");
  EXPECT_EQ(hash_file(f.root.fd(), f.info).error().reason(), "Symlink");
}

TEST(HashFile, StopsWhenCancelled) {
  OneFile f(4 * kHashChunkBytes);
  std::atomic<bool> cancel{true};
  HashOptions o;
  o.cancel = &cancel;
  auto d = hash_file(f.root.fd(), f.info, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), ErrorCode::kCancelled);
}

}  // namespace
}  // namespace infergate::agent
