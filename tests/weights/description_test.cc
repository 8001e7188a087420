// describe_weights on each family as published (DeepSeek-V3 FP8 block, Kimi-K2-Thinking INT4,
// GLM-4.5-FP8, AWQ, GPTQ, ours, dense), and each refusal with its reason word and the tensor named.
#include "infergate/weights/description.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "infergate/weights/quantization_config.h"

namespace infergate::weights {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// A release in memory: headers for describe_weights, bytes for the value checks.
class Release : public TensorReader {
 public:
  void add(const std::string& name, Dtype dt, std::vector<uint64_t> shape, std::vector<uint8_t> bytes = {}) {
    TensorHeader t;
    t.name = name;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.file = "model.safetensors";
    t.bytes = t.elements() * dtype_bytes(dt);
    t.offset = offset_;
    offset_ += t.bytes;
    if (bytes.empty()) bytes = ones(dt, t.elements());
    EXPECT_EQ(bytes.size(), t.bytes) << name;
    data_[name] = std::move(bytes);
    meta_.tensors.push_back(std::move(t));
  }
  void remove(const std::string& name) {
    std::erase_if(meta_.tensors, [&](const TensorHeader& t) { return t.name == name; });
  }
  void set(const std::string& name, std::vector<uint8_t> bytes) { data_[name] = std::move(bytes); }
  TensorHeader* find(const std::string& name) {
    for (TensorHeader& t : meta_.tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  void config(const Json& j) { meta_.config_json = j.dump(); }
  void record(const Json& j) { meta_.quantization_json = j.dump(); }
  ReleaseMetadata& meta() { return meta_; }

  Result<WeightDescription> describe(bool values = true) {
    DescribeOptions o;
    if (values) o.reader = this;
    return describe_weights(meta_, o);
  }

  Status read(const TensorHeader& t, uint64_t offset, std::span<uint8_t> out) override {
    const auto& d = data_.at(t.name);
    if (offset + out.size() > d.size()) return invalid_argument("read past the tensor");
    std::memcpy(out.data(), d.data() + offset, out.size());
    return ok_status();
  }

  static std::vector<uint8_t> ones(Dtype dt, uint64_t n) {
    std::vector<uint8_t> b(static_cast<size_t>(n * dtype_bytes(dt)), 0);
    for (uint64_t i = 0; i < n; ++i) {
      if (dt == Dtype::kF32) {
        const float one = 1.0f;
        std::memcpy(b.data() + 4 * i, &one, 4);
      } else if (dt == Dtype::kBF16) {
        const uint16_t one = 0x3F80;
        std::memcpy(b.data() + 2 * i, &one, 2);
      } else if (dt == Dtype::kF16) {
        const uint16_t one = 0x3C00;
        std::memcpy(b.data() + 2 * i, &one, 2);
      }
    }
    return b;
  }
  template <class T>
  static std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }

 private:
  ReleaseMetadata meta_;
  std::map<std::string, std::vector<uint8_t>> data_;
  uint64_t offset_ = 8;
};

// ---- one linear in each family's parts ----

void dense_linear(Release& r, const std::string& m, uint64_t n, uint64_t k, Dtype dt = Dtype::kBF16) {
  r.add(m + ".weight", dt, {n, k});
}
void fp8_block(Release& r, const std::string& m, uint64_t n, uint64_t k) {
  r.add(m + ".weight", Dtype::kF8E4M3, {n, k});
  r.add(m + ".weight_scale_inv", Dtype::kF32, {ceil_div(n, 128), ceil_div(k, 128)});
}
void fp8_channel(Release& r, const std::string& m, uint64_t n, uint64_t k) {
  r.add(m + ".weight", Dtype::kF8E4M3, {n, k});
  r.add(m + ".weight_scale", Dtype::kBF16, {n, 1});
}
void ct_int4(Release& r, const std::string& m, uint64_t n, uint64_t k, uint64_t g, bool sym = true,
             bool act = false) {
  r.add(m + ".weight_packed", Dtype::kI32, {n, ceil_div(k, 8)});
  r.add(m + ".weight_scale", Dtype::kBF16, {n, k / g});
  r.add(m + ".weight_shape", Dtype::kI64, {2},
        Release::bytes_of(std::vector<int64_t>{int64_t(n), int64_t(k)}));
  if (!sym) r.add(m + ".weight_zero_point", Dtype::kI32, {ceil_div(n, 8), k / g});
  if (act) {
    std::vector<int32_t> gi(k);
    for (uint64_t i = 0; i < k; ++i)
      gi[i] = static_cast<int32_t>(((i * 7) % k) / g);  // a permutation's groups
    r.add(m + ".weight_g_idx", Dtype::kI32, {k}, Release::bytes_of(gi));
  }
}
void awq(Release& r, const std::string& m, uint64_t n, uint64_t k, uint64_t g) {
  r.add(m + ".qweight", Dtype::kI32, {k, n / 8});
  r.add(m + ".qzeros", Dtype::kI32, {k / g, n / 8});
  r.add(m + ".scales", Dtype::kF16, {k / g, n});
}
void gptq(Release& r, const std::string& m, uint64_t n, uint64_t k, uint64_t g) {
  r.add(m + ".qweight", Dtype::kI32, {k / 8, n});
  r.add(m + ".qzeros", Dtype::kI32, {ceil_div(k, g), n / 8});
  r.add(m + ".scales", Dtype::kF16, {ceil_div(k, g), n});
  std::vector<int32_t> gi(k);
  for (uint64_t i = 0; i < k; ++i) gi[i] = static_cast<int32_t>(i / g);
  r.add(m + ".g_idx", Dtype::kI32, {k}, Release::bytes_of(gi));
}

using LinearFn = std::function<void(Release&, const std::string&, uint64_t, uint64_t)>;

// A DeepSeek-V3 / Kimi-K2 shaped model: 2 layers (layer 0 a dense MLP, layer 1 two routed experts
// and a shared expert), multi-head latent attention; ragged widths (N 200, K 72 in the MLA).
// `quant(module)` says which linears to write with `q`; the rest are dense BF16.
void deepseek_model(Release& r, const std::function<bool(const std::string&)>& quant, const LinearFn& q) {
  auto linear = [&](const std::string& m, uint64_t n, uint64_t k) {
    if (quant(m)) {
      q(r, m, n, k);
    } else {
      dense_linear(r, m, n, k);
    }
  };
  r.add("model.embed_tokens.weight", Dtype::kBF16, {512, 256});
  r.add("lm_head.weight", Dtype::kBF16, {512, 256});
  r.add("model.norm.weight", Dtype::kBF16, {256});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    r.add(p + "input_layernorm.weight", Dtype::kBF16, {256});
    r.add(p + "post_attention_layernorm.weight", Dtype::kBF16, {256});
    r.add(p + "self_attn.q_a_layernorm.weight", Dtype::kBF16, {64});
    r.add(p + "self_attn.kv_a_layernorm.weight", Dtype::kBF16, {64});
    linear(p + "self_attn.q_a_proj", 64, 256);
    linear(p + "self_attn.q_b_proj", 200, 64);
    linear(p + "self_attn.kv_a_proj_with_mqa", 72, 256);
    linear(p + "self_attn.kv_b_proj", 256, 64);
    linear(p + "self_attn.o_proj", 256, 128);
    if (l == 0) {
      for (const char* proj : {"gate_proj", "up_proj"}) linear(p + "mlp." + proj, 512, 256);
      linear(p + "mlp.down_proj", 256, 512);
      continue;
    }
    r.add(p + "mlp.gate.weight", Dtype::kBF16, {2, 256});
    r.add(p + "mlp.gate.e_score_correction_bias", Dtype::kF32, {2});
    for (const std::string e : {"mlp.experts.0.", "mlp.experts.1.", "mlp.shared_experts."}) {
      linear(p + e + "gate_proj", 128, 256);
      linear(p + e + "up_proj", 128, 256);
      linear(p + e + "down_proj", 256, 128);
    }
  }
}

bool routed_experts(const std::string& m) { return m.find(".mlp.experts.") != std::string::npos; }
bool not_lm_head(const std::string& m) { return m != "lm_head"; }

Json model_config(const Json& quantization) {
  Json c = {
      {"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "kimi_k2"}, {"num_hidden_layers", 2}};
  if (!quantization.is_null()) c["quantization_config"] = quantization;
  return c;
}

Json kimi_thinking_quantization() {
  Scheme s;
  s.family = Family::kCtInt4;
  s.group_size = 32;
  return *quantization_config_json(s, {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                       R"(re:.*mlp\.(gate|up|gate_up|down)_proj.*)"});
}

Json deepseek_fp8_quantization() {
  Scheme s;
  s.family = Family::kFp8Block;
  s.block = {128, 128};
  return *quantization_config_json(s, {});
}

Release kimi_thinking() {
  Release r;
  r.config(model_config(kimi_thinking_quantization()));
  deepseek_model(r, routed_experts,
                 [](Release& rr, const std::string& m, uint64_t n, uint64_t k) { ct_int4(rr, m, n, k, 32); });
  return r;
}

Release deepseek_fp8() {
  Release r;
  r.config(model_config(deepseek_fp8_quantization()));
  deepseek_model(r, not_lm_head, fp8_block);
  return r;
}

void expect_refusal(const Result<WeightDescription>& d, std::string_view reason, std::string_view tensor) {
  ASSERT_FALSE(d.ok()) << "expected " << reason;
  EXPECT_EQ(d.error().reason(), reason) << d.error().to_string();
  if (!tensor.empty()) {
    EXPECT_EQ(d.error().detail("tensor"), tensor) << d.error().to_string();
    EXPECT_NE(d.error().message().find(tensor), std::string::npos) << d.error().to_string();
  }
}

// ---- each family as published ----

TEST(DescribeWeights, KimiK2ThinkingIsCompressedTensorsInt4OnRoutedExpertsOnly) {
  Release r = kimi_thinking();
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "int4-ct-g32-sym");
  EXPECT_EQ(d->quant_method, "compressed-tensors");
  EXPECT_EQ(d->config_field, "quantization_config");
  EXPECT_EQ(d->scheme.family, Family::kCtInt4);
  EXPECT_EQ(d->scheme.group_size, 32);
  EXPECT_EQ(d->scheme.scale_dtype, Dtype::kBF16);
  EXPECT_EQ(d->scheme.dense_dtype, Dtype::kBF16);
  ASSERT_EQ(d->quantized.size(), 6u);  // 2 experts x 3 projections
  const QuantizedLinear* up = d->find("model.layers.1.mlp.experts.1.up_proj");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->rows, 128u);
  EXPECT_EQ(up->cols, 256u);
  ASSERT_NE(up->part(PartRole::kShape), nullptr);
  EXPECT_EQ(up->part(PartRole::kZeros), nullptr);
  EXPECT_EQ(up->stored_bytes(), 128u * 32 * 4 + 128u * 8 * 2 + 16);
  EXPECT_EQ(d->find("model.layers.1.mlp.shared_experts.up_proj"), nullptr);
  size_t dense_linear = 0;
  for (const DenseTensor& t : d->dense) dense_linear += t.linear;
  EXPECT_EQ(dense_linear, 2u * 5 + 3 + 3 + 1);  // attention, the dense MLP, the shared expert, lm_head
}

TEST(DescribeWeights, ReadsAQuantizationConfigNestedUnderTextConfig) {
  Release r = kimi_thinking();
  Json c = {
      {"architectures", {"KimiVLForConditionalGeneration"}},
      {"text_config", {{"num_hidden_layers", 2}, {"quantization_config", kimi_thinking_quantization()}}}};
  r.config(c);
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->config_field, "text_config.quantization_config");
  EXPECT_EQ(d->word, "int4-ct-g32-sym");
}

