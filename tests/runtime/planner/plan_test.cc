// plan(): the textbook line, the sum of the parts, the verdict and its reason, the limits at the
// requested context and concurrency, tensor parallelism, refusals naming the field, the JSON shape,
// the GPU catalogue and memory sizes.
#include "infergate/runtime/planner/plan.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <functional>

#include "infergate/common/fs.h"
#include "testing.h"

namespace infergate::runtime::planner {
namespace {

using infergate::testing::refused;

using kernels::KvDtype;

PlanInput input(const std::string& model, const std::string& gpu, WeightFormat w, KvDtype kv, int64_t context,
                int64_t concurrency, int64_t tp = 1) {
  PlanInput in;
  in.config = testing::config(model);
  in.model_name = model;
  in.gpu = gpu;
  in.weights.format = w;
  in.kv_cache_dtype = kv;
  in.max_context_length = context;
  in.max_concurrency = concurrency;
  in.tensor_parallel = tp;
  return in;
}

Plan plan_ok(const PlanInput& in) {
  auto p = plan(in);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().to_string());
  return p.ok() ? *p : Plan{};
}

TEST(Plan, FirstLineIsTheTextbookEstimateAsUsuallyQuoted) {
  Plan p = plan_ok(input("llama-3-70b", "h200", WeightFormat::kInt4, KvDtype::kInt8, 8192, 16));
  // 80 x 2 x 8192 x 8 x 128 x 1 x 16 = 21,474,836,480 bytes.
  EXPECT_EQ(p.textbook.bytes, 21474836480.0);
  EXPECT_EQ(p.textbook.line,
            "textbook KV estimate: 80 layers x 2 x 8192 tokens x 8 kv_heads x 128 head_dim x 1 byte x 16 "
            "sequences = 21.47 GB (20.0 GiB)");
  const std::string text = plan_text(p);
  EXPECT_EQ(text.substr(0, text.find('\n')), p.textbook.line);
  // The real allocation adds the int8 scales: 33280 / 32768 of the textbook.
  EXPECT_EQ(p.kv_bytes, int64_t{16} * 512 * 80 * 33280);
}

TEST(Plan, TotalIsTheSumOfItsPartsAndTheVerdictFollowsFromIt) {
  Plan p = plan_ok(input("llama-3-70b", "h200", WeightFormat::kInt4, KvDtype::kInt8, 8192, 16));
  EXPECT_EQ(p.total_bytes, p.weights.total() + p.kv_bytes + p.workspace.total() + p.reserves.total());
  EXPECT_EQ(p.available_bytes, int64_t{143771} << 20);
  EXPECT_EQ(p.margin_bytes, p.available_bytes - p.total_bytes);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.reason, "Fits");
  EXPECT_NE(p.message.find("fits with"), std::string::npos) << p.message;
}

TEST(Plan, MaxConcurrencyIsTheLastThatFits) {
  PlanInput in = input("qwen2.5-72b", "h100", WeightFormat::kInt4, KvDtype::kFp8E4M3, 32768, 4);
  Plan p = plan_ok(in);
  ASSERT_GT(p.max_concurrency_at_context, 0);
  in.max_concurrency = p.max_concurrency_at_context;
  EXPECT_TRUE(plan_ok(in).fits);
  in.max_concurrency = p.max_concurrency_at_context + 1;
  Plan over = plan_ok(in);
  EXPECT_FALSE(over.fits);
  EXPECT_EQ(over.reason, "KvCacheTooLarge");
  EXPECT_NE(over.message.find("short by"), std::string::npos) << over.message;
}

TEST(Plan, MaxContextIsTheLastWholeBlockThatFitsCappedByTheModel) {
  PlanInput in = input("glm-4-9b-chat-hf", "l40s", WeightFormat::kInt8, KvDtype::kInt8, 8192, 64);
  Plan p = plan_ok(in);
  ASSERT_GT(p.max_context_at_concurrency, 0);
  EXPECT_EQ(p.max_context_at_concurrency % kBlockTokens, 0);
  EXPECT_FALSE(p.max_context_capped_by_model);
  in.max_context_length = p.max_context_at_concurrency;
  EXPECT_TRUE(plan_ok(in).fits);
  in.max_context_length = p.max_context_at_concurrency + 1;  // one more block
  EXPECT_FALSE(plan_ok(in).fits);
  // Llama-3-70B stops at its 8192 positions however much memory is left.
  Plan llama = plan_ok(input("llama-3-70b", "h200", WeightFormat::kInt4, KvDtype::kInt4, 4096, 1));
  EXPECT_EQ(llama.max_context_at_concurrency, 8192);
  EXPECT_TRUE(llama.max_context_capped_by_model);
}

