// The memory model against numbers worked out by hand from the published configs and the page and
// weight layouts (docs/quant-formats.md): KV pages for grouped-query and latent caches, weights per
// format, tensor-parallel shards, workspace and reserves.
#include "infergate/runtime/planner/memory_model.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/runtime/model/quantize.h"
#include "testing.h"

namespace infergate::runtime::planner {
namespace {

using infergate::testing::refused;

using kernels::KvDtype;
using testing::config;

KvModel kv(const std::string& name, KvDtype d, int64_t tp = 1) {
  auto m = kv_model(config(name), d, tp);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().to_string());
  return m.ok() ? *m : KvModel{};
}

WeightBreakdown weights(const std::string& name, WeightOptions w, int64_t tp = 1) {
  auto b = weight_bytes(config(name), w, tp);
  EXPECT_TRUE(b.ok()) << (b.ok() ? "" : b.error().to_string());
  return b.ok() ? *b : WeightBreakdown{};
}

WeightOptions format(WeightFormat f, int64_t group = 128, bool symmetric = false) {
  WeightOptions w;
  w.format = f;
  w.group_size = group;
  w.symmetric = symmetric;
  return w;
}

// ---- KV: grouped-query ----

TEST(KvModel, Fp16PagesOfLlama3_70BMatchTheTextbookExactly) {
  // 8 KV heads x 16 tokens x 128 dims x 2 bytes, for K and for V; no scales, nothing to pad.
  KvModel m = kv("llama-3-70b", KvDtype::kF16);
  EXPECT_EQ(m.kind, CacheKind::kGroupedQuery);
  EXPECT_EQ(m.page_bytes, 2 * 8 * 16 * 128 * 2);
  EXPECT_EQ(m.block_bytes(), int64_t{80} * 65536);
  EXPECT_EQ(m.bytes_per_token(), 80.0 * 2 * 8 * 128 * 2) << "layers x 2 x kv_heads x head_dim x 2 bytes";
  EXPECT_EQ(m.staging_bytes(), 0);
}

TEST(KvModel, Int8PagesCarryOneFp16ScalePerHeadAndToken) {
  // Qwen2.5-72B: 8 KV heads, head_dim 128, 80 layers. Data 8x16x128 per K and V, scales 8x16x2 each.
  KvModel m = kv("qwen2.5-72b", KvDtype::kInt8);
  EXPECT_EQ(m.page_data_bytes, 2 * 8 * 16 * 128);
  EXPECT_EQ(m.page_param_bytes, 2 * 8 * 16 * 2);
  EXPECT_EQ(m.page_bytes, 33280);
  EXPECT_EQ(m.block_bytes(), int64_t{80} * 33280);
  EXPECT_GT(m.bytes_per_token(), 80.0 * 2 * 8 * 128 * 1)
      << "the textbook's 1 byte per value leaves out the scales";
}

TEST(KvModel, Glm4_9BPagesInEveryDtype) {
  // GLM-4-9B: 2 KV heads, head_dim 128, 40 layers. Regions are 16-byte aligned.
  const int64_t h = 2, p = 16, d = 128;
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kF16).page_bytes, 2 * h * p * d * 2);
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kBF16).page_bytes, 2 * h * p * d * 2);
  // fp8: one fp32 scale per head for K and for V (8 bytes each, padded to 16).
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kFp8E4M3).page_bytes, 2 * h * p * d + 2 * 16);
  // int8: an fp16 scale per (head, token): 64 bytes each for K and V.
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kInt8).page_bytes, 2 * h * p * d + 2 * h * p * 2);
  // int4: two values per byte; (fp16 d, fp16 m) per (head, token, 64 dims): 2 groups of 4 bytes.
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kInt4).page_bytes, 2 * h * p * d / 2 + 2 * h * p * 2 * 4);
  // int4-kivi: keys per channel, (d, m) per (head, channel); values as int4; fp16 key staging per
  // running sequence for the page still filling.
  KvModel kivi = kv("glm-4-9b-chat-hf", KvDtype::kInt4Kivi);
  EXPECT_EQ(kivi.page_bytes, 2 * h * p * d / 2 + h * d * 4 + h * p * 2 * 4);
  EXPECT_EQ(kivi.staging_bytes_per_layer, h * p * d * 2);
  EXPECT_EQ(kivi.staging_bytes(), 40 * h * p * d * 2);
  EXPECT_EQ(kivi.bytes_for(3, 100), 3 * (7 * 40 * kivi.page_bytes + 40 * h * p * d * 2))
      << "100 tokens take 7 blocks; each sequence has one staging window per layer";
}

