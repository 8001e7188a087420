// The CUDA backend against the CPU backend on generated models, for every weight format x KV dtype:
// teacher-forced logits through the prefill path (chunks of 16 tokens: the GEMM and prefill
// attention) and the decode path (one token per step: the GEMV and decode attention), greedy
// generation, batched steps mixing prefill and decode, and the memory checks. Every test skips where
// no GPU is present (label gpu); they compile in every CUDA build.
//
// Why the two backends differ at all: both start from the same weight bytes (the CUDA backend reads
// the checkpoint through a CpuBackend) and quantize KV bit-identically for identical inputs, but the
// GPU's tensor-core paths round activations to fp16 (linear: TF32 or fp16 inputs, ~2^-11 relative;
// attention: q and K/V at fp16, or bf16 with bf16 KV, 2^-8) and sum in another order. With logits of
// std 6 (test_model.h), fp16 rounding through two layers moves a logit by ~1e-2, which is a KL of
// ~1e-4. A quantized KV cache adds rare flips to the neighbouring code when the rounded inputs sit on
// a rounding boundary: one int8 step (amax/127), one fp8 step (6% of the value), one int4 step
// (range/15) in one element. The bounds below are those effects with a margin of about 10x; the
// measured values are printed so a GPU session can see the margins.
#include <gtest/gtest.h>

#if defined(INFERGATE_CUDA_EMU)
#include <cuda_runtime.h>  // the emulated runtime: its graph-replay count
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/engine/backend.h"
#include "infergate/engine/cuda_backend.h"
#include "infergate/engine/device.h"
#include "infergate/engine/engine.h"
#include "infergate/engine/quality.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::engine {
namespace {

namespace m = infergate::runtime::model;

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_device_description(); \
  } while (0)

// Dense fp16 model (head_dim 64: the tensor-core attention; int4 layers eligible for the mma GEMV),
// plus its int8 and int4 (g32, asymmetric) copies, made once for the suite.
struct Models {
  TempDir dir;
  std::shared_ptr<const m::Model> dense, int8, int4;
};

Models* g_models = nullptr;

std::shared_ptr<const m::Model> open_or_die(const std::filesystem::path& p) {
  auto mo = m::Model::open(p);
  if (!mo.ok()) {
    ADD_FAILURE() << mo.error().to_string();
    return nullptr;
  }
  return std::make_shared<const m::Model>(std::move(*mo));
}

class CudaEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (cuda_device_count() == 0) return;
    auto d = TempDir::create("cuda-backend-test");
    ASSERT_TRUE(d.ok());
    g_models = new Models{std::move(*d), nullptr, nullptr, nullptr};
    m::TestModelOptions o;
    o.out = g_models->dir.path() / "dense";
    o.layers = 2;
    o.hidden = 256;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 512;
    o.seed = 11;
    o.outlier_channels = 2;  // real-model-like key outliers, so key smoothing has work to do
    Status s = m::make_test_model(o);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    g_models->dense = open_or_die(o.out);
    for (auto f : {m::WeightFormat::kInt8, m::WeightFormat::kInt4}) {
      m::QuantizeOptions q;
      q.model = o.out;
      q.out = g_models->dir.path() / (f == m::WeightFormat::kInt8 ? "int8" : "int4");
      q.scheme.format = f;
      q.scheme.symmetric = f == m::WeightFormat::kInt8;
      q.scheme.group_size = f == m::WeightFormat::kInt4 ? 32 : 0;
      auto r = m::quantize_model(q);
      ASSERT_TRUE(r.ok()) << r.error().to_string();
      (f == m::WeightFormat::kInt8 ? g_models->int8 : g_models->int4) = open_or_die(q.out);
    }
  }
  void TearDown() override {
    delete g_models;
    g_models = nullptr;
  }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new CudaEnv);

std::shared_ptr<const m::Model> model_for(WeightFormat wf) {
  if (wf == WeightFormat::kInt8) return g_models->int8;
  if (wf == WeightFormat::kInt4) return g_models->int4;
  return g_models->dense;
}