TEST(Plan, WeightsThatDoNotFitAreSaidSo) {
  Plan p = plan_ok(input("llama-3-70b", "h100", WeightFormat::kF16, KvDtype::kF16, 4096, 1));
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.reason, "WeightsTooLarge");
  EXPECT_EQ(p.max_concurrency_at_context, 0);
  EXPECT_EQ(p.max_context_at_concurrency, 0);
  EXPECT_LT(p.margin_bytes, 0);
}

TEST(Plan, ContextLongerThanTheModelIsRefusedWithItsReason) {
  Plan p = plan_ok(input("llama-3-70b", "h200", WeightFormat::kInt4, KvDtype::kInt8, 16384, 1));
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.reason, "ContextTooLong");
  EXPECT_NE(p.message.find("8192"), std::string::npos);
}

TEST(Plan, QuantizedKvRaisesConcurrencyInOrderOfBytesPerToken) {
  int64_t last = 0;
  for (KvDtype d : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4}) {
    Plan p = plan_ok(input("qwen2.5-72b", "h200", WeightFormat::kInt8, d, 32768, 8));
    EXPECT_GT(p.max_concurrency_at_context, last) << kv_cache_dtype_name(d);
    last = p.max_concurrency_at_context;
  }
}

TEST(Plan, TensorParallelReportsPerGpuFigures) {
  Plan one = plan_ok(input("qwen2.5-72b", "h100", WeightFormat::kF16, KvDtype::kF16, 32768, 16, 1));
  Plan four = plan_ok(input("qwen2.5-72b", "h100", WeightFormat::kF16, KvDtype::kF16, 32768, 16, 4));
  EXPECT_FALSE(one.fits);
  EXPECT_TRUE(four.fits) << four.message;
  EXPECT_EQ(four.kv_bytes * 4, one.kv_bytes) << "8 KV heads: 2 per GPU";
  EXPECT_LT(four.weights.total(), one.weights.total() / 3);
  EXPECT_EQ(four.reserves.nccl, kDefaultNcclReserve);
  EXPECT_NE(four.message.find("h100 x4"), std::string::npos) << four.message;
}

TEST(Plan, MlaModelsShowWhyTheTextbookDoesNotApply) {
  Plan p = plan_ok(input("kimi-k2", "h200", WeightFormat::kInt4, KvDtype::kFp8E4M3, 32768, 16, 8));
  EXPECT_FALSE(p.textbook.applies);
  EXPECT_NE(p.textbook.line.find("does not apply to multi-head latent attention"), std::string::npos);
  EXPECT_NE(p.textbook.line.find("576 values per token per layer"), std::string::npos);
  EXPECT_EQ(p.kv.kind, CacheKind::kLatent);
  EXPECT_EQ(p.kv_bytes, int64_t{16} * 2048 * 61 * (16 * 576 + 16));
  EXPECT_TRUE(p.fits) << p.message;
}

TEST(Plan, RefusesBadInputNamingTheField) {
  struct Case {
    std::function<void(PlanInput&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](PlanInput& in) { in.max_context_length = 0; }, "max_context_length"},
      {[](PlanInput& in) { in.max_context_length = -5; }, "max_context_length"},
      {[](PlanInput& in) { in.max_concurrency = 0; }, "max_concurrency"},
      {[](PlanInput& in) { in.max_concurrency = -1; }, "max_concurrency"},
      {[](PlanInput& in) { in.tensor_parallel = 0; }, "tensor_parallel"},
      {[](PlanInput& in) { in.tensor_parallel = 3; }, "tensor_parallel"},
      {[](PlanInput& in) { in.gpu = "h300"; }, "gpu"},
      {[](PlanInput& in) { in.gpu = ""; }, "gpu"},
      {[](PlanInput& in) { in.gpu_memory_bytes = 80 * kGiB; }, "gpu"},
      {[](PlanInput& in) {
         in.gpu = "";
         in.gpu_memory_bytes = 0;
       },
       "gpu_memory"},
      {[](PlanInput& in) { in.workspace.prefill_chunk_tokens = 0; }, "prefill_chunk_tokens"},
      {[](PlanInput& in) { in.reserves.cuda_graphs = -1; }, "cuda_graph_reserve"},
      {[](PlanInput& in) {
         in.weights.format = WeightFormat::kInt4;
         in.weights.group_size = 48;
       },
       "group_size"},
  };
  for (const Case& c : cases) {
    PlanInput in = input("llama-3-70b", "h200", WeightFormat::kInt8, KvDtype::kInt8, 4096, 4);
    c.edit(in);
    auto p = plan(in);
    ASSERT_FALSE(p.ok()) << c.field;
    EXPECT_EQ(p.error().reason(), "InvalidPlanInput") << c.field;
    EXPECT_EQ(p.error().detail("field"), c.field) << p.error().to_string();
  }
}