TEST(DescribeWeights, DeepSeekV3Fp8IsBlockScaledWithPartialBlocksOfTheirOwn) {
  Release r = deepseek_fp8();
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "fp8-block");
  EXPECT_EQ(d->scheme.scale_dtype, Dtype::kF32);
  const QuantizedLinear* q_b = d->find("model.layers.0.self_attn.q_b_proj");  // N 200, K 64: 2 x 1 blocks
  ASSERT_NE(q_b, nullptr);
  EXPECT_EQ(q_b->part(PartRole::kScale)->tensor->shape, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(d->find("model.layers.1.mlp.gate"), nullptr);  // the router stays BF16
  EXPECT_EQ(d->quantized.size(), 5u * 2 + 3 + 9);
}

TEST(DescribeWeights, Fp8Ue8m0ScalesMustBePowersOfTwo) {
  Release r = deepseek_fp8();
  Json q = deepseek_fp8_quantization();
  q["scale_fmt"] = "ue8m0";
  r.config(model_config(q));
  auto ok = r.describe();
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();  // 1.0 is 2^0
  EXPECT_TRUE(ok->scheme.scale_ue8m0);
  EXPECT_EQ(ok->word, "fp8-block");
  r.set("model.layers.0.self_attn.o_proj.weight_scale_inv",
        Release::bytes_of(std::vector<float>{0.75f, 1.0f}));
  expect_refusal(r.describe(), reasons::kQuantValueInvalid,
                 "model.layers.0.self_attn.o_proj.weight_scale_inv");
}

