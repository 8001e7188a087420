// Opening a model directory: checkpoints (single and sharded), the tensor check against the
// architecture, pickle and symlink refusals, and the hash-while-load hook.
#include "infergate/runtime/model/model.h"

#include <gtest/gtest.h>

#include "infergate/common/json.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

class RecordingHasher : public LoadHasher {
 public:
  Status begin_file(std::string_view name, uint64_t size) override {
    names.emplace_back(name);
    sizes.push_back(size);
    bytes.emplace_back();
    return ok_status();
  }
  void update(std::span<const uint8_t> b) override { bytes.back().append(b.begin(), b.end()); }
  Status end_file() override { return ok_status(); }
  std::vector<std::string> names;
  std::vector<uint64_t> sizes;
  std::vector<std::string> bytes;
};

void expect_refused(const fs::path& dir, std::string_view reason, std::string_view tensor = {}) {
  SCOPED_TRACE(std::string("expecting ") + std::string(reason));
  auto m = Model::open(dir);
  ASSERT_FALSE(m.ok()) << "opened a model that should be refused (" << reason << ")";
  EXPECT_EQ(m.error().reason(), reason) << m.error().to_string();
  if (!tensor.empty()) {
    EXPECT_EQ(m.error().detail("tensor"), tensor) << m.error().to_string();
    EXPECT_NE(m.error().message().find(std::string(tensor)), std::string::npos) << m.error().message();
  }
}

TEST(Model, HandsEveryFileItReadsToTheHasherOnceAsItReadsIt) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  o.max_shard_bytes = 60000;
  testing::make_small_model(o);
  RecordingHasher h;
  ModelOptions opts;
  opts.hasher = &h;
  auto m = Model::open(o.out, opts);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(h.names, m->files_read());
  std::set<std::string> unique(h.names.begin(), h.names.end());
  EXPECT_EQ(unique.size(), h.names.size()) << "no file is read twice";
  // Every file of the directory was read (and hashed) exactly as it is on disk.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(o.out)) {
    ++files;
    auto it = std::find(h.names.begin(), h.names.end(), e.path().filename().string());
    ASSERT_NE(it, h.names.end()) << e.path();
    size_t i = static_cast<size_t>(it - h.names.begin());
    EXPECT_EQ(h.bytes[i], testing::read_bytes(e.path())) << e.path();
    EXPECT_EQ(h.sizes[i], fs::file_size(e.path()));
  }
  EXPECT_EQ(files, h.names.size());
  // The weights served are the bytes hashed.
  auto v = m->tensor("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(v.ok());
  EXPECT_GT(v->nbytes, 0u);
}

TEST(Model, GivesTypedViewsAndKernelViewsOfDenseWeights) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m", Architecture::kGlm);
  testing::make_small_model(o);
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->weight_format(), WeightFormat::kDense);
  auto w = m->weight("model.layers.1.mlp.gate_up_proj.weight");
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  EXPECT_EQ(w->rows, 2u * static_cast<uint64_t>(m->config().intermediate_size));
  EXPECT_EQ(w->cols, 64u);
  auto k = kernel_weight_view(*w);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->layout.format, kernels::WeightFormat::kF16);
  EXPECT_EQ(k->data, w->dense.data);
  auto missing = m->weight("model.layers.9.mlp.gate_up_proj.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().reason(), "MissingTensor");
}

TEST(Model, RefusesAMissingTensorNamingIt) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  testing::rewrite_safetensors(o.out / "model.safetensors", [](std::vector<testing::OwnedTensor>& ts) {
    std::erase_if(ts, [](const auto& t) { return t.spec.name == "model.layers.1.self_attn.v_proj.weight"; });
  });
  expect_refused(o.out, "MissingTensor", "model.layers.1.self_attn.v_proj.weight");
}

TEST(Model, RefusesATensorWhoseShapeDisagreesWithTheConfig) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  auto config = *parse_json(testing::read_bytes(o.out / "config.json"), "c");
  config["intermediate_size"] = 160;  // the checkpoint has 192
  testing::write_bytes(o.out / "config.json", config.dump());
  expect_refused(o.out, "TensorShapeMismatch", "model.layers.0.mlp.gate_proj.weight");
}

TEST(Model, RefusesNonFloatWeights) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  testing::rewrite_safetensors(o.out / "model.safetensors", [](std::vector<testing::OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.spec.name == "model.norm.weight") {
        t.spec.dtype = DType::kI16;  // same bytes, wrong type
      }
    }
  });
  expect_refused(o.out, "TensorDtypeMismatch", "model.norm.weight");
}

TEST(Model, RefusesPickleWeightsSayingWhy) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  testing::write_bytes(o.out / "pytorch_model.bin", "\x80\x02}q\x00.");
  auto m = Model::open(o.out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "PickleRefused");
  EXPECT_NE(m.error().message().find("pytorch_model.bin"), std::string::npos);
  EXPECT_NE(m.error().message().find("runs code"), std::string::npos) << m.error().message();
  for (std::string name : {"model.pt", "weights.pth", "x.ckpt"}) {
    fs::remove(o.out / "pytorch_model.bin");
    fs::remove(o.out / "model.pt");
    fs::remove(o.out / "weights.pth");
    testing::write_bytes(o.out / name, "x");
    expect_refused(o.out, "PickleRefused");
  }
}

