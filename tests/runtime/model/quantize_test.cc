// The streaming weight quantizer: what it quantizes and keeps, determinism, atomic output,
// the quantization record, sharded checkpoints, refusals, and the command line.
#include "infergate/runtime/model/quantize.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <csignal>
#include <cstring>

#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/runtime/model/model.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

QuantizeOptions options(const fs::path& in, const fs::path& out, WeightFormat f, int64_t group = 32,
                        bool sym = false) {
  QuantizeOptions o;
  o.model = in;
  o.out = out;
  o.scheme.format = f;
  o.scheme.group_size = f == WeightFormat::kInt4 ? group : 0;
  o.scheme.symmetric = f == WeightFormat::kInt8 ? true : sym;
  return o;
}

std::vector<float> dense_floats(const TensorView& v) {
  std::vector<float> out(v.num_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, v.data + 2 * i, 2);
    out[i] = v.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
  return out;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class QuantizeEveryFormat : public ::testing::TestWithParam<std::tuple<WeightFormat, bool>> {};

TEST_P(QuantizeEveryFormat, QuantizesLinearLayersAndKeepsTheRestByteForByte) {
  auto [format, sym] = GetParam();
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  auto r = quantize_model(options(mo.out, dir.path() / "out", format, 32, sym));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->tensors_quantized, 14u);  // 2 layers x (q, k, v, o, gate, up, down)
  EXPECT_EQ(r->tensors_copied, 7u);      // embeddings, 5 norms, lm_head
  EXPECT_LT(r->output_bytes, r->input_bytes);
  EXPECT_GT(r->peak_rss_bytes, 0u);

  auto in = Model::open(mo.out);
  auto out = Model::open(dir.path() / "out");
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->weight_format(), format);
  ASSERT_TRUE(out->config().quantization.has_value());
  EXPECT_EQ(out->config().quantization->quant_method, "infergate");
  EXPECT_EQ(out->config().quantization->weight_format, std::string(weight_format_name(format)));
  for (std::string kept : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                           "model.layers.1.post_attention_layernorm.weight"}) {
    auto a = in->tensor(kept), b = out->tensor(kept);
    ASSERT_TRUE(b.ok()) << kept;
    ASSERT_EQ(a->nbytes, b->nbytes);
    EXPECT_EQ(0, std::memcmp(a->data, b->data, a->nbytes)) << kept << " is copied unchanged";
  }
  EXPECT_FALSE(out->has_tensor("model.layers.0.mlp.up_proj.weight"));
  // Every quantized weight decodes to within half a step of the original, element by element.
  for (std::string name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"}) {
    auto w = out->weight(name);
    ASSERT_TRUE(w.ok()) << w.error().to_string();
    EXPECT_EQ(w->format, format);
    auto orig = dense_floats(*in->tensor(name));
    std::vector<float> back(w->rows * w->cols);
    ASSERT_TRUE(dequantize_rows(w->qweight.data, w->scales.data, w->zeros.data, w->rows, w->cols, w->scheme,
                                back.data())
                    .ok());
    double num = 0, den = 0;
    for (size_t i = 0; i < back.size(); ++i) {
      num += (orig[i] - back[i]) * (orig[i] - back[i]);
      den += orig[i] * orig[i];
    }
    double rel = std::sqrt(num / den);
    EXPECT_LT(rel, format == WeightFormat::kInt8 ? 0.01 : 0.12) << name;
    auto k = kernel_weight_view(*w);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->data, w->qweight.data);
  }
  // The record: format, scheme, tool version, per-tensor errors.
  auto rec = *parse_json(testing::read_bytes(dir.path() / "out" / "quantization.json"), "q");
  EXPECT_EQ(rec["weight_format"], std::string(weight_format_name(format)));
  EXPECT_EQ(rec["tool_version"], std::string(quantize_tool_version()));
  EXPECT_EQ(rec["scale_dtype"], "float16");
  EXPECT_EQ(rec["quantized"].size(), 14u);
  EXPECT_EQ(rec["unquantized"].size(), 7u);
  for (auto it = rec["quantized"].begin(); it != rec["quantized"].end(); ++it) {
    double max_rel = it.value()["max_rel_error"], rms_rel = it.value()["rms_rel_error"];
    EXPECT_GT(max_rel, 0) << it.key();
    EXPECT_LT(max_rel, format == WeightFormat::kInt8 ? 0.005 : 0.1) << it.key();
    EXPECT_LT(rms_rel, format == WeightFormat::kInt8 ? 0.01 : 0.12) << it.key();
  }
  // The tokenizer and the other files are copied byte for byte.
  for (std::string f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_EQ(testing::read_bytes(mo.out / f), testing::read_bytes(dir.path() / "out" / f)) << f;
  }
  // An independent reader accepts the output.
  auto py = testing::run_python({testing::source_file("read_safetensors.py").string(),
                                 (dir.path() / "out" / "model.safetensors").string()});
  EXPECT_TRUE(py.status.success()) << py.err;
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizeEveryFormat,
                         ::testing::Values(std::tuple{WeightFormat::kInt8, true},
                                           std::tuple{WeightFormat::kInt4, true},
                                           std::tuple{WeightFormat::kInt4, false}));

