// The hardened safetensors reader: every check in FAULTS.md "Model files" and the reference
// implementation's validation, each with a hand-built file.
#include "infergate/runtime/model/safetensors.h"

#include <gtest/gtest.h>

#include <openssl/evp.h>
#include "common/refusal.h"

#include <cstring>

#include "infergate/common/encoding.h"
#include "infergate/common/json.h"
#include "infergate/runtime/model/safetensors_writer.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {

using infergate::testing::refused;
namespace fs = std::filesystem;
using testing::safetensors_bytes;
using testing::safetensors_bytes_with_length;

std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Result<SafetensorsHeader> parse(const std::string& file) {
  return parse_safetensors(span_of(file), "m.safetensors");
}

// Expects a refusal naming the file, with the given problem word (and tensor, when given).
void expect_refused(const Result<SafetensorsHeader>& r, std::string_view problem,
                    std::string_view tensor = {}) {
  ASSERT_FALSE(r.ok()) << "accepted a file that should be refused (" << problem << ")";
  const Error& e = r.error();
  EXPECT_EQ(e.reason(), "InvalidSafetensors") << e.to_string();
  EXPECT_EQ(e.detail("problem"), problem) << e.to_string();
  EXPECT_EQ(e.detail("file"), "m.safetensors");
  EXPECT_NE(e.message().find("m.safetensors"), std::string::npos) << e.message();
  if (!tensor.empty()) {
    EXPECT_EQ(e.detail("tensor"), tensor) << e.to_string();
    EXPECT_NE(e.message().find(std::string(tensor)), std::string::npos) << e.message();
  }
}

const std::string kTwoTensors =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[2,2],"data_offsets":[8,12]}})";

TEST(SafetensorsReader, AcceptsAWellFormedFileAndOrdersTensorsByOffset) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"U8","shape":[2,2],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   )";
  auto r = parse(safetensors_bytes(header, std::string(12, 'x')));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].name, "a");
  EXPECT_EQ(r->tensors[0].dtype, DType::kF32);
  EXPECT_EQ(r->tensors[1].shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(r->data_offset, 8 + header.size());
  ASSERT_EQ(r->metadata.size(), 1u);
  EXPECT_EQ(r->metadata[0].second, "pt");
}

TEST(SafetensorsReader, AcceptsScalarsAndEmptyTensors) {
  std::string header =
      R"({"s":{"dtype":"F16","shape":[],"data_offsets":[0,2]},"e":{"dtype":"F32","shape":[0,4],"data_offsets":[2,2]}})";
  auto r = parse(safetensors_bytes(header, "xx"));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->tensors.size(), 2u);
}

TEST(SafetensorsReader, RefusesAFileTooSmallForTheLength) { expect_refused(parse("abc"), "HeaderTooSmall"); }

TEST(SafetensorsReader, RefusesAHeaderLengthAboveTheCapWithoutAllocatingIt) {
  // Claims a 200 MB header in a tiny file: refused on the number alone.
  expect_refused(parse(safetensors_bytes_with_length(200'000'000, "{}", "")), "HeaderTooLarge");
  SafetensorsLimits small;
  small.max_header_bytes = 16;
  auto r = parse_safetensors(span_of(safetensors_bytes(kTwoTensors, std::string(12, 'x'))), "m.safetensors",
                             small);
  expect_refused(r, "HeaderTooLarge");
}

TEST(SafetensorsReader, RefusesAHeaderLengthLargerThanTheFile) {
  expect_refused(parse(safetensors_bytes_with_length(1000, "{}", "")), "HeaderBeyondFile");
}

TEST(SafetensorsReader, RefusesAHeaderLengthThatOverflowsWhenAdded) {
  // 2^64 - 1: 8 + N wraps around in unchecked code.
  expect_refused(parse(safetensors_bytes_with_length(UINT64_MAX, "{}", "")), "HeaderTooLarge");
  SafetensorsLimits unlimited;
  unlimited.max_header_bytes = UINT64_MAX;
  auto r = parse_safetensors(span_of(safetensors_bytes_with_length(UINT64_MAX - 3, "{}", "")),
                             "m.safetensors", unlimited);
  expect_refused(r, "HeaderBeyondFile");
}