TEST(DescribeWeights, Glm45Fp8IsCompressedTensorsFp8PerChannel) {
  Release r;
  Scheme s;
  s.family = Family::kFp8Channel;
  r.config(model_config(*quantization_config_json(s, {"lm_head"})));
  deepseek_model(r, not_lm_head, fp8_channel);
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "fp8-channel");
}

TEST(DescribeWeights, AwqAndGptqReleases) {
  for (bool v2 : {false, true}) {
    Release r;
    Scheme s;
    s.family = Family::kGptqInt4;
    s.group_size = 128;
    s.gptq_v2 = v2;
    r.config(model_config(*quantization_config_json(s, {})));
    deepseek_model(r, not_lm_head,
                   [](Release& rr, const std::string& m, uint64_t n, uint64_t k) { gptq(rr, m, n, k, 128); });
    auto d = r.describe();
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    EXPECT_EQ(d->word, v2 ? "gptq-g128-v2" : "gptq-g128");
    EXPECT_EQ(d->find("model.layers.0.self_attn.q_b_proj")->cols, 64u);  // K 64 < G: one short group
  }
  Release a;
  Scheme s;
  s.family = Family::kAwqInt4;
  s.group_size = 64;
  a.config(model_config(*quantization_config_json(s, {})));
  deepseek_model(a, not_lm_head,
                 [](Release& rr, const std::string& m, uint64_t n, uint64_t k) { awq(rr, m, n, k, 64); });
  auto d = a.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "awq-g64");
  EXPECT_EQ(d->scheme.scale_dtype, Dtype::kF16);
}