TEST(Quantize, SameInputGivesTheSameBytesWhateverTheThreadCount) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in", Architecture::kQwen2);
  mo.hidden = 128;
  mo.heads = 4;
  testing::make_small_model(mo);
  auto a = options(mo.out, dir.path() / "a", WeightFormat::kInt4, 64);
  a.threads = 1;
  auto b = options(mo.out, dir.path() / "b", WeightFormat::kInt4, 64);
  b.threads = 3;
  ASSERT_TRUE(quantize_model(a).ok());
  ASSERT_TRUE(quantize_model(b).ok());
  auto ta = testing::tree(dir.path() / "a"), tb = testing::tree(dir.path() / "b");
  ASSERT_FALSE(ta.empty());
  EXPECT_TRUE(ta == tb);
}

TEST(Quantize, RefusesANonEmptyOutputUnlessForced) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  fs::create_directory(dir.path() / "out");
  testing::write_bytes(dir.path() / "out" / "old.txt", "previous release");
  auto o = options(mo.out, dir.path() / "out", WeightFormat::kInt8);
  auto r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "OutputNotEmpty");
  EXPECT_EQ(testing::read_bytes(dir.path() / "out" / "old.txt"), "previous release");
  o.force = true;
  ASSERT_TRUE(quantize_model(o).ok());
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "old.txt"));
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"in", "out"})) << "nothing left beside the output";
  // An existing empty directory is fine.
  fs::create_directory(dir.path() / "empty");
  EXPECT_TRUE(quantize_model(options(mo.out, dir.path() / "empty", WeightFormat::kInt8)).ok());
}

TEST(Quantize, AnInterruptedRunLeavesNothingThatLooksFinished) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  std::atomic<bool> cancel{false};
  auto o = options(mo.out, dir.path() / "out", WeightFormat::kInt4, 32);
  o.cancel = &cancel;
  std::vector<std::string> seen_during_run;
  o.progress = [&](const QuantizeProgress& p) {
    if (p.tensor_index == 5 && seen_during_run.empty()) {
      seen_during_run = entries(dir.path());
      cancel = true;  // as SIGINT does
    }
  };
  auto r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "Cancelled");
  ASSERT_EQ(seen_during_run.size(), 2u);
  EXPECT_EQ(seen_during_run[1], "in");
  EXPECT_EQ(seen_during_run[0].rfind(".out.partial-", 0), 0u)
      << "work in progress is hidden: " << seen_during_run[0];
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"in"}) << "the staging directory is removed";
}

TEST(Quantize, KeepsTheShardLayoutOfAShardedCheckpoint) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  mo.max_shard_bytes = 60000;
  testing::make_small_model(mo);
  ASSERT_TRUE(quantize_model(options(mo.out, dir.path() / "out", WeightFormat::kInt8)).ok());
  auto in_files = entries(mo.out), out_files = entries(dir.path() / "out");
  std::erase(out_files, "quantization.json");
  EXPECT_EQ(in_files, out_files);
  auto out = Model::open(dir.path() / "out");
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  auto index = *parse_json(testing::read_bytes(dir.path() / "out" / "model.safetensors.index.json"), "i");
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), out->tensor_bytes());
  EXPECT_TRUE(index["weight_map"].contains("model.layers.0.self_attn.q_proj.qweight"));
}