TEST(SafetensorsReader, RefusesAHeaderThatIsNotUtf8) {
  std::string header = "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_refused(parse(safetensors_bytes(header, "x")), "HeaderNotUtf8");
  // An overlong encoding of '/' is not UTF-8 either.
  std::string overlong = "{\"a\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_refused(parse(safetensors_bytes(overlong, "x")), "HeaderNotUtf8");
}

TEST(SafetensorsReader, RefusesAHeaderThatIsNotJson) {
  expect_refused(parse(safetensors_bytes("{\"a\":", "")), "HeaderNotJson");
  expect_refused(parse(safetensors_bytes("{} trailing", "")), "HeaderNotJson");
}

TEST(SafetensorsReader, RefusesAHeaderThatIsNotAnObject) {
  expect_refused(parse(safetensors_bytes("[1,2]", "")), "HeaderNotObject");
  expect_refused(parse(safetensors_bytes(" {}", "")), "HeaderNotObject");
  expect_refused(parse(safetensors_bytes("\"{}\"", "")), "HeaderNotObject");
}

TEST(SafetensorsReader, RefusesEntriesOfTheWrongShape) {
  expect_refused(parse(safetensors_bytes(R"({"a":5})", "")), "BadEntry");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "x")),
                 "BadEntry");
  expect_refused(
      parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", "x")),
      "UnknownKey", "a");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[1]}})", "x")), "MissingKey", "a");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x")),
                 "BadEntry");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x")),
                 "BadEntry");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x")),
                 "BadOffsets", "a");
  expect_refused(parse(safetensors_bytes(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", "x")),
                 "BadDtype", "a");
  expect_refused(parse(safetensors_bytes(R"({"__metadata__":{"k":1}})", "")), "BadEntry");
}

TEST(SafetensorsReader, RefusesDuplicateTensorNames) {
  std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_refused(parse(safetensors_bytes(header, "xy")), "DuplicateTensor", "a");
  std::string dup_key = R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  expect_refused(parse(safetensors_bytes(dup_key, "x")), "DuplicateKey", "a");
}

TEST(SafetensorsReader, RefusesOverlappingOffsets) {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_refused(parse(safetensors_bytes(header, std::string(8, 'x'))), "Overlap", "b");
}

TEST(SafetensorsReader, RefusesGapsBetweenTensors) {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_refused(parse(safetensors_bytes(header, std::string(12, 'x'))), "Gap", "b");
  std::string late_start = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_refused(parse(safetensors_bytes(late_start, std::string(8, 'x'))), "Gap", "a");
}

TEST(SafetensorsReader, RefusesEndBeforeStart) {
  std::string header = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})";
  expect_refused(parse(safetensors_bytes(header, std::string(4, 'x'))), "BadOffsets", "a");
}

TEST(SafetensorsReader, RefusesDataNotCoveredExactly) {
  expect_refused(parse(safetensors_bytes(kTwoTensors, std::string(13, 'x'))), "DataNotCovered");
  expect_refused(parse(safetensors_bytes(kTwoTensors, std::string(11, 'x'))), "DataNotCovered", "b");
}

TEST(SafetensorsReader, RefusesShapeTimesDtypeNotEqualToTheSpan) {
  std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  expect_refused(parse(safetensors_bytes(header, std::string(8, 'x'))), "SizeMismatch", "a");
}

