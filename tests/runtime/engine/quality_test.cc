// The quality of compression on a generated model with outlier key channels: top-1 agreement and mean
// KL of every weight format x KV dtype against the fp32 reference, beside a noise-floor row (fp16
// through two code paths), held to the bounds documented in docs/quant-formats.md.
#include "infergate/engine/quality.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <tuple>

#include "infergate/kernels/cpu.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {
using namespace testing;
namespace m = infergate::runtime::model;

const char* kTexts[] = {
    "The committee will meet on Thursday to review the budget and the plans for next year.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Bonjour, je voudrais réserver une table pour deux personnes ce soir à vingt heures.",
    "In 1969 the first humans landed on the Moon; the mission was called Apollo 11.",
    "User: What is the capital of Australia?\nAssistant: The capital of Australia is Canberra, not Sydney.\n"
    "User: And how many people live there?\nAssistant: About 460,000 people live in Canberra.",
    "{\"name\": \"infergate\", \"version\": 3, \"weights\": [\"int8\", \"int4\"], \"verified\": true}",
    "Der schnelle braune Fuchs springt über den faulen Hund, und die Katze schläft in der Sonne.",
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and "
    "arrows of outrageous fortune, or to take arms against a sea of troubles and by opposing end them.",
};

struct Row {
  std::string name;
  QualityMetrics q;
  double bytes_per_token = 0;
};

// The matrix's model: a Llama, or GLM-4.5's MoE layers (q/k norms, routed and shared experts; the
// outlier key channels then sit on k_norm). Each architecture's fixture has its own model.
// kLatent (MLA only): the latent width; 0 keeps small_options' 64. At 128 the int4 latent cache takes
// groups of 128 (kernels::kv_latent_layout), as DeepSeek-V3's and Kimi K2's 512 do.
template <m::Architecture kArch, int kLatent = 0>
class QualityMatrixFor : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir(temp_dir());
    m::TestModelOptions o = small_options(kArch, 21);
    o.hidden = 128;                                       // head_dim 32: one int4 group per head
    o.layers = kArch == m::Architecture::kLlama ? 2 : 3;  // MoE: one dense layer, two routed
    layers_ = static_cast<double>(o.layers);
    o.vocab = 512;
    o.outlier_channels = 4;
    o.dtype = m::DType::kF32;
    if (kLatent > 0) o.mla.kv_lora_rank = kLatent;
    dense_ = make_model(dir_->path() / "dense", o);
    int8_ = quantize(dense_, dir_->path() / "int8", m::WeightFormat::kInt8);
    int4_ = quantize(dense_, dir_->path() / "int4", m::WeightFormat::kInt4, false, 32);
    auto base = make_engine(dense_, {WeightFormat::kF32, KvCacheDtype::kF32});
    for (const char* t : kTexts) prompts_.push_back(base->tokenize(t));
    baseline_ = new std::vector<std::vector<float>>();
    for (const auto& p : prompts_) baseline_->push_back(*base->score(p));
  }
  static void TearDownTestSuite() {
    delete baseline_;
    delete dir_;
  }
  static const char* model_description() {
    return kArch == m::Architecture::kGlm4Moe
               ? "glm4_moe, 3 layers (1 dense, 2 with 8 experts in 2 groups, top 2, 1 shared), hidden 128, "
                 "head_dim 32, q/k norms, 4 outlier key channels per KV head on k_norm"
           : kArch == m::Architecture::kDeepseekV3 && kLatent == 128
               ? "deepseek_v3, 3 layers (1 dense, 2 routed as glm4_moe), hidden 128, 4 heads, latent 128 + "
                 "rope 16 (a 144-value cached row; int4 in groups of 128 and 16), q_lora 32, YaRN, 4 outlier "
                 "latent channels"
           : kArch == m::Architecture::kDeepseekV3
               ? "deepseek_v3, 3 layers (1 dense, 2 routed as glm4_moe), hidden 128, 4 heads, latent 64 + "
                 "rope 16 "
                 "(an 80-value cached row), q_lora 32, YaRN, 4 outlier latent channels"
               : "llama, 2 layers, hidden 128, head_dim 32, 4 outlier key channels per KV head";
  }
  // Every weight format x KV dtype against the fp32 baseline, printed as a table and held to the bounds.
  static void check_every_format();

  static std::filesystem::path dir_for(WeightFormat w) {
    return w == WeightFormat::kInt8 ? int8_ : w == WeightFormat::kInt4 ? int4_ : dense_;
  }

  static QualityMetrics against_baseline(Engine& e, int32_t chunk = 0) {
    QualityAccumulator acc;
    const size_t v = static_cast<size_t>(e.vocab());
    for (size_t i = 0; i < prompts_.size(); ++i) {
      auto got = e.score(prompts_[i], chunk);
      EXPECT_TRUE(got.ok());
      for (size_t r = 0; r < prompts_[i].size(); ++r) {
        acc.add_logits(std::span<const float>((*baseline_)[i]).subspan(r * v, v),
                       std::span<const float>(*got).subspan(r * v, v));
      }
    }
    return acc.result();
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::filesystem::path dense_, int8_, int4_;
  static inline double layers_ = 1;
  static inline std::vector<std::vector<int32_t>> prompts_;
  static inline std::vector<std::vector<float>>* baseline_ = nullptr;
};

