// Hash while loading (--verified-manifest): the digests of the bytes the loader reads against the
// manifest, and the generate command's output and exit codes.
#include "infergate/engine/verified_load.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <algorithm>
#include <set>

#include "infergate/common/json.h"
#include "infergate/common/manifest.h"
#include "infergate/common/sha256.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {

using infergate::testing::refused;
using namespace testing;

// Writes SHA256SUMS for every file of the directory (as `infergate-agent manifest` would).
std::filesystem::path write_manifest(const std::filesystem::path& dir, const std::string& skip = "") {
  std::vector<ManifestEntry> entries;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name == kManifestFileName || name == skip) continue;
    auto text = read_file(f.path(), 1u << 30);
    EXPECT_TRUE(text.ok());
    entries.push_back({name, *sha256(*text)});
  }
  auto m = Manifest::from_entries(std::move(entries));
  EXPECT_TRUE(m.ok());
  EXPECT_TRUE(write_file_atomic(dir / std::string(kManifestFileName), m->to_text()).ok());
  return dir / std::string(kManifestFileName);
}

void flip_last_byte(const std::filesystem::path& file) {
  auto text = read_file(file, 1u << 30);
  std::string s = *text;
  s.back() = static_cast<char>(s.back() ^ 0x01);  // the last byte of the last tensor's data
  ASSERT_TRUE(write_file_atomic(file, s).ok());
}

class VerifiedLoadTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = make_model(dir_.path() / "m", small_options()); }
  Result<LoadedEngine> load(std::optional<std::filesystem::path> manifest) {
    EngineConfig c;
    c.model_dir = model_;
    c.max_context = 64;
    c.verified_manifest = std::move(manifest);
    return load_engine(c);
  }
  TempDir dir_ = temp_dir();
  std::filesystem::path model_;
};

TEST_F(VerifiedLoadTest, AMatchingManifestVerifiesEveryFileTheLoaderRead) {
  auto manifest = write_manifest(model_);
  auto r = load(manifest);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->report.verified);
  EXPECT_EQ(r->report.files_verified, static_cast<int64_t>(r->engine->model().files_read().size()));
  EXPECT_GE(r->report.files_verified, 4);
  EXPECT_GE(r->report.bytes_hashed,
            static_cast<int64_t>(std::filesystem::file_size(model_ / "model.safetensors")));
  auto plain = load(std::nullopt);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->report.verified);
  // Both serve the same model.
  auto x = r->engine->score(std::vector<int32_t>{1, 2, 3}),
       y = plain->engine->score(std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(*x, *y);
}

TEST_F(VerifiedLoadTest, AFlippedByteInAShardRefusesToServeNamingFileExpectedAndActual) {
  auto manifest = write_manifest(model_);
  const std::string expected = Manifest::parse(*read_file(manifest))->find("model.safetensors")->digest.hex();
  flip_last_byte(model_ / "model.safetensors");
  auto r = load(manifest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "DigestMismatch");
  EXPECT_EQ(r.error().code(), ErrorCode::kDataLoss);
  EXPECT_EQ(r.error().detail("file"), "model.safetensors");
  EXPECT_EQ(r.error().detail("expected"), expected);
  EXPECT_EQ(r.error().detail("actual"), sha256(*read_file(model_ / "model.safetensors", 1u << 30))->hex());
  EXPECT_NE(r.error().message().find("model.safetensors"), std::string::npos);
}

// A sharded checkpoint is read on several threads at once, each shard hashed by its own hasher: every
// shard is still checked against the manifest and counted once, and the model is the one mapped.
TEST(VerifiedLoadShards, EveryShardReadInParallelIsVerifiedAndCountedOnce) {
  TempDir dir = temp_dir();
  auto o = small_options();
  o.max_shard_bytes = 40000;
  const auto model = make_model(dir.path() / "m", o);
  ASSERT_TRUE(std::filesystem::exists(model / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& f : std::filesystem::directory_iterator(model)) {
    if (f.path().extension() == ".safetensors") ++shards;
  }
  ASSERT_GE(shards, 3);
  EngineConfig c;
  c.model_dir = model;
  c.max_context = 64;
  c.verified_manifest = write_manifest(model);
  auto r = load_engine(c);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const auto read = r->engine->model().files_read();
  EXPECT_EQ(r->report.files_verified, static_cast<int64_t>(read.size()));
  EXPECT_EQ(std::set<std::string>(read.begin(), read.end()).size(), read.size()) << "a file read twice";
  int64_t bytes = 0;
  for (const std::string& name : read)
    bytes += static_cast<int64_t>(std::filesystem::file_size(model / name));
  EXPECT_EQ(r->report.bytes_hashed, bytes);
  c.verified_manifest.reset();
  auto plain = load_engine(c);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*r->engine->score(std::vector<int32_t>{1, 2, 3}),
            *plain->engine->score(std::vector<int32_t>{1, 2, 3}));
}