TEST(Plan, ConfigMissingAFieldIsRefusedNamingIt) {
  auto dir = TempDir::create("planner-config");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(write_file_atomic(dir->path() / "config.json",
                                R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                                    "intermediate_size": 11008, "num_hidden_layers": 32,
                                    "num_attention_heads": 32})")
                  .ok());
  auto m = load_model(dir->path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "InvalidConfig");
  EXPECT_EQ(m.error().detail("field"), "vocab_size");
  auto missing = load_model(dir->path() / "absent");
  EXPECT_TRUE(refused(missing, "", {"absent", "No such file"}));
  ASSERT_TRUE(write_file_atomic(dir->path() / "mla.json",
                                R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 1000,
                                    "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 2,
                                    "num_attention_heads": 8, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                                    "v_head_dim": 64, "n_routed_experts": 8, "num_experts_per_tok": 2,
                                    "moe_intermediate_size": 256})")
                  .ok());
  auto mla = load_model(dir->path() / "mla.json");
  ASSERT_FALSE(mla.ok());
  EXPECT_EQ(mla.error().detail("field"), "kv_lora_rank");
}

TEST(Plan, JsonHasTheDocumentedShape) {
  Plan p = plan_ok(input("glm-4.5", "h200", WeightFormat::kInt4, KvDtype::kInt8, 32768, 8, 4));
  Json j = plan_json(p);
  for (const char* key : {"model", "gpu", "settings", "textbook", "kv_cache", "weights", "workspace",
                          "reserves", "total_bytes", "available_bytes", "margin_bytes", "fits", "reason",
                          "message", "max_concurrency_at_context", "max_context_at_concurrency", "notes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["gpu"]["name"], "h200");
  EXPECT_EQ(j["gpu"]["count"], 4);
  EXPECT_EQ(j["settings"]["weight_format"], "int4");
  EXPECT_EQ(j["settings"]["group_size"], 128);
  EXPECT_EQ(j["settings"]["kv_cache_dtype"], "int8");
  EXPECT_EQ(j["kv_cache"]["kind"], "grouped-query");
  EXPECT_EQ(j["kv_cache"]["kv_heads_per_gpu"], 2);
  EXPECT_EQ(j["kv_cache"]["bytes"], p.kv_bytes);
  EXPECT_EQ(j["weights"]["bytes"], p.weights.total());
  EXPECT_EQ(j["total_bytes"].get<int64_t>(),
            j["weights"]["bytes"].get<int64_t>() + j["kv_cache"]["bytes"].get<int64_t>() +
                j["workspace"]["bytes"].get<int64_t>() + j["reserves"]["bytes"].get<int64_t>());
  EXPECT_EQ(j["fits"], p.fits);
  EXPECT_EQ(j["reason"], p.reason);
  EXPECT_TRUE(j["notes"].is_array());
}

TEST(GpuCatalog, KnowsTheListedGpusAndRefusesOthersListingThem) {
  EXPECT_EQ(find_gpu("H200")->usable_bytes, int64_t{143771} << 20);
  EXPECT_EQ(find_gpu("h100")->usable_bytes, int64_t{81559} << 20);
  EXPECT_EQ(find_gpu("a100-40gb")->usable_bytes, int64_t{40960} << 20);
  EXPECT_EQ(find_gpu("a100-80gb")->usable_bytes, int64_t{81920} << 20);
  EXPECT_EQ(find_gpu("l40s")->usable_bytes, int64_t{46068} << 20);
  EXPECT_EQ(find_gpu("rtx4090")->name, "rtx-4090");
  for (const GpuSpec& g : gpu_catalog()) EXPECT_FALSE(g.marketed.empty()) << g.name;
  auto bad = find_gpu("b300");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().detail("field"), "gpu");
  EXPECT_NE(bad.error().message().find("h200"), std::string::npos);
}

TEST(MemorySize, ParsesDecimalAndBinaryUnitsAndRefusesNonsense) {
  EXPECT_EQ(*parse_memory_size("141GB", "f"), 141'000'000'000);
  EXPECT_EQ(*parse_memory_size("80GiB", "f"), 80 * kGiB);
  EXPECT_EQ(*parse_memory_size("81559MiB", "f"), int64_t{81559} << 20);
  EXPECT_EQ(*parse_memory_size("1.5TB", "f"), 1'500'000'000'000);
  EXPECT_EQ(*parse_memory_size("4096", "f"), 4096);
  EXPECT_EQ(*parse_memory_size("2e9", "f"), 2'000'000'000);
  for (const char* bad : {"", "0GB", "-1GB", "GB", "12XB", "nanGB", "1e30"}) {
    auto r = parse_memory_size(bad, "--gpu-memory");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().detail("field"), "--gpu-memory") << bad;
    }
  }
}

}  // namespace
}  // namespace infergate::runtime::planner