std::unique_ptr<Engine> make(WeightFormat wf, KvCacheDtype kv, bool cuda, int32_t max_sequences = 4,
                             bool cuda_graphs = true) {
  auto model = model_for(wf);
  Result<std::unique_ptr<Backend>> b = unavailable("unset");
  const bool smooth = smooth_keys_enabled(SmoothKeys::kAuto, kv);
  if (cuda) {
    CudaBackendOptions o;
    o.weight_format = wf;
    o.smooth_keys = smooth;
    o.cuda_graphs = cuda_graphs;
    b = make_cuda_backend(model, o);
  } else {
    CpuBackendOptions o;
    o.weight_format = wf;
    o.smooth_keys = smooth;
    b = make_cpu_backend(model, o);
  }
  if (!b.ok()) {
    ADD_FAILURE() << b.error().to_string();
    return nullptr;
  }
  EngineOptions eo;
  eo.kv_dtype = kv;
  eo.max_sequences = max_sequences;
  eo.max_context = 256;
  auto e = Engine::create(model, std::move(*b), eo);
  if (!e.ok()) {
    ADD_FAILURE() << e.error().to_string();
    return nullptr;
  }
  return std::move(*e);
}

// Under the emulator (runtime_cuda_emu_tests, the same file on emulated devices) prompts are half as
// long: still a full prefill chunk and a partial one, and a page boundary, in a CPU's seconds.
#if defined(INFERGATE_CUDA_EMU)
constexpr int kPromptDivisor = 2;
#else
constexpr int kPromptDivisor = 1;
#endif

// Deterministic prompts of `n` ids (not text: every id of the vocabulary is fair); n / 2 under the
// emulator.
std::vector<std::vector<int32_t>> prompts(int n) {
  n = std::max(1, n / kPromptDivisor);
  std::vector<std::vector<int32_t>> out;
  uint32_t x = 12345;
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      ids.push_back(static_cast<int32_t>((x >> 8) % 512));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

struct Bounds {
  double min_top1;
  double max_mean_kl;
  double max_abs;  // largest |logit difference| (logits have std ~6)
};

Bounds bounds_for(KvCacheDtype kv) {
  switch (kv) {
    case KvCacheDtype::kF16: return {0.98, 1e-3, 0.3};
    case KvCacheDtype::kBF16: return {0.97, 5e-3, 1.0};
    case KvCacheDtype::kFp8:
    case KvCacheDtype::kInt8: return {0.95, 1e-2, 2.0};
    default: return {0.90, 3e-2, 4.0};  // int4, int4-kivi
  }
}

struct Combo {
  WeightFormat wf;
  KvCacheDtype kv;
};

std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  std::string n =
      std::string(weight_format_name(info.param.wf)) + "_" + std::string(kv_cache_dtype_name(info.param.kv));
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

class CudaVsCpu : public ::testing::TestWithParam<Combo> {};

TEST_P(CudaVsCpu, LogitsMatchTheCpuBackendOnPrefillChunksAndDecodeSteps) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(g_models && g_models->dense && g_models->int8 && g_models->int4);
  const Combo c = GetParam();
  auto cpu = make(c.wf, c.kv, false);
  auto gpu = make(c.wf, c.kv, true);
  ASSERT_TRUE(cpu && gpu);
  EXPECT_EQ(gpu->backend().name(), "cuda");
  const Bounds b = bounds_for(c.kv);
  for (int32_t chunk : {16, 1}) {
    QualityAccumulator acc;
    double max_abs = 0;
    for (const auto& p : prompts(40)) {
      auto want = cpu->score(p, chunk);
      auto got = gpu->score(p, chunk);
      ASSERT_TRUE(want.ok()) << want.error().to_string();
      ASSERT_TRUE(got.ok()) << got.error().to_string();
      ASSERT_EQ(want->size(), got->size());
      for (size_t i = 0; i < want->size(); ++i) {
        ASSERT_TRUE(std::isfinite((*got)[i])) << "logit " << i << " is not finite";
        max_abs = std::max(max_abs, static_cast<double>(std::fabs((*want)[i] - (*got)[i])));
      }
      const int64_t V = gpu->vocab();
      for (size_t r = 0; r * V < want->size(); ++r) {
        acc.add_logits(std::span<const float>(want->data() + r * V, static_cast<size_t>(V)),
                       std::span<const float>(got->data() + r * V, static_cast<size_t>(V)));
      }
    }
    const QualityMetrics q = acc.result();
    std::printf(
        "[ measured ] %s weights, %s KV, chunk %d: top1 %.4f, mean KL %.3g, max KL %.3g, max |dlogit| %.3g\n",
        std::string(weight_format_name(c.wf)).c_str(), std::string(kv_cache_dtype_name(c.kv)).c_str(), chunk,
        q.top1_agreement, q.mean_kl, q.max_kl, max_abs);
    EXPECT_GE(q.top1_agreement, b.min_top1) << "chunk " << chunk;
    EXPECT_LE(q.mean_kl, b.max_mean_kl) << "chunk " << chunk;
    EXPECT_LE(max_abs, b.max_abs) << "chunk " << chunk;
  }
}