TEST(DescribeWeights, CompressedTensorsAsymmetricAndActivationOrder) {
  Release r;
  Scheme s;
  s.family = Family::kCtInt4;
  s.group_size = 64;
  s.symmetric = false;
  s.act_order = true;
  r.config(model_config(*quantization_config_json(s, {"lm_head"})));
  deepseek_model(r, not_lm_head, [](Release& rr, const std::string& m, uint64_t n, uint64_t k) {
    ct_int4(rr, m, n, k, 64, false, true);
  });
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "int4-ct-g64-asym");
  EXPECT_TRUE(d->scheme.act_order);
  // N 200 rows: 25 words of zero points along N; N 72: 9.
  EXPECT_EQ(d->find("model.layers.0.self_attn.kv_a_proj_with_mqa")->part(PartRole::kZeros)->tensor->shape[0],
            9u);
}

TEST(DescribeWeights, OurOwnInt8AndInt4) {
  for (const char* fmt : {"int8", "int4"}) {
    const bool int8 = std::string(fmt) == "int8";
    Release r;
    Json q = {{"quant_method", "infergate"}, {"weight_format", fmt},       {"bits", int8 ? 8 : 4},
              {"group_size", int8 ? 0 : 32}, {"symmetric", false || int8}, {"scale_dtype", "float16"}};
    r.config(model_config(q));
    Json quantized = Json::object();
    deepseek_model(r, not_lm_head, [&](Release& rr, const std::string& m, uint64_t n, uint64_t k) {
      rr.add(m + ".qweight", int8 ? Dtype::kI8 : Dtype::kU8, {n, int8 ? k : ceil_div(k, 2)});
      if (int8) {
        rr.add(m + ".scales", Dtype::kF16, {n});
      } else {
        rr.add(m + ".scales", Dtype::kF16, {n, ceil_div(k, 32)});
        rr.add(m + ".zeros", Dtype::kU8, {n, ceil_div(k, 32)});
      }
      quantized[m + ".weight"] = {{"shape", {n, k}}};
    });
    r.record({{"format_version", 1}, {"weight_format", fmt}, {"quantized", quantized}});
    auto d = r.describe();
    ASSERT_TRUE(d.ok()) << fmt << ": " << d.error().to_string();
    EXPECT_EQ(d->word, fmt);
    EXPECT_EQ(d->quant_method, "infergate");
  }
}