TEST(Quantize, RefusesAnAlreadyQuantizedOrPickleCheckpoint) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  ASSERT_TRUE(quantize_model(options(mo.out, dir.path() / "q", WeightFormat::kInt8)).ok());
  auto again = quantize_model(options(dir.path() / "q", dir.path() / "qq", WeightFormat::kInt4));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().reason(), "AlreadyQuantized");
  testing::write_bytes(mo.out / "training_args.bin", "\x80\x04.");
  auto pickle = quantize_model(options(mo.out, dir.path() / "p", WeightFormat::kInt8));
  ASSERT_FALSE(pickle.ok());
  EXPECT_EQ(pickle.error().reason(), "PickleRefused");
  EXPECT_FALSE(fs::exists(dir.path() / "p"));
}

TEST(Quantize, RefusesNonFiniteWeightsNamingTheTensor) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  testing::rewrite_safetensors(mo.out / "model.safetensors", [](std::vector<testing::OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.spec.name == "model.layers.1.mlp.up_proj.weight") {
        uint16_t nan = 0x7e00;
        std::memcpy(t.bytes.data() + 2 * 70, &nan, 2);  // row 1, column 6
      }
    }
  });
  auto r = quantize_model(options(mo.out, dir.path() / "out", WeightFormat::kInt4, 32));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().detail("tensor"), "model.layers.1.mlp.up_proj.weight") << r.error().to_string();
  EXPECT_NE(r.error().message().find("row 1, column 6"), std::string::npos) << r.error().message();
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
}

TEST(Quantize, QuantizesLmHeadOnlyWhenAsked) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in");
  testing::make_small_model(mo);
  auto o = options(mo.out, dir.path() / "out", WeightFormat::kInt8);
  o.quantize_lm_head = true;
  auto r = quantize_model(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tensors_quantized, 15u);
  auto out = Model::open(dir.path() / "out");
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(out->has_tensor("lm_head.qweight"));
}

TEST(Quantize, CompressesLinearWeightsButNotEmbeddingsNormsRouterOrLmHead) {
  EXPECT_TRUE(quantizer_compresses({"model.layers.0.self_attn.q_proj.weight", {64, 64}}, false));
  EXPECT_TRUE(quantizer_compresses({"model.layers.3.mlp.experts.7.down_proj.weight", {64, 32}}, false));
  EXPECT_FALSE(quantizer_compresses({"model.embed_tokens.weight", {300, 64}}, true));
  EXPECT_FALSE(quantizer_compresses({"model.layers.0.input_layernorm.weight", {64}}, false));
  EXPECT_FALSE(quantizer_compresses({"model.layers.0.self_attn.q_proj.bias", {64}}, false));
  EXPECT_FALSE(quantizer_compresses({"model.layers.3.mlp.gate.weight", {8, 64}}, false));
  EXPECT_FALSE(quantizer_compresses({"model.layers.3.self_attn.kv_b_proj.weight", {512, 64}}, false))
      << "MLA's kv_b_proj is re-laid out per head at load, from a dense copy";
  EXPECT_TRUE(quantizer_compresses({"model.layers.3.self_attn.kv_a_proj_with_mqa.weight", {80, 64}}, false));
  EXPECT_FALSE(quantizer_compresses({"lm_head.weight", {300, 64}}, false));
  EXPECT_TRUE(quantizer_compresses({"lm_head.weight", {300, 64}}, true));
}