TEST(SafetensorsReader, RefusesShapesWhoseSizeOverflows) {
  // 2^32 * 2^32 elements: the product wraps to 0 in unchecked 64-bit arithmetic, matching the span.
  std::string header = R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  expect_refused(parse(safetensors_bytes(header, "")), "Overflow", "a");
  // 2^62 elements of 4 bytes: the byte size overflows.
  std::string bytes = R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  expect_refused(parse(safetensors_bytes(bytes, "")), "Overflow", "a");
  // Numbers beyond 64 bits are not integers at all.
  std::string huge = R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})";
  expect_refused(parse(safetensors_bytes(huge, "")), "BadEntry");
}

TEST(SafetensorsReader, RefusesMoreEntriesThanTheCap) {
  SafetensorsLimits limits;
  limits.max_tensors = 3;
  std::string header = "{";
  for (int i = 0; i < 4; ++i) {
    if (i) header += ",";
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  header += "}";
  auto r = parse_safetensors(span_of(safetensors_bytes(header, "wxyz")), "m.safetensors", limits);
  expect_refused(r, "TooManyEntries");
  limits.max_tensors = 4;
  EXPECT_TRUE(parse_safetensors(span_of(safetensors_bytes(header, "wxyz")), "m.safetensors", limits).ok());
}

TEST(SafetensorsReader, RefusesDeepNestingAtOnce) {
  std::string header = "{\"__metadata__\":" + std::string(10000, '[') + std::string(10000, ']') + "}";
  expect_refused(parse(safetensors_bytes(header, "")), "BadEntry");
}

TEST(SafetensorsReader, RefusesTooManyDimensions) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})";
  expect_refused(parse(safetensors_bytes(header, "x")), "BadShape", "a");
}

TEST(SafetensorsFile, MapsAFileAndFindsTensorsByName) {
  auto dir = testing::temp_dir();
  std::string data = "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c";
  testing::write_bytes(dir.path() / "m.safetensors", safetensors_bytes(kTwoTensors, data));
  auto f = SafetensorsFile::open_path(dir.path() / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  const TensorInfo* b = f->find("b");
  ASSERT_NE(b, nullptr);
  auto bytes = f->data(*b);
  ASSERT_EQ(bytes.size(), 4u);
  EXPECT_EQ(bytes[0], 9);
  EXPECT_EQ(f->find("c"), nullptr);
}

TEST(SafetensorsFile, RefusesAnInvalidFileOnDiskNamingIt) {
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "bad.safetensors", safetensors_bytes(kTwoTensors, "short"));
  auto f = SafetensorsFile::open_path(dir.path() / "bad.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().detail("file"), "bad.safetensors");
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * 7);
  return v;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return hex_encode(std::span<const uint8_t>(md, len));
}

TEST(SafetensorsWriter, OutputIsAcceptedByOurReaderAndAnIndependentPythonReader) {
  auto dir = testing::temp_dir();
  auto f32 = iota_bytes(4 * 6, 1);
  auto f16 = iota_bytes(2 * 5, 3);
  auto i8 = iota_bytes(3, 5);
  auto bf = iota_bytes(2 * 4, 9);
  std::vector<TensorData> tensors = {
      {{"layers.0.weight", DType::kF16, {5}}, f16},
      {{"z.bias", DType::kF32, {2, 3}}, f32},
      {{"q", DType::kI8, {3}}, i8},
      {{"emb \xe4\xb8\xad", DType::kBF16, {2, 2}}, bf},
      {{"empty", DType::kF32, {0}}, {}},
  };
  fs::path path = dir.path() / "out.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());

  auto ours = SafetensorsFile::open_path(path);
  ASSERT_TRUE(ours.ok()) << ours.error().to_string();
  EXPECT_EQ(ours->header().data_offset % 8, 0u) << "header is padded to 8 bytes";

  auto py = testing::run_python({testing::source_file("read_safetensors.py").string(), path.string()});
  ASSERT_TRUE(py.status.success()) << py.err;
  auto j = parse_json(py.out, "python reader output");
  ASSERT_TRUE(j.ok()) << py.out;
  EXPECT_EQ((*j)["metadata"]["format"], "pt");
  ASSERT_EQ((*j)["tensors"].size(), tensors.size());
  for (const auto& t : tensors) {
    const TensorInfo* info = ours->find(t.spec.name);
    ASSERT_NE(info, nullptr) << t.spec.name;
    EXPECT_EQ(info->dtype, t.spec.dtype);
    EXPECT_EQ(info->shape, t.spec.shape);
    auto data = ours->data(*info);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), t.bytes.begin(), t.bytes.end())) << t.spec.name;
    // Each tensor starts aligned to its element size.
    EXPECT_EQ((ours->header().data_offset + info->begin) % dtype_size(info->dtype), 0u) << t.spec.name;
    const Json& pt = (*j)["tensors"][t.spec.name];
    EXPECT_EQ(pt["dtype"], std::string(dtype_name(t.spec.dtype)));
    EXPECT_EQ(pt["shape"].get<std::vector<uint64_t>>(), t.spec.shape);
    EXPECT_EQ(pt["sha256"], sha256_hex(t.bytes)) << t.spec.name;
  }
}