TEST(DescribeWeights, DenseReleasesNameTheirDtype) {
  Release r;
  r.config({{"torch_dtype", "bfloat16"}, {"num_hidden_layers", 2}});
  deepseek_model(
      r, [](const std::string&) { return false; }, fp8_block);
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->word, "bf16");
  EXPECT_TRUE(d->quantized.empty());
  Release f;
  f.add("model.layers.0.mlp.up_proj.weight", Dtype::kF16, {8, 8});
  f.add("model.norm.weight", Dtype::kF32, {8});
  EXPECT_EQ(f.describe()->word, "fp16");
}

TEST(DescribeWeights, MultiTokenPredictionLayersAreDescribedButNotHeldToTheRules) {
  Release r = deepseek_fp8();
  r.config({{"num_hidden_layers", 1}, {"quantization_config", deepseek_fp8_quantization()}});
  r.add("model.layers.1.eh_proj.weight", Dtype::kBF16, {256, 512});  // a BF16 linear in layer 1 (= MTP here)
  auto d = r.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
}

// ---- refusals, each naming what is wrong ----

TEST(DescribeWeights, RaggedShapesAsEachFormatDefinesThem) {
  // compressed-tensors: N 100 and K 96 pad the last word of zero points (13 words for 100 rows).
  Release ct;
  Scheme s;
  s.family = Family::kCtInt4;
  s.group_size = 32;
  s.symmetric = false;
  ct.config(model_config(*quantization_config_json(s, {})));
  ct_int4(ct, "model.layers.0.mlp.up_proj", 100, 96, 32, false);
  auto d = ct.describe();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->find("model.layers.0.mlp.up_proj")->part(PartRole::kZeros)->tensor->shape,
            (std::vector<uint64_t>{13, 3}));
  // GPTQ packs 8 zero points per word along N: N 100 cannot be stored, and is refused by name.
  Release g;
  Scheme gs;
  gs.family = Family::kGptqInt4;
  gs.group_size = 32;
  g.config(model_config(*quantization_config_json(gs, {})));
  g.add("model.layers.0.mlp.up_proj.qweight", Dtype::kI32, {12, 100});
  g.add("model.layers.0.mlp.up_proj.qzeros", Dtype::kI32, {3, 12});
  g.add("model.layers.0.mlp.up_proj.scales", Dtype::kF16, {3, 100});
  expect_refusal(g.describe(), reasons::kQuantPartShape, "model.layers.0.mlp.up_proj.qweight");
}

TEST(DescribeWeightsRefuses, AnUnknownQuantMethod) {
  Release r = deepseek_fp8();
  r.config(model_config({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}));
  auto d = r.describe();
  expect_refusal(d, reasons::kUnknownQuantMethod, "");
  EXPECT_EQ(d.error().detail("field"), "quantization_config.quant_method");
}