TEST(QuantizeCli, PrintsThroughputAndPeakMemoryAndRefusesBadFlags) {
  auto dir = testing::temp_dir();
  auto mo = testing::small_model(dir.path() / "in", Architecture::kGlm4);
  testing::make_small_model(mo);
  auto ok =
      testing::run_runtime({"quantize", "--model", mo.out.string(), "--out", (dir.path() / "out").string(),
                            "--weight-format", "int4", "--group-size", "64", "--symmetric"});
  ASSERT_TRUE(ok.status.success()) << ok.err;
  EXPECT_NE(ok.out.find("GB/s"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("peak memory"), std::string::npos) << ok.out;
  auto rec = *parse_json(testing::read_bytes(dir.path() / "out" / "quantization.json"), "q");
  EXPECT_EQ(rec["group_size"], 64);
  EXPECT_EQ(rec["symmetric"], true);
  auto json =
      testing::run_runtime({"quantize", "--model", mo.out.string(), "--out", (dir.path() / "out").string(),
                            "--weight-format", "int8", "--force", "--json"});
  ASSERT_TRUE(json.status.success()) << json.err;
  auto j = parse_json(json.out, "report");
  ASSERT_TRUE(j.ok()) << json.out;
  EXPECT_GT((*j)["peak_rss_bytes"].get<uint64_t>(), 0u);
  auto bad_group =
      testing::run_runtime({"quantize", "--model", mo.out.string(), "--out", (dir.path() / "bad").string(),
                            "--weight-format", "int4", "--group-size", "48"});
  EXPECT_EQ(bad_group.status.code, 1);
  EXPECT_NE(bad_group.err.find("group"), std::string::npos) << bad_group.err;
  auto not_empty = testing::run_runtime({"quantize", "--model", mo.out.string(), "--out",
                                         (dir.path() / "out").string(), "--weight-format", "int8"});
  EXPECT_EQ(not_empty.status.code, 1);
  EXPECT_NE(not_empty.err.find("OutputNotEmpty"), std::string::npos) << not_empty.err;
}

}  // namespace
}  // namespace infergate::runtime::model

namespace infergate::runtime::model {
namespace {

// Starts `quantize` on a model big enough to take a moment, waits until its staging directory
// appears, and sends `sig`.
struct Interrupted {
  ExitStatus status;
  std::vector<std::string> left;
};
Interrupted interrupt_quantize(const fs::path& root, int sig) {
  auto mo = testing::small_model(root / "in");
  mo.hidden = 256;
  mo.layers = 4;
  mo.vocab = 8000;
  testing::make_small_model(mo);
  SpawnOptions so;
  so.argv = {INFERGATE_RUNTIME_BIN,   "quantize",        "--model", mo.out.string(), "--out",
             (root / "out").string(), "--weight-format", "int4",    "--threads",     "1"};
  so.stdout_file = root / "stdout.txt";
  so.stderr_file = root / "stdout.txt";
  auto p = Subprocess::spawn(so);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return {};
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.path().filename().string().rfind(".out.partial-", 0) == 0) seen = true;
    }
    if (!seen) usleep(100);
  }
  EXPECT_TRUE(seen) << "the staging directory never appeared";
  p->signal(sig);
  Interrupted r{p->wait(), {}};
  for (const auto& e : fs::directory_iterator(root)) {
    std::string n = e.path().filename().string();
    if (n != "in" && n != "stdout.txt") r.left.push_back(n);
  }
  return r;
}

TEST(QuantizeCli, SigintStopsTheRunAndRemovesTheStagingDirectory) {
  auto dir = testing::temp_dir();
  Interrupted r = interrupt_quantize(dir.path(), SIGINT);
  EXPECT_EQ(r.status.code, 1) << r.status.describe();
  EXPECT_NE(testing::read_bytes(dir.path() / "stdout.txt").find("Cancelled"), std::string::npos);
  EXPECT_TRUE(r.left.empty()) << "left behind: " << (r.left.empty() ? "" : r.left[0]);
}

TEST(QuantizeCli, AKilledRunLeavesNothingNamedLikeTheOutput) {
  auto dir = testing::temp_dir();
  Interrupted r = interrupt_quantize(dir.path(), SIGKILL);
  EXPECT_EQ(r.status.signal, SIGKILL);
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  for (const std::string& n : r.left) EXPECT_EQ(n.rfind(".out.partial-", 0), 0u) << n;
}

}  // namespace
}  // namespace infergate::runtime::model
