// The forward pass of every architecture (the GLM-4.5 MoE cases included) against the independent NumPy
// reference (reference_forward.py): its golden logits are checked in under golden/, and the script is rerun
// live when /usr/bin/python3 has numpy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {
using namespace testing;
namespace m = infergate::runtime::model;

struct Golden {
  std::filesystem::path model_dir;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<double>>> logits;
  std::vector<std::vector<int32_t>> greedy;  // the reference's greedy tokens after each prompt
  std::string dtype;
};

// Rebuilds the case's model exactly as reference_forward.py does.
Golden load_golden(const std::string& name, const std::filesystem::path& dir) {
  Golden g;
  auto text = read_file(source_file("golden/" + name + ".json"));
  EXPECT_TRUE(text.ok());
  auto j = parse_json(*text, name);
  EXPECT_TRUE(j.ok());
  const Json& mk = (*j)["make_test_model"];
  m::TestModelOptions o;
  const std::string arch = mk["arch"];
  o.arch = arch == "llama"      ? m::Architecture::kLlama
           : arch == "qwen2"    ? m::Architecture::kQwen2
           : arch == "glm"      ? m::Architecture::kGlm
           : arch == "glm4"     ? m::Architecture::kGlm4
           : arch == "glm4_moe" ? m::Architecture::kGlm4Moe
                                : m::Architecture::kDeepseekV3;
  o.mla.kimi = arch == "kimi_k2";
  if (mk.contains("layers")) o.layers = mk["layers"].get<int64_t>();
  if (mk.contains("hidden")) o.hidden = mk["hidden"].get<int64_t>();
  if (mk.contains("heads")) o.heads = mk["heads"].get<int64_t>();
  if (mk.contains("kv_heads")) o.kv_heads = mk["kv_heads"].get<int64_t>();
  if (mk.contains("moe")) {
    const Json& moe = mk["moe"];
    o.moe.experts = moe["experts"].get<int64_t>();
    o.moe.experts_per_token = moe["experts_per_token"].get<int64_t>();
    o.moe.groups = moe["groups"].get<int64_t>();
    o.moe.topk_groups = moe["topk_groups"].get<int64_t>();
    o.moe.shared_experts = moe["shared_experts"].get<int64_t>();
    o.moe.dense_layers = moe["dense_layers"].get<int64_t>();
    o.moe.qk_norm = moe.value("qk_norm", true);
  }
  if (mk.contains("mla")) {
    const Json& mla = mk["mla"];
    o.mla.q_lora_rank = mla["q_lora_rank"].get<int64_t>();
    o.mla.kv_lora_rank = mla["kv_lora_rank"].get<int64_t>();
    o.mla.qk_nope_head_dim = mla["qk_nope_head_dim"].get<int64_t>();
    o.mla.qk_rope_head_dim = mla["qk_rope_head_dim"].get<int64_t>();
    o.mla.v_head_dim = mla["v_head_dim"].get<int64_t>();
    o.mla.yarn = mla["yarn"].get<bool>();
  }
  o.seed = mk["seed"].get<uint64_t>();
  o.vocab = mk["vocab"].get<int64_t>();
  g.dtype = mk["dtype"].get<std::string>();
  o.dtype = g.dtype == "bf16" ? m::DType::kBF16 : g.dtype == "f32" ? m::DType::kF32 : m::DType::kF16;
  o.tie_embeddings = mk["tie_embeddings"].get<bool>();
  g.model_dir = make_model(dir / name, o);
  auto cfg_text = read_file(g.model_dir / "config.json");
  auto cfg = parse_json(*cfg_text, "config.json");
  for (const auto& [k, v] : (*j)["config_overrides"].items()) (*cfg)[k] = v;
  EXPECT_TRUE(write_file_atomic(g.model_dir / "config.json", dump_json(*cfg, 2)).ok());
  g.prompts = (*j)["prompts"].get<std::vector<std::vector<int32_t>>>();
  g.logits = (*j)["logits"].get<std::vector<std::vector<std::vector<double>>>>();
  g.greedy = (*j)["greedy"].get<std::vector<std::vector<int32_t>>>();
  return g;
}

struct Diff {
  double max_abs = 0;
  double max_logprob = 0;  // max |log_softmax(ours) - log_softmax(reference)|
  int64_t top1_disagree = 0;
};