std::vector<Combo> all_combos() {
  std::vector<Combo> v;
  for (auto wf : {WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kInt8, WeightFormat::kInt4}) {
    for (auto kv : {KvCacheDtype::kF16, KvCacheDtype::kBF16, KvCacheDtype::kFp8, KvCacheDtype::kInt8,
                    KvCacheDtype::kInt4, KvCacheDtype::kInt4Kivi}) {
      v.push_back({wf, kv});
    }
  }
  return v;
}
INSTANTIATE_TEST_SUITE_P(EveryFormat, CudaVsCpu, ::testing::ValuesIn(all_combos()), combo_name);

std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, int32_t n) {
  SamplingParams p;
  p.max_tokens = n;
  p.ignore_eos = true;
  auto r = generate(e, prompt, p);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  std::vector<int32_t> out;
  if (r.ok()) {
    for (const auto& t : r->tokens) out.push_back(t.token);
  }
  return out;
}

TEST(CudaBackend, GreedyGenerationEqualsTheCpuForFp16) {
  SKIP_WITHOUT_GPU();
  auto cpu = make(WeightFormat::kF16, KvCacheDtype::kF16, false);
  auto gpu = make(WeightFormat::kF16, KvCacheDtype::kF16, true);
  ASSERT_TRUE(cpu && gpu);
  for (const auto& p : prompts(12)) EXPECT_EQ(greedy(*gpu, p, 24), greedy(*cpu, p, 24));
}