template <m::Architecture kArch, int kLatent>
void QualityMatrixFor<kArch, kLatent>::check_every_format() {
  const WeightFormat wfs[] = {WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kInt8,
                              WeightFormat::kInt4};
  // A latent cache has no int4-kivi form.
  constexpr bool mla = kArch == m::Architecture::kDeepseekV3;
  std::vector<KvCacheDtype> kvs = {KvCacheDtype::kF16,  KvCacheDtype::kBF16, KvCacheDtype::kFp8,
                                   KvCacheDtype::kInt8, KvCacheDtype::kInt4, KvCacheDtype::kInt4Kivi};
  if (mla) kvs.pop_back();
  // (weights, KV, key smoothing) -> metrics; smoothing as load_engine's default (auto), and off.
  std::map<std::tuple<WeightFormat, KvCacheDtype, bool>, QualityMetrics> q;
  std::vector<Row> rows;
  int64_t positions = 0;
  for (const auto& p : prompts_) positions += static_cast<int64_t>(p.size());
  ASSERT_GE(positions, 400);

  // Noise floor: fp16/fp16 through the optimised kernels in one prefill, against the kernels' scalar
  // references token by token (the decode path).
  {
    auto a = make_engine(dense_, {WeightFormat::kF16, KvCacheDtype::kF16});
    auto b = make_engine(dense_, {WeightFormat::kF16, KvCacheDtype::kF16, 4, 256, 0, true});
    QualityAccumulator acc;
    const size_t v = static_cast<size_t>(a->vocab());
    for (const auto& p : prompts_) {
      auto x = a->score(p, 0), y = b->score(p, 1);
      for (size_t r = 0; r < p.size(); ++r) {
        acc.add_logits(std::span<const float>(*x).subspan(r * v, v),
                       std::span<const float>(*y).subspan(r * v, v));
      }
    }
    rows.push_back({"noise floor: fp16/fp16, two code paths", acc.result(), 512});
    EXPECT_EQ(acc.result().top1_agreement, 1.0);
    EXPECT_LE(acc.result().mean_kl, 1e-6);
  }
  for (WeightFormat w : wfs) {
    for (KvCacheDtype kv : kvs) {
      for (bool smooth : {true, false}) {
        const bool by_default = smooth_keys_enabled(SmoothKeys::kAuto, kv);
        if (smooth && !by_default) continue;  // identical to the row without
        EngineSetup setup{w, kv};
        setup.smooth_keys = smooth;
        auto e = make_engine(dir_for(w), setup);
        ASSERT_TRUE(e);
        const QualityMetrics r = against_baseline(*e);
        q[{w, kv, smooth}] = r;
        if (!by_default) q[{w, kv, true}] = r;
        std::string name = std::string(weight_format_name(w)) + " / " + std::string(kv_cache_dtype_name(kv));
        if (by_default) name += smooth ? " (default: keys smoothed)" : " (--kv-key-smoothing off)";
        rows.push_back({name, r, e->blocks().bytes().bytes_per_token()});
      }
    }
  }
  std::printf(
      "\n| weights / KV cache | top-1 agreement | mean KL | max KL | KV bytes/token/layer |\n"
      "|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.4f | %.2e | %.2e | %.0f |\n", r.name.c_str(), r.q.top1_agreement, r.q.mean_kl,
                r.q.max_kl, r.bytes_per_token / layers_);
  }
  std::printf("(%lld positions over %zu fixed prompts; baseline fp32 weights + fp32 KV; %s)\n",
              static_cast<long long>(positions), prompts_.size(), model_description());

  // The bounds of docs/quant-formats.md ("Quality bounds"), for the default configuration. The MoE
  // model's are looser: a small error that moves a token's router score past its neighbour's swaps
  // an expert outright (with every expert chosen, fp16 weights + int8 KV measured a mean KL of
  // 2.6e-5 on this model, as on the Llama; with top 2 of 8, 6.4e-3).
  constexpr bool moe = kArch != m::Architecture::kLlama;  // both route tokens to experts
  struct Bound {
    double top1, kl;
  };
  auto bound_for = [](WeightFormat w, KvCacheDtype kv) -> Bound {
    if (mla) {  // the latent cache: one row per token shared by every head
      Bound b{0.99, 0.01};
      if (kv == KvCacheDtype::kFp8) b = {0.96, 0.05};
      if (kv == KvCacheDtype::kInt4) b = {0.88, 0.17};
      if (w == WeightFormat::kInt8) b = {std::min(b.top1, 0.96), std::max(b.kl, 0.04)};
      if (w == WeightFormat::kInt4) b = {std::min(b.top1, 0.74), std::max(b.kl, 0.45)};
      return b;
    }
    if (moe) {
      Bound b{0.99, 0.01};  // fp16/bf16 weights with fp16, bf16 or int8 KV
      if (kv == KvCacheDtype::kFp8) b = {0.96, 0.04};
      if (kv == KvCacheDtype::kInt4 || kv == KvCacheDtype::kInt4Kivi) b = {0.93, 0.15};
      if (w == WeightFormat::kInt8) b = {std::min(b.top1, 0.96), std::max(b.kl, 0.04)};
      if (w == WeightFormat::kInt4) b = {std::min(b.top1, 0.78), std::max(b.kl, 0.45)};
      return b;
    }
    Bound b{0.99, 0.001};  // fp16/bf16 weights with fp16, bf16 or int8 KV
    if (kv == KvCacheDtype::kFp8) b = {0.97, 0.002};
    if (kv == KvCacheDtype::kInt4 || kv == KvCacheDtype::kInt4Kivi) b = {0.93, 0.01};
    if (w == WeightFormat::kInt8) b = {std::min(b.top1, 0.96), std::max(b.kl, 0.003)};
    if (w == WeightFormat::kInt4) b = {std::min(b.top1, 0.85), std::max(b.kl, 0.06)};
    return b;
  };
  for (WeightFormat w : wfs) {
    for (KvCacheDtype kv : kvs) {
      const QualityMetrics r = q[{w, kv, true}];
      const Bound b = bound_for(w, kv);
      EXPECT_GE(r.top1_agreement, b.top1) << weight_format_name(w) << "/" << kv_cache_dtype_name(kv);
      EXPECT_LE(r.mean_kl, b.kl) << weight_format_name(w) << "/" << kv_cache_dtype_name(kv);
    }
  }
  // int8 KV is nearly free (with fp16 and bf16 weights, against fp32).
  for (WeightFormat w : {WeightFormat::kF16, WeightFormat::kBF16}) {
    const QualityMetrics r = q[{w, KvCacheDtype::kInt8, true}];
    EXPECT_LE(r.mean_kl, moe ? 0.01 : 0.001) << weight_format_name(w);
    EXPECT_GE(r.top1_agreement, 0.99) << weight_format_name(w);
  }
  // The regression a quality gate must catch: per-token int4 keys (no smoothing) lose the ordinary
  // channels next to the outliers; per-channel keys (int4-kivi) do not.
  for (WeightFormat w : wfs) {
    if (mla) break;
    const QualityMetrics tok = q[{w, KvCacheDtype::kInt4, false}],
                         kivi = q[{w, KvCacheDtype::kInt4Kivi, false}];
    EXPECT_GT(tok.mean_kl, (moe ? 1.5 : 4.0) * kivi.mean_kl) << weight_format_name(w);
    EXPECT_LT(tok.top1_agreement + 0.05, kivi.top1_agreement) << weight_format_name(w);
  }
  // Smoothing is what makes per-token scales work on this model, and changes nothing for fp8 and kivi.
  const QualityMetrics raw8 = q[{WeightFormat::kF16, KvCacheDtype::kInt8, false}];
  const QualityMetrics smooth8 = q[{WeightFormat::kF16, KvCacheDtype::kInt8, true}];
  EXPECT_LT(smooth8.mean_kl * (moe ? 3 : 5), raw8.mean_kl);
  if (mla) {  // latent outliers spoil a per-token int4 row unless smoothed into W_UK and W_UV
    const double smoothed = q[{WeightFormat::kF16, KvCacheDtype::kInt4, true}].mean_kl;
    const double raw = q[{WeightFormat::kF16, KvCacheDtype::kInt4, false}].mean_kl;
    EXPECT_LT(smoothed * 5, raw);
  }
  // Fewer weight bits never help.
  const double kl16 = q[{WeightFormat::kF16, KvCacheDtype::kF16, true}].mean_kl;
  const double kl8 = q[{WeightFormat::kInt8, KvCacheDtype::kF16, true}].mean_kl;
  const double kl4 = q[{WeightFormat::kInt4, KvCacheDtype::kF16, true}].mean_kl;
  EXPECT_LT(kl16, kl8);
  EXPECT_LT(kl8, kl4);
}