TEST(SafetensorsWriter, ThePythonReaderRefusesWhatOurReaderRefuses) {
  // Keeps the independent reader honest: it is not a rubber stamp.
  auto dir = testing::temp_dir();
  fs::path path = dir.path() / "gap.safetensors";
  testing::write_bytes(path, safetensors_bytes(kTwoTensors, std::string(13, 'x')));
  auto py = testing::run_python({testing::source_file("read_safetensors.py").string(), path.string()});
  EXPECT_FALSE(py.status.success());
  EXPECT_TRUE(refused(SafetensorsFile::open_path(path), "InvalidSafetensors",
                      {"gap.safetensors", "cover 12 bytes of data but the file has 13"}));
}

TEST(SafetensorsWriter, StreamsPiecesInAnyOrderAndChecksCompleteness) {
  auto dir = testing::temp_dir();
  fs::path path = dir.path() / "s.safetensors";
  auto w = SafetensorsWriter::create(path, {{"a", DType::kU8, {4}}, {"b", DType::kU8, {2}}});
  ASSERT_TRUE(w.ok());
  uint8_t b[2] = {7, 8}, a_hi[2] = {3, 4}, a_lo[2] = {1, 2};
  ASSERT_TRUE(w->write("b", b).ok());
  ASSERT_TRUE(w->write("a", a_hi, 2).ok());
  EXPECT_TRUE(refused(w->write("a", a_hi, 3), "", {"write past the end of tensor 'a'"}))
      << "a write past the tensor's end is refused";
  EXPECT_TRUE(refused(w->write("c", a_hi), "", {"no tensor 'c' declared"}));
  EXPECT_TRUE(refused(w->finish(), "", {"tensor 'a' received 2 of its 4 bytes"})) << "tensor a is incomplete";
  auto w2 = SafetensorsWriter::create(path, {{"a", DType::kU8, {4}}, {"b", DType::kU8, {2}}});
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE(w2->write("a", a_hi, 2).ok());
  ASSERT_TRUE(w2->write("a", a_lo, 0).ok());
  ASSERT_TRUE(w2->write("b", b).ok());
  ASSERT_TRUE(w2->finish().ok());
  auto f = SafetensorsFile::open_path(path);
  ASSERT_TRUE(f.ok());
  auto a = f->data(*f->find("a"));
  EXPECT_EQ(std::vector<uint8_t>(a.begin(), a.end()), (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST(SafetensorsWriter, RefusesDuplicateNames) {
  auto dir = testing::temp_dir();
  auto w = SafetensorsWriter::create(dir.path() / "d.safetensors",
                                     {{"a", DType::kU8, {1}}, {"a", DType::kU8, {1}}});
  EXPECT_TRUE(refused(w, "", {"tensor 'a' is given twice"}));
}

}  // namespace
}  // namespace infergate::runtime::model