// Four sequences of different lengths stepped together: prefill chunks and decode tokens in the
// same forward, sequences joining and finishing at different steps. With `preempt_step` >= 0 the first
// and third sequences are preempted at that step (KV freed, tokens kept) and recomputed by the next.
std::vector<std::vector<int32_t>> run_batch(Engine& e, int preempt_step = -1) {
  std::vector<SeqId> ids;
  const auto ps = prompts(30 * kPromptDivisor);  // 30 tokens everywhere
  const int lens[] = {30, 7, 19};
  for (int i = 0; i < 3; ++i) {
    SamplingParams p;
    p.max_tokens = 10 + 3 * i;
    p.ignore_eos = true;
    auto id = e.add_sequence(std::vector<int32_t>(ps[i].begin(), ps[i].begin() + lens[i]), p);
    EXPECT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (int step = 0; step < 200; ++step) {
    std::vector<StepRequest> reqs;
    for (SeqId id : ids) {
      if (e.sequence(id)->status != SequenceStatus::kFinished)
        reqs.push_back({id, 8});  // 8-token prefill chunks
    }
    if (reqs.empty()) break;
    if (step == preempt_step) {
      for (SeqId id : {ids[0], ids[2]}) {
        if (e.sequence(id)->status == SequenceStatus::kFinished) continue;
        const Status st = e.preempt(id);
        EXPECT_TRUE(st.ok()) << st.error().to_string();
      }
    }
    auto r = e.step(reqs);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    if (!r.ok()) break;
  }
  if (preempt_step >= 0) {
    EXPECT_GT(e.sequence(ids[0])->preemptions + e.sequence(ids[2])->preemptions, 0)
        << "nothing was preempted";
  }
  std::vector<std::vector<int32_t>> out;
  for (SeqId id : ids) {
    std::vector<int32_t> toks;
    for (const auto& t : e.sequence(id)->output) toks.push_back(t.token);
    out.push_back(toks);
  }
  return out;
}

TEST(CudaBackend, BatchedStepsMixingPrefillAndDecodeGiveTheCpuTokens) {
  SKIP_WITHOUT_GPU();
  auto cpu = make(WeightFormat::kF16, KvCacheDtype::kF16, false);
  auto gpu = make(WeightFormat::kF16, KvCacheDtype::kF16, true);
  ASSERT_TRUE(cpu && gpu);
  EXPECT_EQ(run_batch(*gpu), run_batch(*cpu));
}

// Preempted sequences come back through a prefill into new blocks, mid-batch with decoding ones.
TEST(CudaBackend, PreemptedSequencesAreRecomputedToTheCpuTokens) {
  SKIP_WITHOUT_GPU();
  auto cpu = make(WeightFormat::kInt8, KvCacheDtype::kInt8, false);
  auto gpu = make(WeightFormat::kInt8, KvCacheDtype::kInt8, true);
  ASSERT_TRUE(cpu && gpu);
  const auto want = run_batch(*cpu, 6);
  EXPECT_EQ(run_batch(*gpu, 6), want);
}

// Decode steps replayed as captured CUDA graphs (the default) against the plain path (--cuda-graphs
// off): the same logits up to the attention split a KV bucket may choose, and the same greedy tokens,
// for fp16 and int8 weights. Under the emulator also: the graphs were replayed.
TEST(CudaBackend, DecodeStepsReplayedAsCudaGraphsMatchThePlainPath) {
  SKIP_WITHOUT_GPU();
#if defined(INFERGATE_CUDA_EMU)
  const uint64_t replays_before = emu::graph_launches();
#endif
  for (WeightFormat wf : {WeightFormat::kF16, WeightFormat::kInt8}) {
    SCOPED_TRACE(std::string(weight_format_name(wf)) + " weights");
    auto plain = make(wf, KvCacheDtype::kInt8, true, 4, /*cuda_graphs=*/false);
    auto graphs = make(wf, KvCacheDtype::kInt8, true, 4, /*cuda_graphs=*/true);
    ASSERT_TRUE(plain && graphs);
    double max_abs = 0;
    for (const auto& p : prompts(48)) {  // past a page: the block table's stride grows mid-sequence
      auto a = plain->score(p, 1);
      auto b = graphs->score(p, 1);
      ASSERT_TRUE(a.ok()) << a.error().to_string();
      ASSERT_TRUE(b.ok()) << b.error().to_string();
      ASSERT_EQ(a->size(), b->size());
      for (size_t i = 0; i < a->size(); ++i)
        max_abs = std::max(max_abs, static_cast<double>(std::fabs((*a)[i] - (*b)[i])));
    }
    std::printf("[ measured ] %s weights: max |dlogit| graphs vs plain %.3g\n",
                std::string(weight_format_name(wf)).c_str(), max_abs);
    EXPECT_LE(max_abs, 1e-3);
    if (wf == WeightFormat::kF16) {  // past the 64-token bucket: a second graph is captured
      const auto p = prompts(8 * kPromptDivisor)[1];
      EXPECT_EQ(greedy(*graphs, p, 64), greedy(*plain, p, 64));
    }
  }
#if defined(INFERGATE_CUDA_EMU)
  EXPECT_GT(emu::graph_launches(), replays_before + 40) << "decode steps did not run as graphs";
#endif
}

TEST(CudaBackend, RefusesWeightsAndKvThatDoNotFitBeforeServing) {
  SKIP_WITHOUT_GPU();
  CudaBackendOptions o;
  o.headroom_bytes = int64_t{1} << 50;  // more than any GPU has
  auto b = make_cuda_backend(g_models->dense, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "ModelDoesNotFit");
  auto ok = make_cuda_backend(g_models->dense, CudaBackendOptions{});
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  const ModelShape& s = (*ok)->shape();
  KvSpec spec{KvCacheDtype::kF16, s.num_layers, s.num_kv_heads, s.head_dim, kBlockTokens};
  Status st = (*ok)->allocate_kv(spec, int64_t{1} << 30, 4);  // 2^30 blocks: 16 TiB
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "KvDoesNotFit");
  EXPECT_FALSE(st.error().details().empty());
  spec.dtype = KvCacheDtype::kF32;
  Status f32 = (*ok)->allocate_kv(spec, 8, 1);
  ASSERT_FALSE(f32.ok());
  EXPECT_EQ(f32.error().reason(), "UnsupportedCombination");
}

TEST(CudaBackend, RefusesFp32WeightsAndMoreGpusThanThereAre) {
  SKIP_WITHOUT_GPU();
  CudaBackendOptions o;
  o.weight_format = WeightFormat::kF32;
  auto b = make_cuda_backend(g_models->dense, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "UnsupportedCombination");
  o.weight_format = WeightFormat::kF16;
  o.tensor_parallel = cuda_device_count() + 1;
  auto many = make_cuda_backend(g_models->dense, o);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.error().reason(), "NoDevice");
}