TEST(DescribeWeightsRefuses, VariantsItDoesNotDescribe) {
  Json per_tensor = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  Json static_act = deepseek_fp8_quantization();
  static_act["activation_scheme"] = "static";
  Json gptq8 = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 128}};
  Json ct_static = kimi_thinking_quantization();
  ct_static["config_groups"]["group_0"]["input_activations"] = {
      {"dynamic", false}, {"num_bits", 8}, {"type", "float"}};
  Json transformed = kimi_thinking_quantization();
  transformed["transform_config"] = {{"config_groups", {{"u", {{"type", "hadamard"}}}}}};
  Json awq_gemv = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}};
  for (const Json& q : {per_tensor, static_act, gptq8, ct_static, transformed, awq_gemv}) {
    Release r = deepseek_fp8();
    r.config(model_config(q));
    auto d = r.describe();
    ASSERT_FALSE(d.ok()) << q.dump();
    EXPECT_EQ(d.error().reason(), reasons::kUnsupportedQuantization)
        << q.dump() << " " << d.error().to_string();
    EXPECT_FALSE(d.error().detail("field").empty());
  }
}

TEST(DescribeWeightsRefuses, MalformedConfigFieldsNamingThePath) {
  Json q = kimi_thinking_quantization();
  q["config_groups"]["group_0"]["weights"]["group_size"] = "32";
  Release r = kimi_thinking();
  r.config(model_config(q));
  auto d = r.describe();
  expect_refusal(d, reasons::kInvalidQuantizationConfig, "");
  EXPECT_NE(d.error().message().find("quantization_config.config_groups.group_0.weights.group_size"),
            std::string::npos)
      << d.error().to_string();
}

TEST(DescribeWeightsRefuses, APackedTensorWithoutItsScale) {
  Release r = kimi_thinking();
  r.remove("model.layers.1.mlp.experts.0.down_proj.weight_scale");
  expect_refusal(r.describe(), reasons::kMissingQuantPart,
                 "model.layers.1.mlp.experts.0.down_proj.weight_scale");
  Release f = deepseek_fp8();
  f.remove("model.layers.1.mlp.experts.1.up_proj.weight_scale_inv");
  expect_refusal(f.describe(), reasons::kMissingQuantPart,
                 "model.layers.1.mlp.experts.1.up_proj.weight_scale_inv");
}

TEST(DescribeWeightsRefuses, AScaleOfTheWrongShape) {
  Release r = kimi_thinking();
  r.find("model.layers.1.mlp.experts.0.up_proj.weight_scale")->shape = {128, 9};
  expect_refusal(r.describe(), reasons::kQuantPartShape, "model.layers.1.mlp.experts.0.up_proj.weight_scale");
  Release f = deepseek_fp8();
  f.find("model.layers.0.self_attn.q_b_proj.weight_scale_inv")->shape = {1, 1};  // N 200 needs 2 block rows
  expect_refusal(f.describe(), reasons::kQuantPartShape,
                 "model.layers.0.self_attn.q_b_proj.weight_scale_inv");
}

TEST(DescribeWeightsRefuses, AWeightShapeThatDisagreesWithThePackedSize) {
  Release r = kimi_thinking();
  r.set("model.layers.1.mlp.experts.0.gate_proj.weight_shape",
        Release::bytes_of(std::vector<int64_t>{128, 300}));
  expect_refusal(r.describe(), reasons::kQuantPartShape,
                 "model.layers.1.mlp.experts.0.gate_proj.weight_shape");
  // I32 weight_shape (the dtype is read from the header) works the same way.
  Release i = kimi_thinking();
  TensorHeader* t = i.find("model.layers.1.mlp.experts.0.gate_proj.weight_shape");
  t->dtype = Dtype::kI32;
  t->bytes = 8;
  i.set(t->name, Release::bytes_of(std::vector<int32_t>{128, 256}));
  ASSERT_TRUE(i.describe().ok());
  i.set(t->name, Release::bytes_of(std::vector<int32_t>{64, 256}));
  expect_refusal(i.describe(), reasons::kQuantPartShape, t->name);
}