TEST(KvModel, Glm45UsesItsEightKvHeadsOver92Layers) {
  KvModel m = kv("glm-4.5", KvDtype::kF16);
  EXPECT_EQ(m.page_bytes, 2 * 8 * 16 * 128 * 2);
  EXPECT_EQ(m.layers, 92);
  EXPECT_EQ(m.values_per_token_per_layer, config("glm-4.5").kv_cache_values_per_token_per_layer());
}

// ---- KV: multi-head latent attention ----

TEST(KvModel, DeepseekV3CachesTheLatentRowWithoutHeadsOrFactorTwo) {
  // kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values per token per layer.
  KvModel m = kv("deepseek-v3", KvDtype::kF16);
  EXPECT_EQ(m.kind, CacheKind::kLatent);
  EXPECT_EQ(m.values_per_token_per_layer, 576);
  EXPECT_EQ(m.page_bytes, 16 * 576 * 2);
  EXPECT_EQ(m.bytes_per_token(), 61.0 * 576 * 2);
  // fp8: one fp32 scale (padded to 16); int8: an fp16 scale per token; int4: 4 groups of 128 over the
  // latent and one of 64 over the rope key per token (kv_latent_layout).
  EXPECT_EQ(kv("deepseek-v3", KvDtype::kFp8E4M3).page_bytes, 16 * 576 + 16);
  EXPECT_EQ(kv("deepseek-v3", KvDtype::kInt8).page_bytes, 16 * 576 + 16 * 2);
  EXPECT_EQ(kv("deepseek-v3", KvDtype::kInt4).page_bytes, 16 * 288 + 16 * 5 * 4);
  EXPECT_EQ(kv("deepseek-v3", KvDtype::kInt4).page.int4_group, 128);
  KvModel kivi = kv("deepseek-v3", KvDtype::kInt4Kivi);
  EXPECT_EQ(kivi.page_bytes, 16 * 288 + 576 * 4);
  EXPECT_EQ(kivi.staging_bytes_per_layer, 16 * 576 * 2);
}

TEST(KvModel, LatentCacheIsAFractionOfWhatTheTextbookFormulaClaims) {
  const model::ModelConfig c = config("kimi-k2");
  KvModel m = kv("kimi-k2", KvDtype::kF16);
  const double textbook_per_token = 61.0 * 2 * 64 * 192 * 2;  // layers x 2 x kv_heads x head_dim x bytes
  EXPECT_EQ(c.num_key_value_heads, 64);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(m.bytes_per_token(), 61.0 * 576 * 2);
  EXPECT_NEAR(textbook_per_token / m.bytes_per_token(), 2.0 * 64 * 192 / 576, 1e-9) << "about 42.7x";
}

// ---- KV: tensor parallelism ----

TEST(KvModel, TensorParallelDividesKvHeadsAndReplicatesWhenThereAreMoreGpus) {
  EXPECT_EQ(kv("llama-3-70b", KvDtype::kF16, 2).page_bytes, 2 * 4 * 16 * 128 * 2);
  EXPECT_EQ(kv("llama-3-70b", KvDtype::kF16, 8).page_bytes, 2 * 1 * 16 * 128 * 2);
  EXPECT_EQ(kv("llama-3-70b", KvDtype::kF16, 16).page_bytes, 2 * 1 * 16 * 128 * 2) << "one head per GPU";
  EXPECT_EQ(kv("glm-4-9b-chat-hf", KvDtype::kF16, 4).page.num_kv_heads, 1);
}

TEST(KvModel, LatentCacheIsTheSameOnEveryGpu) {
  EXPECT_EQ(kv("deepseek-v3", KvDtype::kInt8, 8).page_bytes, kv("deepseek-v3", KvDtype::kInt8, 1).page_bytes);
}

TEST(KvModel, RefusesATensorParallelDegreeThatDoesNotSplitTheHeads) {
  auto m = kv_model(config("llama-3-70b"), KvDtype::kF16, 3);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "InvalidPlanInput");
  EXPECT_EQ(m.error().detail("field"), "tensor_parallel");
  EXPECT_NE(m.error().message().find("num_attention_heads"), std::string::npos);
  // GLM-4-9B: 32 heads and 2 KV heads; 4 divides the heads and is a multiple of the KV heads.
  EXPECT_TRUE(kv_model(config("glm-4-9b-chat-hf"), KvDtype::kF16, 4).ok());
  EXPECT_TRUE(refused(kv_model(config("glm-4-9b-chat-hf"), KvDtype::kF16, 0), "InvalidPlanInput",
                      {"tensor_parallel: must be at least 1, got 0"}));
}