using QualityMatrix = QualityMatrixFor<m::Architecture::kLlama>;
using MoeQualityMatrix = QualityMatrixFor<m::Architecture::kGlm4Moe>;
using MlaQualityMatrix = QualityMatrixFor<m::Architecture::kDeepseekV3>;

TEST_F(QualityMatrix, EveryWeightFormatAndKvDtypeStaysWithinItsDocumentedBound) { check_every_format(); }
TEST_F(MoeQualityMatrix, EveryWeightFormatAndKvDtypeStaysWithinItsDocumentedBound) { check_every_format(); }
TEST_F(MlaQualityMatrix, EveryWeightFormatAndLatentCacheDtypeStaysWithinItsDocumentedBound) {
  check_every_format();
}
using MlaQualityMatrix128 = QualityMatrixFor<m::Architecture::kDeepseekV3, 128>;
// The int4 latent in groups of 128 (3.74x fewer bytes than fp16 at Kimi K2's widths) against fp32,
// beside the same model's fp16 and int8 caches: held to the matrix's int4-latent bound. This model's
// fp16 weights alone flip enough routing decisions to cost a KL of ~1.4e-2 (every cell carries it), so
// its bounds are the int4 row's, not the fp16 ones of the latent-64 matrix.
TEST_F(MlaQualityMatrix128, Int4LatentInGroupsOf128StaysWithinTheMatrixBound) {
  std::printf(
      "\n| fp16 weights / latent cache (latent 128) | top-1 agreement | mean KL | bytes/token/layer |\n"
      "|---|---|---|---|\n");
  std::map<KvCacheDtype, QualityMetrics> q;
  for (KvCacheDtype kv : {KvCacheDtype::kF16, KvCacheDtype::kInt8, KvCacheDtype::kInt4}) {
    EngineSetup setup{WeightFormat::kF16, kv};
    setup.smooth_keys = smooth_keys_enabled(SmoothKeys::kAuto, kv);
    auto e = make_engine(dense_, setup);
    q[kv] = against_baseline(*e);
    std::printf("| %s | %.4f | %.2e | %.0f |\n", std::string(kv_cache_dtype_name(kv)).c_str(),
                q[kv].top1_agreement, q[kv].mean_kl, e->blocks().bytes().bytes_per_token() / layers_);
  }
  std::printf("(%s)\n", model_description());
  EXPECT_GE(q[KvCacheDtype::kInt4].top1_agreement, 0.88);
  EXPECT_LE(q[KvCacheDtype::kInt4].mean_kl, 0.17);
  EXPECT_LE(q[KvCacheDtype::kInt8].mean_kl, q[KvCacheDtype::kF16].mean_kl + 0.01);
}

