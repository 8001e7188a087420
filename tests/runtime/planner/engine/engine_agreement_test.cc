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
  mo.layers = arch == model::Architecture::kGlm4Moe ? 3 : 2;  // MoE: a dense layer and two routed ones
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
                                         model::Architecture::kGlm4Moe),
                       ::testing::Values(Format{"fp16", model::DType::kBF16, false},
                                         Format{"bf16", model::DType::kBF16, true},
                                         Format{"fp16", model::DType::kBF16, true},
                                         Format{"fp16", model::DType::kF32, false},
                                         Format{"int8", model::DType::kBF16, false},
                                         Format{"int4", model::DType::kF16, true},
                                         Format{"int4", model::DType::kF32, false})));

TEST(PlannerMatchesEngine, KvBlocksAndPoolBytesEqualTheBlockManagersAndTheBackendsAllocation) {
  auto tmp = TempDir::create("planner-engine-kv");
  ASSERT_TRUE(tmp.ok());
  model::TestModelOptions mo;
  mo.out = tmp->path() / "m";
  mo.layers = 3;
  mo.hidden = 128;
  mo.heads = 4;
  mo.kv_heads = 2;
  ASSERT_TRUE(model::make_test_model(mo).ok());
  auto m = model::Model::open(mo.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto shared = std::make_shared<const model::Model>(std::move(*m));
  auto backend = eng::make_cpu_backend(shared, eng::CpuBackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.error().to_string();
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
    ASSERT_TRUE((*backend)->allocate_kv(spec, blocks, sequences).ok());
    EXPECT_EQ(planned->bytes_for(sequences, 100), (*backend)->kv_bytes());
    EXPECT_EQ(planned->bytes_for(sequences, 100), *eng::kv_pool_bytes(spec, blocks, sequences));
  }
}

}  // namespace
}  // namespace infergate::runtime::planner