// ---- weights ----

// Llama-3-70B by hand: per layer q/o 8192x8192, k/v 1024x8192, gate/up 28672x8192, down 8192x28672,
// two norms of 8192; embeddings and lm_head 128256x8192; a final norm.
constexpr int64_t kLlamaLinearPerLayer = 2 * 8192LL * 8192 + 2 * 1024LL * 8192 + 3 * 28672LL * 8192;
constexpr int64_t kLlamaRowsPerLayer = 8192 + 1024 + 1024 + 8192 + 28672 + 28672 + 8192;
constexpr int64_t kLlamaEmbedding = 128256LL * 8192;
constexpr int64_t kLlamaNorms = 80 * 2 * 8192 + 8192;

TEST(WeightBytes, Fp16IsTwoBytesPerMatrixParameterAndNormsAreFp32) {
  WeightBreakdown b = weights("llama-3-70b", format(WeightFormat::kF16));
  EXPECT_EQ(b.parameters, 70'553'706'496);
  EXPECT_EQ(b.parameters, 80 * kLlamaLinearPerLayer + 2 * kLlamaEmbedding + kLlamaNorms);
  EXPECT_EQ(b.total(), 2 * (b.parameters - kLlamaNorms) + 4 * kLlamaNorms);
  EXPECT_EQ(b.tensors_compressed, 0);
  EXPECT_EQ(b.embeddings, 2 * kLlamaEmbedding) << "bf16 checkpoint, looked up as it is";
  EXPECT_EQ(b.lm_head, 2 * kLlamaEmbedding);
  EXPECT_EQ(b.norms, 4 * kLlamaNorms);
}

TEST(WeightBytes, EmbeddingsStayInTheCheckpointDtypeAndATiedLmHeadGetsAConvertedCopy) {
  model::ModelConfig c = testing::config("llama-3-70b");
  c.torch_dtype = model::DType::kF32;
  WeightBreakdown f32 = *weight_bytes(c, format(WeightFormat::kF16));
  EXPECT_EQ(f32.embeddings, 4 * kLlamaEmbedding);
  EXPECT_EQ(f32.lm_head, 2 * kLlamaEmbedding) << "converted to fp16";
  c.tie_word_embeddings = true;
  c.torch_dtype = model::DType::kBF16;
  EXPECT_EQ(weight_bytes(c, format(WeightFormat::kBF16))->lm_head, 0) << "shares the bf16 table";
  EXPECT_EQ(weight_bytes(c, format(WeightFormat::kF16))->lm_head, 2 * kLlamaEmbedding) << "an fp16 copy";
  EXPECT_EQ(weight_bytes(c, format(WeightFormat::kInt8))->lm_head, 0) << "kept in bf16: shared";
}

TEST(WeightBytes, Int8HasOneFp16ScalePerOutputRowAndKeepsEmbeddingsNormsAndLmHead) {
  WeightBreakdown b = weights("llama-3-70b", format(WeightFormat::kInt8));
  EXPECT_EQ(b.packed, 80 * kLlamaLinearPerLayer);
  EXPECT_EQ(b.scales, 80 * kLlamaRowsPerLayer * 2);
  EXPECT_EQ(b.zeros, 0);
  EXPECT_EQ(b.dense, 2 * 2 * kLlamaEmbedding + 4 * kLlamaNorms) << "bf16 embeddings and lm_head, fp32 norms";
  EXPECT_EQ(b.tensors_compressed, 80 * 7);
}

TEST(WeightBytes, Int4HasScalesAndZeroPointsPerGroup) {
  // Every K here is a multiple of 128: rows x K/128 groups = parameters / 128.
  WeightBreakdown asym = weights("llama-3-70b", format(WeightFormat::kInt4, 128, false));
  EXPECT_EQ(asym.packed, 80 * kLlamaLinearPerLayer / 2);
  EXPECT_EQ(asym.scales, 80 * kLlamaLinearPerLayer / 128 * 2);
  EXPECT_EQ(asym.zeros, 80 * kLlamaLinearPerLayer / 128);
  WeightBreakdown sym = weights("llama-3-70b", format(WeightFormat::kInt4, 32, true));
  EXPECT_EQ(sym.scales, 80 * kLlamaLinearPerLayer / 32 * 2);
  EXPECT_EQ(sym.zeros, 0);
  WeightOptions head = format(WeightFormat::kInt4);
  head.quantize_lm_head = true;
  WeightBreakdown with_head = weights("llama-3-70b", head);
  EXPECT_EQ(with_head.lm_head, kLlamaEmbedding / 2 + kLlamaEmbedding / 128 * 3);
}

TEST(WeightBytes, Int4GroupsOfAnUnevenWidthRoundUp) {
  // GLM-4-9B's down_proj has K = 13696 = 107 x 128: 107 groups; with 64: 214.
  WeightBreakdown g128 = weights("glm-4-9b-chat-hf", format(WeightFormat::kInt4, 128, true));
  WeightBreakdown g64 = weights("glm-4-9b-chat-hf", format(WeightFormat::kInt4, 64, true));
  EXPECT_GT(g64.scales, g128.scales);
  // Qwen2.5-72B under TP 8: down_proj's 29568 / 8 = 3696 columns per GPU = 28.9 groups -> 29.
  auto q = weight_bytes(config("qwen2.5-72b"), format(WeightFormat::kInt4, 128, true), 8);
  ASSERT_TRUE(q.ok());
  auto shards = shard_tensors(config("qwen2.5-72b"), 8);
  ASSERT_TRUE(shards.ok());
  int64_t groups = 0;
  for (const ShardedTensor& t : *shards) {
    if (t.shard_shape.size() == 2 && model::quantizer_compresses({t.name, t.shape}, false)) {
      groups += static_cast<int64_t>(t.shard_shape[0] * ((t.shard_shape[1] + 127) / 128));
    }
  }
  EXPECT_EQ(q->scales, groups * 2);
}

TEST(WeightBytes, MoeCountsEveryExpertAndKeepsTheRouterDense) {
  const model::ModelConfig c = config("deepseek-v3");
  WeightBreakdown fp16 = weights("deepseek-v3", format(WeightFormat::kF16));
  EXPECT_EQ(fp16.parameters, 671'026'419'200) << "all 256 experts resident in each of 58 MoE layers";
  // 58 MoE layers x (256 routed + 1 shared) experts x 3 x 2048 x 7168.
  EXPECT_EQ(fp16.experts, 2 * 58LL * 257 * 3 * 2048 * 7168);
  // 3 dense layers x 3 x 18432 x 7168.
  EXPECT_EQ(fp16.mlp, 2 * 3LL * 3 * 18432 * 7168);
  WeightBreakdown int4 = weights("deepseek-v3", format(WeightFormat::kInt4));
  // Router 256 x 7168 (bf16) and its score-correction bias (256, fp32), in each MoE layer.
  EXPECT_EQ(int4.router, 58LL * (256 * 7168 * 2 + 256 * 4));
  EXPECT_EQ(int4.router, fp16.router);
  EXPECT_EQ(c.moe->n_routed_experts, 256);
}

TEST(WeightBytes, Glm45HasDenseFirstLayersSharedExpertsAndQkNorms) {
  WeightBreakdown b = weights("glm-4.5", format(WeightFormat::kF16));
  EXPECT_EQ(b.mlp, 2 * 3LL * 3 * 12288 * 5120);
  EXPECT_EQ(b.experts, 2 * 89LL * 161 * 3 * 1536 * 5120);
  // Per layer: input and post-attention norms (5120 each) and q/k norms (128 each); a final norm.
  EXPECT_EQ(b.norms, 4 * (92LL * (2 * 5120 + 2 * 128) + 5120));
}

TEST(WeightBytes, TensorParallelSplitsColumnsAndRowsAndReplicatesNorms) {
  WeightBreakdown b = weights("llama-3-70b", format(WeightFormat::kF16), 8);
  EXPECT_EQ(b.embeddings, 2 * 16032LL * 8192) << "vocabulary split: 128256 / 8 rows";
  EXPECT_EQ(b.model_parameters, 70'553'706'496) << "the whole model, whatever the split";
  EXPECT_EQ(b.norms, 4 * kLlamaNorms) << "norms replicated";
  EXPECT_EQ(b.attention, 2 * 80LL * (8192 * 8192 / 8 * 2 + 128 * 8192 * 2));
  EXPECT_EQ(b.mlp, 2 * 80LL * 3 * 28672 / 8 * 8192);
  // MLA: q_a_proj and kv_a_proj_with_mqa replicated; the rest split by heads.
  auto shards = shard_tensors(config("kimi-k2"), 8);
  ASSERT_TRUE(shards.ok());
  for (const ShardedTensor& t : *shards) {
    if (t.name == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight") {
      EXPECT_EQ(t.split, Split::kReplicated);
      EXPECT_EQ(t.shard_shape, (std::vector<uint64_t>{576, 7168}));
    }
    if (t.name == "model.layers.0.self_attn.kv_b_proj.weight") {
      EXPECT_EQ(t.split, Split::kRows);
      EXPECT_EQ(t.shard_shape, (std::vector<uint64_t>{64 * 256 / 8, 512}));
    }
    if (t.name == "model.layers.5.mlp.experts.3.down_proj.weight") {
      EXPECT_EQ(t.split, Split::kCols);
      EXPECT_EQ(t.shard_shape, (std::vector<uint64_t>{7168, 256}));
    }
    if (t.name == "model.layers.5.mlp.gate.weight") {
      EXPECT_EQ(t.split, Split::kReplicated);
    }
  }
}

TEST(WeightBytes, RefusesABadInt4GroupSizeNamingIt) {
  auto b = weight_bytes(config("llama-3-70b"), format(WeightFormat::kInt4, 100));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().detail("field"), "group_size");
}

// ---- formats, workspace, reserves ----

TEST(Formats, ParseTheRuntimeNamesAndRefuseOthersNamingTheField) {
  EXPECT_EQ(*parse_weight_format("fp16"), WeightFormat::kF16);
  EXPECT_EQ(*parse_weight_format("bf16"), WeightFormat::kBF16);
  EXPECT_EQ(*parse_weight_format("int4"), WeightFormat::kInt4);
  EXPECT_EQ(*parse_kv_dtype("fp8"), KvDtype::kFp8E4M3);
  EXPECT_EQ(*parse_kv_dtype("int4-kivi"), KvDtype::kInt4Kivi);
  for (KvDtype d : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4,
                    KvDtype::kInt4Kivi}) {
    EXPECT_EQ(*parse_kv_dtype(kv_cache_dtype_name(d)), d);
  }
  auto w = parse_weight_format("int3");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().detail("field"), "weight_format");
  auto k = parse_kv_dtype("fp4");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().detail("field"), "kv_cache_dtype");
  EXPECT_NE(k.error().message().find("fp4"), std::string::npos);
}