TEST(Model, RefusesAPickleOnlyCheckpoint) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  fs::remove(o.out / "model.safetensors");
  testing::write_bytes(o.out / "pytorch_model.bin.index.json", "{}");
  expect_refused(o.out, "PickleRefused");
}

TEST(Model, RefusesASymlinkedShard) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  fs::rename(o.out / "model.safetensors", dir.path() / "elsewhere.safetensors");
  fs::create_symlink(dir.path() / "elsewhere.safetensors", o.out / "model.safetensors");
  expect_refused(o.out, "Symlink");
  ModelOptions allow;
  allow.refuse_symlinks = false;
  EXPECT_TRUE(Model::open(o.out, allow).ok());
}

TEST(Model, RefusesAnIndexThatDisagreesWithItsShards) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  o.max_shard_bytes = 60000;
  testing::make_small_model(o);
  const fs::path index = o.out / "model.safetensors.index.json";
  const std::string original = testing::read_bytes(index);
  auto j = *parse_json(original, "i");
  // A tensor that shares its shard with others (a shard the index does not name is simply not read,
  // as in transformers: Mistral's repositories keep a consolidated.safetensors beside the shards).
  std::string some_tensor = "model.layers.0.input_layernorm.weight";
  std::string its_shard = j["weight_map"][some_tensor];
  std::string other_shard;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (it.value() != its_shard) other_shard = it.value();
  }
  ASSERT_FALSE(other_shard.empty());

  auto moved = j;
  moved["weight_map"][some_tensor] = other_shard;  // mapped to a shard that does not hold it
  testing::write_bytes(index, moved.dump());
  expect_refused(o.out, "IndexMismatch", some_tensor);

  auto dropped = j;
  dropped["weight_map"].erase(some_tensor);  // in a shard but not in the index
  testing::write_bytes(index, dropped.dump());
  expect_refused(o.out, "IndexMismatch", some_tensor);

  auto escaping = j;
  escaping["weight_map"][some_tensor] = "../outside.safetensors";
  testing::write_bytes(index, escaping.dump());
  expect_refused(o.out, "UnsafePath");

  auto pickle = j;
  pickle["weight_map"][some_tensor] = "pytorch_model-00001-of-00002.bin.safe";
  testing::write_bytes(index, pickle.dump());
  expect_refused(o.out, "PickleRefused", some_tensor);

  testing::write_bytes(index, original);
  testing::write_bytes(o.out / "model.safetensors", "x");
  expect_refused(o.out, "AmbiguousCheckpoint");
}

TEST(Model, RefusesATensorStoredInTwoShards) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  o.max_shard_bytes = 60000;
  testing::make_small_model(o);
  auto j = *parse_json(testing::read_bytes(o.out / "model.safetensors.index.json"), "i");
  std::string first_shard = j["weight_map"]["model.embed_tokens.weight"];
  std::string other;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (it.value() != first_shard) other = it.value();
  }
  testing::rewrite_safetensors(o.out / other, [](std::vector<testing::OwnedTensor>& ts) {
    // Built member by member: GCC 12 at -O3 misreads the nested braced temporary's vector as
    // maybe-uninitialized (a false positive that fails the Release build with warnings as errors).
    testing::OwnedTensor t;
    t.spec.name = "model.embed_tokens.weight";
    t.spec.dtype = DType::kF16;
    t.spec.shape = {1};
    t.bytes = {0, 0};
    ts.push_back(std::move(t));
  });
  expect_refused(o.out, "IndexMismatch", "model.embed_tokens.weight");
}

TEST(Model, RefusesQuantizationItCannotLoad) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  auto config = *parse_json(testing::read_bytes(o.out / "config.json"), "c");
  config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  testing::write_bytes(o.out / "config.json", config.dump());
  expect_refused(o.out, "UnsupportedQuantization");
}

TEST(Model, RefusesATokenizerLargerThanTheModelVocabulary) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  auto tok = *parse_json(testing::read_bytes(o.out / "tokenizer.json"), "t");
  tok["added_tokens"].push_back({{"id", 450}, {"content", "<|extra|>"}, {"special", true}});
  testing::write_bytes(o.out / "tokenizer.json", tok.dump());
  expect_refused(o.out, "InvalidTokenizer");
}

TEST(Model, RefusesABadConfigNamingTheField) {
  auto dir = testing::temp_dir();
  auto o = testing::small_model(dir.path() / "m");
  testing::make_small_model(o);
  auto config = *parse_json(testing::read_bytes(o.out / "config.json"), "c");
  config["num_key_value_heads"] = 3;
  testing::write_bytes(o.out / "config.json", config.dump());
  auto m = Model::open(o.out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "InvalidConfig");
  EXPECT_EQ(m.error().detail("field"), "num_key_value_heads");
}

TEST(Model, ReadsGenerationConfig) {
  auto g = parse_generation_config(
      R"({"eos_token_id": [1, 2], "temperature": 0.6, "top_p": 0.9, "do_sample": true})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(g->temperature, 0.6);
  auto bad = parse_generation_config(R"({"top_k": -1})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().detail("field"), "top_k");
}

}  // namespace
}  // namespace infergate::runtime::model