// The integer attention path (AVX-512 VNNI, kernels/src/cpu/attn_vnni.cc: q and the softmax weights at
// 8 bits) against the exact one on a generated fp32 model: fp16 weights with each KV dtype, scored
// against the model's fp32 logits through both kernel paths (chunk: score()'s prefill chunk, 1 = token
// by token), printed as a table and held near the exact path. KL grows with the square of the logit
// error; the kernel tests bound the error the integer path adds to at most about the KV format's own
// (int8) and a fraction of it (int4): the KL may at most about quadruple for int8 ((1 + 1)^2) and
// stay within 1.5x for int4, and top-1 may drop by 2 points.
void expect_integer_path_near_exact(const std::filesystem::path& path, const std::vector<KvCacheDtype>& kvs,
                                    const std::vector<int32_t>& chunks, const std::string& title) {
  auto base = make_engine(path, {WeightFormat::kF32, KvCacheDtype::kF32});
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> want;
  for (const char* t : kTexts) {
    prompts.push_back(base->tokenize(t));
    want.push_back(*base->score(prompts.back(), 1));
  }
  const size_t v = static_cast<size_t>(base->vocab());
  auto against_fp32 = [&](KvCacheDtype kv, bool int_path, int32_t chunk) {
    kernels::set_cpu_int_attention(int_path);
    EngineSetup setup{WeightFormat::kF16, kv};
    setup.smooth_keys = smooth_keys_enabled(SmoothKeys::kAuto, kv);
    auto e = make_engine(path, setup);
    QualityAccumulator acc;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto got = e->score(prompts[i], chunk);
      EXPECT_TRUE(got.ok());
      for (size_t r = 0; r < prompts[i].size(); ++r) {
        acc.add_logits(std::span<const float>(want[i]).subspan(r * v, v),
                       std::span<const float>(*got).subspan(r * v, v));
      }
    }
    kernels::set_cpu_int_attention(true);
    return acc.result();
  };
  std::printf("\n| %s | kernel path | top-1 agreement | mean KL |\n|---|---|---|---|\n", title.c_str());
  for (KvCacheDtype kv : kvs) {
    for (int32_t chunk : chunks) {
      const QualityMetrics exact = against_fp32(kv, false, chunk), fast = against_fp32(kv, true, chunk);
      std::string name(kv_cache_dtype_name(kv));
      if (chunks.size() > 1) name += chunk == 1 ? ", decode" : ", prefill";
      std::printf("| %s | exact fp32 | %.4f | %.2e |\n| %s | int8 q, u8 weights | %.4f | %.2e |\n",
                  name.c_str(), exact.top1_agreement, exact.mean_kl, name.c_str(), fast.top1_agreement,
                  fast.mean_kl);
      const double factor = kv == KvCacheDtype::kInt8 ? 4.0 : 1.5;
      EXPECT_LE(fast.mean_kl, factor * exact.mean_kl + 1e-5) << name;
      EXPECT_GE(fast.top1_agreement, exact.top1_agreement - 0.02) << name;
    }
  }
}