double log_sum_exp(const double* x, size_t n) {
  double mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

Diff compare(Engine& e, const Golden& g, int32_t chunk) {
  Diff d;
  const size_t v = static_cast<size_t>(e.vocab());
  for (size_t p = 0; p < g.prompts.size(); ++p) {
    auto r = e.score(g.prompts[p], chunk);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    if (!r.ok()) return d;
    for (size_t t = 0; t < g.prompts[p].size(); ++t) {
      const auto& want = g.logits[p][t];
      EXPECT_EQ(want.size(), v);
      std::vector<double> got((*r).begin() + static_cast<std::ptrdiff_t>(t * v),
                              (*r).begin() + static_cast<std::ptrdiff_t>((t + 1) * v));
      const double lse_got = log_sum_exp(got.data(), v), lse_want = log_sum_exp(want.data(), v);
      size_t am_want = 0, am_got = 0;
      for (size_t i = 0; i < v; ++i) {
        d.max_abs = std::max(d.max_abs, std::abs(got[i] - want[i]));
        d.max_logprob = std::max(d.max_logprob, std::abs((got[i] - lse_got) - (want[i] - lse_want)));
        if (want[i] > want[am_want]) am_want = i;
        if (got[i] > got[am_got]) am_got = i;
      }
      if (am_want != am_got) ++d.top1_disagree;
    }
  }
  return d;
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, Fp32PathMatchesTheNumpyReferenceClosely) {
  TempDir dir = temp_dir();
  Golden g = load_golden(GetParam(), dir.path());
  auto e = make_engine(g.model_dir, {WeightFormat::kF32, KvCacheDtype::kF32});
  ASSERT_TRUE(e);
  Diff d = compare(*e, g, 0);
  std::printf("%s fp32: max |logit - reference| = %.3g, max |logprob - reference| = %.3g\n",
              GetParam().c_str(), d.max_abs, d.max_logprob);
  // Logits have a standard deviation of about 6; fp32 activations against float64.
  EXPECT_LT(d.max_abs, 1e-4) << GetParam();
  EXPECT_LT(d.max_logprob, 1e-4) << GetParam();
  EXPECT_EQ(d.top1_disagree, 0);
  // Generation: the same greedy tokens as the reference, through the engine's decode path.
  for (size_t p = 0; p < g.prompts.size(); ++p) {
    EXPECT_EQ(greedy(*e, g.prompts[p], static_cast<int32_t>(g.greedy[p].size())), g.greedy[p])
        << GetParam() << " prompt " << p;
  }
}

TEST_P(ReferenceTest, ServingPathWithHalfPrecisionKvMatchesTheReferenceWithinKvRounding) {
  TempDir dir = temp_dir();
  Golden g = load_golden(GetParam(), dir.path());
  const WeightFormat wf = g.dtype == "bf16" ? WeightFormat::kBF16 : WeightFormat::kF16;
  auto e = make_engine(g.model_dir, {wf, KvCacheDtype::kF16});
  ASSERT_TRUE(e);
  // One prefill, and token by token through the decode path.
  for (int32_t chunk : {0, 1}) {
    Diff d = compare(*e, g, chunk);
    std::printf("%s fp16 chunk %d: max |logit - reference| = %.3g\n", GetParam().c_str(), chunk, d.max_abs);
    EXPECT_LT(d.max_abs, 0.03) << GetParam() << " chunk " << chunk;
    EXPECT_EQ(d.top1_disagree, 0) << GetParam() << " chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceTest,
                         ::testing::Values("llama", "mistral", "qwen2", "glm", "glm4", "glm4_moe",
                                           "glm4_moe_air", "glm4_moe_wide", "deepseek_v3", "kimi_k2"),
                         [](const auto& p) { return p.param; });

TEST(Reference, ScriptStillReproducesTheGoldenFiles) {
  if (!python_has_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not installed";
  CommandResult r = run_python({source_file("reference_forward.py").string(), "regenerate", "--check",
                                "--runtime", INFERGATE_RUNTIME_BIN, "--out", source_file("golden").string()});
  EXPECT_TRUE(r.status.success()) << r.out << r.err;
}

}  // namespace
}  // namespace infergate::runtime::engine
