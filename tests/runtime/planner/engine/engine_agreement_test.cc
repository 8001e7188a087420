// One memory model: the bytes the planner predicts for weights and KV blocks equal what the engine's
// CPU backend actually holds and allocates, for the same settings, on generated models of every
// architecture the engine runs (GLM-4.5's routed experts, router and q/k norms included), in every
// weight format and KV dtype.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>

#include "infergate/common/fs.h"
#include "infergate/engine/backend.h"
#include "infergate/engine/block_manager.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"
#include "infergate/runtime/planner/plan.h"

namespace infergate::runtime::planner {
namespace {

namespace fs = std::filesystem;
namespace eng = infergate::runtime::engine;

struct Format {
  const char* name;  // the planner's and the engine's --weight-format
  model::DType checkpoint;
  bool tie;
};

using Case = std::tuple<model::Architecture, Format>;
class PlannerMatchesEngine : public ::testing::TestWithParam<Case> {};

TEST_P(PlannerMatchesEngine, WeightBytesEqualWhatTheBackendHolds) {
  const auto [arch, f] = GetParam();
  auto tmp = TempDir::create("planner-engine");
  ASSERT_TRUE(tmp.ok());
  model::TestModelOptions mo;
  mo.out = tmp->path() / "dense";
  mo.arch = arch;
  mo.hidden = 96;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.vocab = 320;
  mo.dtype = f.checkpoint;
  mo.tie_embeddings = f.tie;
  // MoE: a dense layer and two routed ones.
  mo.layers = arch == model::Architecture::kGlm4Moe || arch == model::Architecture::kDeepseekV3 ? 3 : 2;
  ASSERT_TRUE(model::make_test_model(mo).ok());
  fs::path dir = mo.out;
  const std::string name = f.name;
  if (name == "int8" || name == "int4") {
    model::QuantizeOptions q;
    q.model = mo.out;
    q.out = tmp->path() / name;
    q.threads = 1;
    q.scheme = name == "int8" ? model::QuantScheme{model::WeightFormat::kInt8, 0, true, model::DType::kF16}
                              : model::QuantScheme{model::WeightFormat::kInt4, 64, false, model::DType::kF16};
    auto r = model::quantize_model(q);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    dir = q.out;
  }
  auto m = model::Model::open(dir);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto shared = std::make_shared<const model::Model>(std::move(*m));
  eng::CpuBackendOptions bo;
  bo.weight_format = *eng::parse_weight_format(name);
  auto backend = eng::make_cpu_backend(shared, bo);
  ASSERT_TRUE(backend.ok()) << backend.error().to_string();

  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  WeightOptions w;
  if (loaded->weights) {
    w = *loaded->weights;
  } else {
    w.format = *parse_weight_format(name);
  }
  auto planned = weight_bytes(loaded->config, w);
  ASSERT_TRUE(planned.ok()) << planned.error().to_string();
  EXPECT_EQ(planned->total(), (*backend)->weight_bytes());
}

INSTANTIATE_TEST_SUITE_P(
    EveryArchitectureAndFormat, PlannerMatchesEngine,
    ::testing::Combine(::testing::Values(model::Architecture::kLlama, model::Architecture::kQwen2,
                                         model::Architecture::kGlm, model::Architecture::kGlm4,
                                         model::Architecture::kGlm4Moe, model::Architecture::kDeepseekV3),
                       ::testing::Values(Format{"fp16", model::DType::kBF16, false},
                                         Format{"bf16", model::DType::kBF16, true},
                                         Format{"fp16", model::DType::kBF16, true},
                                         Format{"fp16", model::DType::kF32, false},
                                         Format{"int8", model::DType::kBF16, false},
                                         Format{"int4", model::DType::kF16, true},
                                         Format{"int4", model::DType::kF32, false})));

// Writes the test model and loads it into a CPU backend (failing the test on an error: then null).
std::pair<std::shared_ptr<const model::Model>, std::unique_ptr<eng::Backend>> model_and_backend(
    const model::TestModelOptions& mo) {
  EXPECT_TRUE(model::make_test_model(mo).ok());
  auto m = model::Model::open(mo.out);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().to_string());
  if (!m.ok()) return {};
  auto shared = std::make_shared<const model::Model>(std::move(*m));
  auto backend = eng::make_cpu_backend(shared, eng::CpuBackendOptions{});
  EXPECT_TRUE(backend.ok()) << (backend.ok() ? "" : backend.error().to_string());
  if (!backend.ok()) return {};
  return {shared, std::move(*backend)};
}

TEST(PlannerMatchesEngine, KvBlocksAndPoolBytesEqualTheBlockManagersAndTheBackendsAllocation) {
  auto tmp = TempDir::create("planner-engine-kv");
  ASSERT_TRUE(tmp.ok());
  model::TestModelOptions mo;
  mo.out = tmp->path() / "m";
  mo.layers = 3;
  mo.hidden = 128;
  mo.heads = 4;
  mo.kv_heads = 2;
  auto [shared, backend] = model_and_backend(mo);
  ASSERT_TRUE(backend);
  const model::ModelConfig& c = shared->config();
  for (const char* dtype : {"fp16", "bf16", "fp8", "int8", "int4", "int4-kivi"}) {
    SCOPED_TRACE(dtype);
    auto planned = kv_model(c, *parse_kv_dtype(dtype));
    ASSERT_TRUE(planned.ok());
    eng::KvSpec spec;
    spec.dtype = *eng::parse_kv_cache_dtype(dtype);
    spec.num_layers = static_cast<int32_t>(c.num_hidden_layers);
    spec.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads);
    spec.head_dim = static_cast<int32_t>(c.head_dim);
    auto bytes = eng::kv_bytes(spec);
    ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
    EXPECT_EQ(planned->page_bytes, bytes->page_bytes);
    EXPECT_EQ(planned->block_bytes(), bytes->block_bytes);
    EXPECT_EQ(planned->staging_bytes(), bytes->staging_bytes);
    // 5 sequences of 100 tokens: 7 blocks each, 5 staging windows.
    const int32_t sequences = 5;
    const int64_t blocks = sequences * KvModel::blocks_for(100);
    EXPECT_EQ(blocks, 35);
    ASSERT_TRUE(backend->allocate_kv(spec, blocks, sequences).ok());
    EXPECT_EQ(planned->bytes_for(sequences, 100), backend->kv_bytes());
    EXPECT_EQ(planned->bytes_for(sequences, 100), *eng::kv_pool_bytes(spec, blocks, sequences));
  }
}