// Decode attention over int8 / int4 KV at head_dim 128, token by token (the decode path that takes it).
TEST(QualityDecode, IntegerDecodeAttentionStaysNearTheExactPathAtHeadDim128) {
  kernels::set_cpu_int_attention(true);
  if (!kernels::cpu_int_attention()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: only the exact path runs";
  TempDir dir = temp_dir();
  m::TestModelOptions o = small_options(m::Architecture::kLlama, 23);
  o.hidden = 256;
  o.heads = 2;
  o.kv_heads = 1;  // head_dim 128, 2 query heads per KV head
  o.layers = 2;
  o.vocab = 512;
  o.outlier_channels = 4;
  o.dtype = m::DType::kF32;
  expect_integer_path_near_exact(make_model(dir.path() / "m", o),
                                 {KvCacheDtype::kInt8, KvCacheDtype::kInt4, KvCacheDtype::kInt4Kivi}, {1},
                                 "f16 weights / KV (decode, head_dim 128)");
}

// Absorbed MLA attention over int8 / int4 latent pages takes the same integer path where the row is a
// multiple of 64 (attn_vnni.cc, mla_unit): here latent 128 + rope 64 (a 192-value row; int4 in groups of
// 128 and one of 64, as Kimi K2's 512 + 64), dense layers, prefill and decode.
TEST(QualityDecode, IntegerMlaAttentionStaysNearTheExactPath) {
  kernels::set_cpu_int_attention(true);
  if (!kernels::cpu_int_attention()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: only the exact path runs";
  TempDir dir = temp_dir();
  m::TestModelOptions o = small_options(m::Architecture::kDeepseekV3, 24);
  o.hidden = 128;
  o.layers = 3;
  o.vocab = 512;
  o.outlier_channels = 4;
  o.dtype = m::DType::kF32;
  o.mla.kv_lora_rank = 128;
  o.mla.qk_rope_head_dim = 64;
  o.moe.dense_layers = o.layers;  // no routing: fp16 weights flipping an expert would swamp the KV error
  expect_integer_path_near_exact(make_model(dir.path() / "m", o), {KvCacheDtype::kInt8, KvCacheDtype::kInt4},
                                 {0, 1}, "f16 weights / latent cache (latent 128 + rope 64)");
}

TEST_F(QualityMatrix, KeySmoothingLeavesHalfPrecisionCachesBitForBitAlone) {
  auto a = make_engine(dense_, {WeightFormat::kF16, KvCacheDtype::kF16});
  EngineSetup s{WeightFormat::kF16, KvCacheDtype::kF16};
  s.smooth_keys = true;
  auto b = make_engine(dense_, s);
  auto x = a->score(prompts_[0]), y = b->score(prompts_[0]);
  ASSERT_TRUE(x.ok() && y.ok());
  double max = 0;
  for (size_t i = 0; i < x->size(); ++i) max = std::max(max, std::abs(double((*x)[i]) - (*y)[i]));
  EXPECT_LT(max, 1e-4) << "powers of two commute with fp16 rounding and RoPE";
}

TEST(Quality, IdenticalRunsAgreeFullyWithZeroKl) {
  std::vector<float> a = {1, 2, 3, 0.5f, 4, 1, 1, 1};
  QualityMetrics r = compare_logits(a, a, 4);
  EXPECT_EQ(r.positions, 2);
  EXPECT_EQ(r.top1_agreement, 1.0);
  EXPECT_NEAR(r.mean_kl, 0.0, 1e-12);
  std::vector<float> b = {1, 4, 3, 0.5f, 4, 1, 1, 1};  // first position's argmax moves
  r = compare_logits(a, b, 4);
  EXPECT_EQ(r.top1_agreement, 0.5);
  EXPECT_GT(r.mean_kl, 0.1);
  EXPECT_NEAR(r.max_kl,
              kl_divergence_logits(std::span<const float>(a).first(4), std::span<const float>(b).first(4)),
              1e-12);
}

TEST(Quality, KlOfTopLogprobsIsZeroForTheSameListsAndPositiveOtherwise) {
  QualityAccumulator acc;
  std::vector<TokenLogprob> x = {{5, -0.1f}, {7, -2.5f}, {1, -4.0f}};
  acc.add_top_logprobs(x, x);
  EXPECT_NEAR(acc.result().mean_kl, 0.0, 1e-9);
  std::vector<TokenLogprob> y = {{7, -0.3f}, {5, -1.5f}, {9, -3.0f}};
  acc.add_top_logprobs(x, y);
  QualityMetrics r = acc.result();
  EXPECT_EQ(r.positions, 2);
  EXPECT_EQ(r.top1_agreement, 0.5);
  EXPECT_GT(r.max_kl, 0.1);
}

TEST(Quality, CompareEnginesScoresBothOnTheSamePrompts) {
  TempDir dir = temp_dir();
  auto path = make_model(dir.path() / "m", small_options());
  auto a = make_engine(path, {WeightFormat::kF16, KvCacheDtype::kF16});
  auto b = make_engine(path, {WeightFormat::kF16, KvCacheDtype::kInt8});
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7}};
  auto same = compare_engines(*a, *a, prompts);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->positions, 8);
  EXPECT_EQ(same->mean_kl, 0.0);
  auto diff = compare_engines(*a, *b, prompts);
  ASSERT_TRUE(diff.ok());
  EXPECT_GT(diff->mean_kl, 0.0);
  EXPECT_LT(diff->mean_kl, 0.01);
}

}  // namespace
}  // namespace infergate::runtime::engine