TEST(Workspace, CountsFp32ActivationsOfTheStepAndOneLogitRowPerSequence) {
  const model::ModelConfig c = config("llama-3-70b");
  Workspace w = activation_workspace(c, 16, WorkspaceOptions{2048});
  // 3 x hidden + q and o (2 x 8192) + k and v (2 x 1024) + gate, up, product (3 x 28672).
  EXPECT_EQ(w.floats_per_token, 3 * 8192 + 2 * 8192 + 2 * 1024 + 3 * 28672);
  EXPECT_EQ(w.activations, 2048 * w.floats_per_token * 4);
  EXPECT_EQ(w.logits, 16 * 128256 * 4);
  EXPECT_EQ(activation_workspace(c, 4096, WorkspaceOptions{2048}).step_tokens, 4096);
  EXPECT_LT(activation_workspace(c, 16, WorkspaceOptions{2048}, 8).floats_per_token, w.floats_per_token);
}

TEST(Reserves, DefaultsAreDocumentedAndOverridable) {
  auto r = reserves(ReserveOptions{}, 100 * kGiB, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cuda_context, 512 * kMiB);
  EXPECT_EQ(r->cuda_graphs, 512 * kMiB);
  EXPECT_EQ(r->nccl, 0) << "no NCCL on one GPU";
  EXPECT_EQ(r->fragmentation, 2 * kGiB);
  EXPECT_EQ(reserves(ReserveOptions{}, 100 * kGiB, 2)->nccl, 1024 * kMiB);
  ReserveOptions o;
  o.cuda_graphs = 0;
  o.fragmentation_fraction = 0.1;
  EXPECT_EQ(reserves(o, 100 * kGiB, 1)->total(), 512 * kMiB + 10 * kGiB);
  o.nccl = -1;
  auto bad = reserves(o, 100 * kGiB, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().detail("field"), "nccl_reserve");
  ReserveOptions f;
  f.fragmentation_fraction = 0.7;
  EXPECT_EQ(reserves(f, kGiB, 1).error().detail("field"), "fragmentation_reserve");
}

}  // namespace
}  // namespace infergate::runtime::planner