// With two shards tampered with, the refusal names the first of them in the index's order, whichever
// thread finished first.
TEST(VerifiedLoadShards, TheFirstTamperedShardInOrderIsTheOneNamed) {
  TempDir dir = temp_dir();
  auto o = small_options();
  o.max_shard_bytes = 40000;
  const auto model = make_model(dir.path() / "m", o);
  const auto manifest = write_manifest(model);
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(model)) {
    if (f.path().extension() == ".safetensors") names.push_back(f.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 3u);
  flip_last_byte(model / names[1]);
  flip_last_byte(model / names.back());
  EngineConfig c;
  c.model_dir = model;
  c.max_context = 64;
  c.verified_manifest = manifest;
  for (int round = 0; round < 3; ++round) {
    auto r = load_engine(c);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().reason(), "DigestMismatch");
    EXPECT_EQ(r.error().detail("file"), names[1]) << r.error().to_string();
  }
}

TEST_F(VerifiedLoadTest, AFileTheManifestDoesNotListIsRefused) {
  auto manifest = write_manifest(model_, "tokenizer.json");
  auto r = load(manifest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "UnlistedFile");
  EXPECT_EQ(r.error().detail("file"), "tokenizer.json");
}

TEST_F(VerifiedLoadTest, AMalformedManifestIsRefused) {
  ASSERT_TRUE(write_file_atomic(dir_.path() / "SUMS", "not a manifest line\n").ok());
  auto r = load(dir_.path() / "SUMS");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "ManifestMalformed");
  ASSERT_TRUE(write_file_atomic(dir_.path() / "EMPTY", "").ok());
  EXPECT_TRUE(refused(load(dir_.path() / "EMPTY"), "ManifestMalformed", {"EMPTY lists no files"}));
  EXPECT_TRUE(refused(load(dir_.path() / "absent"), "", {"absent", "No such file"}));
}

TEST_F(VerifiedLoadTest, GenerateCommandPrintsJsonAndExitsThreeOnATamperedModel) {
  auto manifest = write_manifest(model_);
  CommandResult ok =
      run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16", "--kv-cache-dtype",
                   "int8", "--prompt", "Hello there", "--max-tokens", "5", "--logprobs", "2", "--ignore-eos",
                   "--json", "--verified-manifest", manifest.string()});
  ASSERT_EQ(ok.status.code, 0) << ok.err;
  auto j = parse_json(ok.out, "generate output");
  ASSERT_TRUE(j.ok()) << ok.out;
  EXPECT_EQ((*j)["verified"], true);
  EXPECT_EQ((*j)["completion_tokens"], 5);
  EXPECT_EQ((*j)["kv_cache_dtype"], "int8");
  EXPECT_EQ((*j)["weight_format"], "fp16");
  EXPECT_EQ((*j)["finish_reason"], "length");
  EXPECT_EQ((*j)["tokens"].size(), 5u);
  EXPECT_EQ((*j)["tokens"][0]["top_logprobs"].size(), 2u);

  flip_last_byte(model_ / "model.safetensors");
  CommandResult bad =
      run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16", "--kv-cache-dtype",
                   "fp16", "--prompt", "Hello", "--verified-manifest", manifest.string()});
  EXPECT_EQ(bad.status.code, 3);
  EXPECT_NE(bad.err.find("DigestMismatch"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("model.safetensors"), std::string::npos) << bad.err;
}

TEST_F(VerifiedLoadTest, GenerateCommandRefusesUnknownDtypesAndMismatchedFormatsWithTheirReasons) {
  CommandResult kv = run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16",
                                  "--kv-cache-dtype", "int3", "--prompt", "x"});
  EXPECT_EQ(kv.status.code, 1);
  EXPECT_NE(kv.err.find("UnknownKvCacheDtype"), std::string::npos) << kv.err;
  CommandResult wf = run_runtime({"generate", "--model", model_.string(), "--weight-format", "int4",
                                  "--kv-cache-dtype", "fp16", "--prompt", "x", "--json"});
  EXPECT_EQ(wf.status.code, 1);
  EXPECT_NE(wf.err.find("WeightFormatMismatch"), std::string::npos) << wf.err;
  auto j = parse_json(wf.out, "error json");
  ASSERT_TRUE(j.ok()) << wf.out;
  EXPECT_EQ((*j)["error"]["reason"], "WeightFormatMismatch");
  CommandResult ctx =
      run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16", "--kv-cache-dtype",
                   "fp16", "--prompt", "x", "--max-context-length", "9999"});
  EXPECT_EQ(ctx.status.code, 1);
  EXPECT_NE(ctx.err.find("ContextTooLong"), std::string::npos) << ctx.err;
}

TEST_F(VerifiedLoadTest, GenerateCommandStreamsTextAndStopsOnAStopString) {
  const std::vector<std::string> args = {"generate",
                                         "--model",
                                         model_.string(),
                                         "--weight-format",
                                         "bf16",
                                         "--kv-cache-dtype",
                                         "int4-kivi",
                                         "--prompt",
                                         "The quick brown fox",
                                         "--max-tokens",
                                         "8",
                                         "--ignore-eos",
                                         "--temperature",
                                         "0.9",
                                         "--seed",
                                         "4",
                                         "--top-k",
                                         "40",
                                         "--top-p",
                                         "0.9"};
  CommandResult r = run_runtime(args);
  ASSERT_EQ(r.status.code, 0) << r.err;
  EXPECT_NE(r.err.find("generated tokens"), std::string::npos);
  CommandResult again = run_runtime(args);
  EXPECT_EQ(r.out, again.out) << "same seed, same text";
}

}  // namespace
}  // namespace infergate::runtime::engine