namespace infergate::runtime::engine {
namespace {
using namespace testing;

class SmoothingTest : public ::testing::TestWithParam<m::Architecture> {};

TEST_P(SmoothingTest, KeepsScoresExactAndHelpsInt8KeysOnEveryArchitecture) {
  TempDir dir = temp_dir();
  m::TestModelOptions o = small_options(GetParam(), 8);
  o.hidden = 128;
  o.outlier_channels = 2;
  auto path = make_model(dir.path() / "m", o);
  const std::vector<int32_t> prompt = {5,  61, 200, 17, 3, 99, 250, 31, 8, 140,
                                       77, 12, 1,   2,  3, 4,  300, 41, 9, 10};
  auto score = [&](KvCacheDtype kv, bool smooth) {
    EngineSetup s{WeightFormat::kF16, kv};
    s.smooth_keys = smooth;
    return *make_engine(path, s)->score(prompt);
  };
  auto f32 = *make_engine(path, {WeightFormat::kF32, KvCacheDtype::kF32})->score(prompt);
  const auto plain = score(KvCacheDtype::kF16, false), smoothed = score(KvCacheDtype::kF16, true);
  double max = 0;
  for (size_t i = 0; i < plain.size(); ++i) max = std::max(max, std::abs(double(plain[i]) - smoothed[i]));
  EXPECT_LT(max, 1e-4) << "q.k must be unchanged (RoPE partners scaled together)";
  const int64_t v = 320;
  const double raw = compare_logits(f32, score(KvCacheDtype::kInt8, false), v).mean_kl;
  const double fixed = compare_logits(f32, score(KvCacheDtype::kInt8, true), v).mean_kl;
  EXPECT_LT(fixed * 3, raw) << "smoothing must reach the outlier channels";
}

INSTANTIATE_TEST_SUITE_P(Architectures, SmoothingTest,
                         ::testing::Values(m::Architecture::kLlama, m::Architecture::kQwen2,
                                           m::Architecture::kGlm, m::Architecture::kGlm4,
                                           m::Architecture::kGlm4Moe),
                         [](const auto& p) { return std::string(m::architecture_name(p.param)); });

}  // namespace
}  // namespace infergate::runtime::engine
