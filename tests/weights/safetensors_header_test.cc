// The header-only safetensors reader of the weights library.
#include "infergate/weights/safetensors_header.h"

#include <gtest/gtest.h>

#include <fcntl.h>

#include "infergate/common/fs.h"

namespace infergate::weights {
namespace {

std::string file_with_header(const std::string& header, size_t data_bytes) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + std::string(data_bytes, '\0');
}

Result<std::vector<TensorHeader>> read(const std::string& bytes) {
  auto dir = *TempDir::create("st-header");
  const auto path = dir.path() / "m.safetensors";
  EXPECT_TRUE(write_file_atomic(path, bytes).ok());
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return read_safetensors_header(fd.get(), "m.safetensors");
}

TEST(SafetensorsHeader, ReadsNamesDtypesShapesAndFileOffsetsInHeaderOrder) {
  const std::string h =
      R"({"b.weight_packed":{"dtype":"I32","shape":[4,2],"data_offsets":[0,32]},)"
      R"("__metadata__":{"format":"pt"},"a.weight":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[32,38]}})";
  auto t = read(file_with_header(h, 38));
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "b.weight_packed");
  EXPECT_EQ((*t)[0].dtype, Dtype::kI32);
  EXPECT_EQ((*t)[0].offset, 8 + h.size());
  EXPECT_EQ((*t)[1].dtype, Dtype::kF8E4M3);
  EXPECT_EQ((*t)[1].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ((*t)[1].offset, 8 + h.size() + 32);
  EXPECT_EQ((*t)[1].bytes, 6u);
  EXPECT_EQ((*t)[1].file, "m.safetensors");
}

TEST(SafetensorsHeader, RefusesEntriesThatDoNotHoldTheirShapeNamingTheTensor) {
  for (const std::string h : {R"({"x":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}})",
                              R"({"x":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})",
                              R"({"x":{"dtype":"F16","shape":[-1],"data_offsets":[0,2]}})",
                              R"({"x":{"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,2]}})",
                              R"({"x":{"dtype":"F16","shape":[8],"data_offsets":[8,24]}})",
                              R"({"x":{"dtype":"F16","shape":[1]}})"}) {
    auto t = read(file_with_header(h, 16));
    ASSERT_FALSE(t.ok()) << h;
    EXPECT_EQ(t.error().reason(), kInvalidSafetensors) << h;
    EXPECT_EQ(t.error().detail("tensor"), "x") << h;
  }
}

TEST(SafetensorsHeader, RefusesALengthBeyondTheFileOrTheCapBeforeAllocating) {
  std::string bad = file_with_header("{}", 0);
  bad[5] = '\x01';  // a header length of 2^40
  EXPECT_EQ(read(bad).error().reason(), kInvalidSafetensors);
  EXPECT_EQ(read("short").error().reason(), kInvalidSafetensors);
  EXPECT_EQ(read(file_with_header("[1]", 0)).error().reason(), kInvalidSafetensors);
}

}  // namespace
}  // namespace infergate::weights