TEST(DescribeWeightsRefuses, AGroupSizeThatDoesNotDivideK) {
  // compressed-tensors: weight_shape says K = 248 (31 words of 8), which groups of 32 do not divide.
  Release r = kimi_thinking();
  const std::string m = "model.layers.1.mlp.experts.0.gate_proj";
  r.remove(m + ".weight_packed");
  r.remove(m + ".weight_scale");
  r.remove(m + ".weight_shape");
  r.add(m + ".weight_packed", Dtype::kI32, {128, 31});
  r.add(m + ".weight_scale", Dtype::kBF16, {128, 7});
  r.add(m + ".weight_shape", Dtype::kI64, {2}, Release::bytes_of(std::vector<int64_t>{128, 248}));
  expect_refusal(r.describe(), reasons::kGroupSizeMismatch, m + ".weight_packed");
  // AWQ: K 192 rows of qweight with groups of 128.
  Release a;
  Scheme s;
  s.family = Family::kAwqInt4;
  s.group_size = 128;
  a.config(model_config(*quantization_config_json(s, {})));
  awq(a, "model.layers.0.mlp.up_proj", 256, 256, 128);
  a.add("model.layers.0.mlp.down_proj.qweight", Dtype::kI32, {192, 32});
  a.add("model.layers.0.mlp.down_proj.qzeros", Dtype::kI32, {1, 32});
  a.add("model.layers.0.mlp.down_proj.scales", Dtype::kF16, {1, 256});
  expect_refusal(a.describe(), reasons::kGroupSizeMismatch, "model.layers.0.mlp.down_proj.qweight");
}

TEST(DescribeWeightsRefuses, AConfigThatNamesAFormatItsTensorsDoNotHave) {
  Release bf16;
  bf16.config(model_config(deepseek_fp8_quantization()));
  deepseek_model(
      bf16, [](const std::string&) { return false; }, fp8_block);
  auto d = bf16.describe();
  expect_refusal(d, reasons::kFormatMismatch, "");
  EXPECT_EQ(d.error().detail("field"), "quantization_config");
  // Packed tensors without any quantization_config.
  Release packed = kimi_thinking();
  packed.config({{"num_hidden_layers", 2}});
  expect_refusal(packed.describe(), reasons::kFormatMismatch,
                 "model.layers.1.mlp.experts.0.gate_proj.weight_packed");
  // Another format's parts under a compressed-tensors config.
  Release mixed = kimi_thinking();
  gptq(mixed, "model.layers.1.mlp.shared_experts.extra_proj", 128, 256, 128);
  expect_refusal(mixed.describe(), reasons::kFormatMismatch,
                 "model.layers.1.mlp.shared_experts.extra_proj.qweight");
}

TEST(DescribeWeightsRefuses, ATensorTheRulesSayIsQuantizedButIsNotAndTheOtherWayRound) {
  Release r;
  r.config(model_config(kimi_thinking_quantization()));
  const std::string expert = "model.layers.1.mlp.experts.1.down_proj";
  deepseek_model(
      r, [&](const std::string& m) { return routed_experts(m) && m != expert; },
      [](Release& rr, const std::string& m, uint64_t n, uint64_t k) { ct_int4(rr, m, n, k, 32); });
  auto d = r.describe();
  expect_refusal(d, reasons::kIgnoreRuleMismatch, expert + ".weight");
  EXPECT_NE(d.error().message().find("target 'Linear'"), std::string::npos) << d.error().to_string();

  Release a;
  a.config(model_config(kimi_thinking_quantization()));
  const std::string attn = "model.layers.0.self_attn.o_proj";
  deepseek_model(
      a, [&](const std::string& m) { return routed_experts(m) || m == attn; },
      [](Release& rr, const std::string& m, uint64_t n, uint64_t k) { ct_int4(rr, m, n, k, 32); });
  auto e = a.describe();
  expect_refusal(e, reasons::kIgnoreRuleMismatch, attn);
  EXPECT_NE(e.error().message().find("re:.*self_attn.*"), std::string::npos) << e.error().to_string();
}

TEST(DescribeWeightsRefuses, IgnorePatternsItCannotEvaluate) {
  Json q = kimi_thinking_quantization();
  q["ignore"].push_back("re:(?<=mlp)\\.gate");
  Release r = kimi_thinking();
  r.config(model_config(q));
  expect_refusal(r.describe(), kUnsupportedPattern, "");
}