// Multi-head latent attention: the planner's latent pages (one row per token, no V side) equal the
// engine's in every dtype the latent cache has, and the pool the backend allocates.
TEST(PlannerMatchesEngine, LatentKvPagesAndPoolBytesEqualTheBackendsAllocation) {
  auto tmp = TempDir::create("planner-engine-latent");
  ASSERT_TRUE(tmp.ok());
  model::TestModelOptions mo;
  mo.out = tmp->path() / "m";
  mo.arch = model::Architecture::kDeepseekV3;
  mo.layers = 2;
  mo.hidden = 128;
  mo.heads = 4;
  mo.mla.kv_lora_rank = 128;
  mo.mla.qk_rope_head_dim = 32;
  auto [shared, backend] = model_and_backend(mo);
  ASSERT_TRUE(backend);
  const model::ModelConfig& c = shared->config();
  for (const char* dtype : {"fp16", "bf16", "fp8", "int8", "int4"}) {
    SCOPED_TRACE(dtype);
    auto planned = kv_model(c, *parse_kv_dtype(dtype));
    ASSERT_TRUE(planned.ok());
    EXPECT_EQ(planned->kind, CacheKind::kLatent);
    eng::KvSpec spec;
    spec.dtype = *eng::parse_kv_cache_dtype(dtype);
    spec.num_layers = static_cast<int32_t>(c.num_hidden_layers);
    spec.num_kv_heads = 1;
    spec.head_dim = static_cast<int32_t>(c.mla->kv_lora_rank + c.mla->qk_rope_head_dim);
    spec.latent = true;
    spec.latent_rank = static_cast<int32_t>(c.mla->kv_lora_rank);
    auto bytes = eng::kv_bytes(spec);
    ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
    EXPECT_EQ(planned->page_bytes, bytes->page_bytes);
    EXPECT_EQ(planned->block_bytes(), bytes->block_bytes);
    const int64_t blocks = 3 * KvModel::blocks_for(100);
    ASSERT_TRUE(backend->allocate_kv(spec, blocks, 3).ok());
    EXPECT_EQ(planned->bytes_for(3, 100), backend->kv_bytes());
  }
  eng::KvSpec kivi{eng::KvCacheDtype::kInt4Kivi, 2, 1, 160, eng::kBlockTokens, true, 128};
  auto refused = eng::kv_bytes(kivi);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().reason(), "UnsupportedCombination");
}

}  // namespace
}  // namespace infergate::runtime::planner