// Runs without a GPU: the refusal comes before any device is asked for.
TEST(CudaBackend, RefusesRoutedExpertsAndQkNormsItDoesNotImplementYet) {
  TempDir dir = *TempDir::create("cuda-moe");
  m::TestModelOptions o;
  o.out = dir.path() / "moe";
  o.arch = m::Architecture::kGlm4Moe;
  o.vocab = 320;
  ASSERT_TRUE(m::make_test_model(o).ok());
  auto b = make_cuda_backend(open_or_die(o.out), CudaBackendOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "UnsupportedArchitecture") << b.error().to_string();
  EXPECT_NE(b.error().message().find("Glm4MoeForCausalLM"), std::string::npos) << b.error().to_string();
}

TEST(CudaBackend, ReportsWeightAndKvBytesAsAllocated) {
  SKIP_WITHOUT_GPU();
  auto gpu = make(WeightFormat::kInt8, KvCacheDtype::kInt8, true);
  ASSERT_TRUE(gpu);
  const KvSpec& spec = gpu->blocks().spec();
  auto pool = kv_pool_bytes(spec, gpu->blocks().total_blocks(), gpu->blocks().max_sequences());
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(gpu->backend().kv_bytes(), *pool);  // one GPU: the block manager's arithmetic exactly
  auto cpu = make(WeightFormat::kInt8, KvCacheDtype::kInt8, false);
  ASSERT_TRUE(cpu);
  // The same weights; the GPU also holds a copy of the embedding table for a separate lm_head and
  // fp32 norms, as the CPU does: equal byte counts for int8 (no int4 tensor-core copies).
  EXPECT_EQ(gpu->backend().weight_bytes(), cpu->backend().weight_bytes());
}

// `tp` GPUs: the tensor-parallel path against one GPU for each of `formats`. With four the model's two
// KV heads are replicated (two ranks share each).
void expect_tensor_parallel_matches_one_gpu(int32_t tp, std::initializer_list<WeightFormat> formats) {
  for (WeightFormat wf : formats) {
    SCOPED_TRACE(std::string(weight_format_name(wf)) + " weights, " + std::to_string(tp) + " ranks");
    auto one = make(wf, KvCacheDtype::kF16, true);
    ASSERT_TRUE(one);
    CudaBackendOptions o;
    o.weight_format = wf;
    o.tensor_parallel = tp;
    auto b = make_cuda_backend(model_for(wf), o);
    ASSERT_TRUE(b.ok()) << b.error().to_string();
    EngineOptions eo;
    eo.kv_dtype = KvCacheDtype::kF16;
    eo.max_sequences = 4;
    eo.max_context = 256;
    auto many = Engine::create(model_for(wf), std::move(*b), eo);
    ASSERT_TRUE(many.ok()) << many.error().to_string();
    QualityAccumulator acc;
    for (const auto& p : prompts(24)) {
      auto a = one->score(p, 8);
      auto c = (*many)->score(p, 8);
      ASSERT_TRUE(a.ok()) << a.error().to_string();
      ASSERT_TRUE(c.ok()) << c.error().to_string();
      const int64_t V = one->vocab();
      for (size_t r = 0; r * V < a->size(); ++r) {
        acc.add_logits(std::span<const float>(a->data() + r * V, static_cast<size_t>(V)),
                       std::span<const float>(c->data() + r * V, static_cast<size_t>(V)));
      }
    }
    EXPECT_GE(acc.result().top1_agreement, 0.98);
    EXPECT_LE(acc.result().mean_kl, 1e-3);
  }
}

TEST(CudaBackend, TwoWayTensorParallelMatchesOneGpu) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs; " << cuda_device_count() << " present";
  expect_tensor_parallel_matches_one_gpu(2, {WeightFormat::kF16, WeightFormat::kInt8, WeightFormat::kInt4});
}

TEST(CudaBackend, FourWayTensorParallelWithReplicatedKvHeadsMatchesOneGpu) {
  if (cuda_device_count() < 4) GTEST_SKIP() << "needs four GPUs; " << cuda_device_count() << " present";
  expect_tensor_parallel_matches_one_gpu(4, {WeightFormat::kF16, WeightFormat::kInt8});
  // int4 in groups of 32 cannot be cut four ways here (704 / 4 = 176 columns of down_proj per rank):
  // refused before anything is uploaded, naming the layer and the cut.
  CudaBackendOptions o;
  o.weight_format = WeightFormat::kInt4;
  o.tensor_parallel = 4;
  auto b = make_cuda_backend(model_for(WeightFormat::kInt4), o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "InvalidTensorParallel") << b.error().to_string();
  EXPECT_NE(b.error().message().find("down_proj"), std::string::npos) << b.error().to_string();
}

}  // namespace
}  // namespace infergate::runtime::engine
