// The model directory reader: symlinks and special files refused, hashing sees each byte once.
#include "infergate/runtime/model/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testing.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

// Records what the loader hands over.
class RecordingHasher : public LoadHasher {
 public:
  Status begin_file(std::string_view name, uint64_t size) override {
    files.emplace_back(std::string(name), size);
    current.clear();
    return ok_status();
  }
  void update(std::span<const uint8_t> bytes) override { current.append(bytes.begin(), bytes.end()); }
  Status end_file() override {
    contents.push_back(current);
    if (refuse) return Error(ErrorCode::kDataLoss, "digest mismatch", "DigestMismatch");
    return ok_status();
  }
  std::vector<std::pair<std::string, uint64_t>> files;
  std::vector<std::string> contents;
  std::string current;
  bool refuse = false;
};

TEST(ModelDirectory, MapsAFileWithoutCopying) {
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "a.bin", "hello");
  auto d = ModelDirectory::open(dir.path());
  ASSERT_TRUE(d.ok());
  auto f = d->map("a.bin");
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_FALSE(f->copied());
  EXPECT_EQ(std::string(f->bytes().begin(), f->bytes().end()), "hello");
  EXPECT_EQ(d->files_read(), std::vector<std::string>{"a.bin"});
}

TEST(ModelDirectory, HashesEveryByteOnceWhileReading) {
  auto dir = testing::temp_dir();
  std::string big(20u << 20, '\0');  // more than one read chunk
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + (i >> 12));
  testing::write_bytes(dir.path() / "w.safetensors", big);
  testing::write_bytes(dir.path() / "config.json", "{}");
  RecordingHasher h;
  auto d = ModelDirectory::open(dir.path(), {true, &h});
  ASSERT_TRUE(d.ok());
  auto f = d->map("w.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->copied());
  auto cfg = d->read("config.json");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(*cfg, "{}");
  ASSERT_EQ(h.files.size(), 2u);
  EXPECT_EQ(h.files[0], (std::pair<std::string, uint64_t>{"w.safetensors", big.size()}));
  EXPECT_EQ(h.contents[0].size(), big.size()) << "each byte exactly once";
  EXPECT_TRUE(h.contents[0] == big);
  EXPECT_EQ(std::string(f->bytes().begin(), f->bytes().end()) == big, true)
      << "the bytes used are the bytes hashed";
  EXPECT_EQ(h.contents[1], "{}");
}

TEST(ModelDirectory, AHasherRefusalRefusesTheFile) {
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "a.bin", "x");
  RecordingHasher h;
  h.refuse = true;
  auto d = ModelDirectory::open(dir.path(), {true, &h});
  ASSERT_TRUE(d.ok());
  auto f = d->map("a.bin");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().reason(), "DigestMismatch");
  EXPECT_NE(f.error().message().find("a.bin"), std::string::npos);
}

TEST(ModelDirectory, RefusesASymlinkEvenToASibling) {
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "real.json", "{}");
  fs::create_symlink("real.json", dir.path() / "link.json");
  auto d = ModelDirectory::open(dir.path());
  ASSERT_TRUE(d.ok());
  auto f = d->read("link.json");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().reason(), "Symlink");
  EXPECT_TRUE(d->files_read().empty());
}

TEST(ModelDirectory, RefusesAModelRootThatIsASymlink) {
  auto dir = testing::temp_dir();
  fs::create_directory(dir.path() / "real");
  fs::create_directory_symlink("real", dir.path() / "link");
  auto d = ModelDirectory::open(dir.path() / "link");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "Symlink");
  EXPECT_TRUE(ModelDirectory::open(dir.path() / "link", {false, nullptr}).ok())
      << "unless symlinks are allowed";
}

TEST(ModelDirectory, RefusesAFifoWithoutBlocking) {
  auto dir = testing::temp_dir();
  ASSERT_EQ(mkfifo((dir.path() / "pipe.safetensors").c_str(), 0600), 0);
  auto d = ModelDirectory::open(dir.path());
  ASSERT_TRUE(d.ok());
  auto f = d->map("pipe.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().reason(), "NotRegularFile");
}

TEST(ModelDirectory, RefusesNamesThatAreNotPlainComponents) {
  auto dir = testing::temp_dir();
  auto d = ModelDirectory::open(dir.path());
  ASSERT_TRUE(d.ok());
  for (std::string bad : {"../x", "/etc/passwd", "a/b", "..", ".", ""}) {
    auto f = d->map(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.error().reason(), "UnsafePath") << bad;
  }
}

TEST(ModelDirectory, RefusesASmallFileLargerThanItsCap) {
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "config.json", std::string(100, ' '));
  auto d = ModelDirectory::open(dir.path());
  ASSERT_TRUE(d.ok());
  auto r = d->read("config.json", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "FileTooLarge");
}

}  // namespace
}  // namespace infergate::runtime::model