TEST(DescribeWeightsRefuses, ScalesThatAreNotFiniteOrNegative) {
  for (float bad : {std::nanf(""), INFINITY, -0.5f}) {
    Release r = deepseek_fp8();
    r.set("model.layers.1.mlp.experts.0.up_proj.weight_scale_inv",
          Release::bytes_of(std::vector<float>{1.0f, bad}));
    auto d = r.describe();
    expect_refusal(d, reasons::kQuantValueInvalid, "model.layers.1.mlp.experts.0.up_proj.weight_scale_inv");
    EXPECT_EQ(d.error().detail("index"), "1");
  }
  EXPECT_TRUE(deepseek_fp8().describe(/*values=*/false).ok());
}

TEST(DescribeWeightsRefuses, AGIdxOutOfRangeOrIgnoredByEngines) {
  Release r;
  Scheme s;
  s.family = Family::kGptqInt4;
  s.group_size = 128;
  r.config(model_config(*quantization_config_json(s, {})));
  gptq(r, "model.layers.0.mlp.up_proj", 256, 256, 128);
  std::vector<int32_t> gi(256);
  for (int i = 0; i < 256; ++i) gi[i] = (255 - i) / 128;  // reversed: fine for desc_act, not without it
  r.set("model.layers.0.mlp.up_proj.g_idx", Release::bytes_of(gi));
  expect_refusal(r.describe(), reasons::kQuantValueInvalid, "model.layers.0.mlp.up_proj.g_idx");
  gi[0] = 2;
  Scheme act = s;
  act.act_order = true;
  r.config(model_config(*quantization_config_json(act, {})));
  r.set("model.layers.0.mlp.up_proj.g_idx", Release::bytes_of(gi));
  expect_refusal(r.describe(), reasons::kQuantValueInvalid, "model.layers.0.mlp.up_proj.g_idx");
}

TEST(DescribeWeightsRefuses, PartsOfTheWrongDtypeOrWithoutTheirWeight) {
  Release r = deepseek_fp8();
  r.find("model.layers.0.mlp.up_proj.weight_scale_inv")->dtype = Dtype::kBF16;
  expect_refusal(r.describe(false), reasons::kQuantPartDtype, "model.layers.0.mlp.up_proj.weight_scale_inv");
  Release bf = deepseek_fp8();
  bf.find("model.layers.0.mlp.up_proj.weight")->dtype = Dtype::kBF16;
  expect_refusal(bf.describe(false), reasons::kQuantPartDtype, "model.layers.0.mlp.up_proj.weight");
  Release orphan = kimi_thinking();
  orphan.remove("model.layers.1.mlp.experts.0.up_proj.weight_packed");
  auto d = orphan.describe();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), reasons::kOrphanQuantPart) << d.error().to_string();
  EXPECT_NE(d.error().detail("tensor").find("model.layers.1.mlp.experts.0.up_proj.weight_"),
            std::string::npos);
}

TEST(DescribeWeightsRefuses, ATensorInTwoShards) {
  Release r = kimi_thinking();
  r.add("model.norm.weight", Dtype::kBF16, {256});
  r.meta().tensors.back().file = "model-00002-of-00002.safetensors";
  expect_refusal(r.describe(), kInvalidSafetensors, "model.norm.weight");
}

TEST(DescribeWeightsRefuses, OurRecordAndConfigDisagreeing) {
  Release r = kimi_thinking();
  r.record({{"weight_format", "int8"}, {"quantized", Json::object()}});
  auto d = r.describe();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), reasons::kInvalidQuantizationConfig);
  EXPECT_EQ(d.error().detail("field"), "quantization.json");
}

// docs/quant-formats.md lists every reason word describe_weights can return.
TEST(DescribeWeights, DocsListEveryReasonWord) {
  std::ifstream f(std::string(INFERGATE_SOURCE_DIR) + "/docs/quant-formats.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  ASSERT_FALSE(doc.empty());
  for (std::string_view w : description_reasons()) {
    EXPECT_NE(doc.find("`" + std::string(w) + "`"), std::string::npos) << w;
  }
}

}  // namespace
}  // namespace infergate::weights
