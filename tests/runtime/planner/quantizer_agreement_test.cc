// The planner's compressed weight bytes equal the bytes `quantize` actually writes (packed values,
// scales, zero points), on generated models of every dense architecture, in every compressed
// format; what it leaves dense differs only where the runtime holds vectors in fp32.
#include <gtest/gtest.h>

#include <tuple>

#include "infergate/common/fs.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/safetensors.h"
#include "infergate/runtime/model/test_model.h"
#include "infergate/runtime/planner/plan.h"

namespace infergate::runtime::planner {
namespace {

namespace fs = std::filesystem;

struct Written {
  int64_t packed = 0, scales = 0, zeros = 0, dense = 0;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Written written(const fs::path& dir) {
  Written w;
  auto f = model::SafetensorsFile::open_path(dir / "model.safetensors");
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().to_string());
  if (!f.ok()) return w;
  for (const model::TensorInfo& t : f->tensors()) {
    const auto n = static_cast<int64_t>(t.nbytes());
    if (ends_with(t.name, ".qweight"))
      w.packed += n;
    else if (ends_with(t.name, ".scales"))
      w.scales += n;
    else if (ends_with(t.name, ".zeros"))
      w.zeros += n;
    else
      w.dense += n;
  }
  return w;
}

using Case = std::tuple<model::Architecture, std::string, bool /*lm_head*/>;
class PlannerMatchesQuantizer : public ::testing::TestWithParam<Case> {};

TEST_P(PlannerMatchesQuantizer, WeightBytesEqualTheQuantizedCheckpoint) {
  const auto [arch, scheme, lm_head] = GetParam();
  auto tmp = TempDir::create("planner-quant");
  ASSERT_TRUE(tmp.ok());
  model::TestModelOptions mo;
  mo.out = tmp->path() / "dense";
  mo.arch = arch;
  mo.hidden = 96;  // K = 96 and an intermediate of 256: int4 groups of 64 leave a partial group
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.vocab = 320;
  mo.dtype = model::DType::kBF16;
  ASSERT_TRUE(model::make_test_model(mo).ok());

  model::QuantizeOptions q;
  q.model = mo.out;
  q.out = tmp->path() / "q";
  q.quantize_lm_head = lm_head;
  q.threads = 1;
  if (scheme == "int8") {
    q.scheme = {model::WeightFormat::kInt8, 0, true, model::DType::kF16};
  } else if (scheme == "int4-g64-asym") {
    q.scheme = {model::WeightFormat::kInt4, 64, false, model::DType::kF16};
  } else {
    q.scheme = {model::WeightFormat::kInt4, 32, true, model::DType::kBF16};
  }
  auto report = model::quantize_model(q);
  ASSERT_TRUE(report.ok()) << report.error().to_string();

  auto loaded = load_model(q.out);
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  ASSERT_TRUE(loaded->weights.has_value()) << "the directory's quantization_config fixes the format";
  EXPECT_EQ(loaded->weights->quantize_lm_head, lm_head);
  auto b = weight_bytes(loaded->config, *loaded->weights);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  const Written w = written(q.out);
  EXPECT_EQ(b->packed, w.packed);
  EXPECT_EQ(b->scales, w.scales);
  EXPECT_EQ(b->zeros, w.zeros);
  // The checkpoint's 1-D tensors are bf16 (2 bytes); the runtime holds them in fp32 (4 bytes).
  int64_t vector_elements = 0;
  for (const model::ExpectedTensor& t : model::expected_tensors(loaded->config)) {
    if (t.shape.size() == 1) vector_elements += static_cast<int64_t>(t.shape[0]);
  }
  EXPECT_EQ(b->dense, w.dense + 2 * vector_elements);
  EXPECT_EQ(b->total(), static_cast<int64_t>(report->output_bytes) + 2 * vector_elements);
  EXPECT_EQ(static_cast<size_t>(b->tensors_compressed), report->tensors_quantized);
}

INSTANTIATE_TEST_SUITE_P(
    EveryArchitectureAndFormat, PlannerMatchesQuantizer,
    ::testing::Combine(::testing::Values(model::Architecture::kLlama, model::Architecture::kQwen2,
                                         model::Architecture::kGlm, model::Architecture::kGlm4),
                       ::testing::Values("int8", "int4-g64-asym", "int4-g32-sym-bf16"), ::testing::Bool()));

}  // namespace
}  // namespace infergate::runtime::planner
