// Tensor parallelism's arithmetic on the CPU: which rows and columns each rank holds, that slices of
// compressed weights keep their bytes, and that the sharded matmuls of a generated model (computed
// with the CPU kernels) put back together equal the unsharded ones.
#include "infergate/engine/tensor_parallel.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {

using infergate::testing::refused;

namespace k = infergate::kernels;
namespace m = infergate::runtime::model;
using testing::make_model;
using testing::open_model;
using testing::quantize;
using testing::small_options;
using testing::temp_dir;

ModelShape shape(int32_t heads, int32_t kv_heads, int64_t vocab) {
  ModelShape s;
  s.vocab = vocab;
  s.hidden = heads * 16;
  s.num_layers = 2;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = 16;
  s.max_position = 128;
  return s;
}

TEST(TensorParallel, RanksTileHeadsMlpColumnsAndVocabularyWithoutOverlap) {
  const ModelShape s = shape(8, 4, 10);
  const int64_t I = 96;
  const int32_t tp = 4;
  int64_t heads = 0, kv = 0, mlp = 0, vocab = 0;
  for (int32_t r = 0; r < tp; ++r) {
    auto sh = tp_shard(s, I, tp, r);
    ASSERT_TRUE(sh.ok()) << sh.error().to_string();
    EXPECT_EQ(sh->heads.begin, heads);
    EXPECT_EQ(sh->kv_heads.begin, kv);
    EXPECT_EQ(sh->mlp.begin, mlp);
    EXPECT_EQ(sh->vocab.begin, vocab);
    EXPECT_EQ(sh->heads.size(), 2);
    EXPECT_EQ(sh->kv_heads.size(), 1);
    EXPECT_EQ(sh->mlp.size(), 24);
    EXPECT_EQ(sh->q_rows, (TpRange{sh->heads.begin * 16, sh->heads.end * 16}));
    EXPECT_EQ(sh->kv_rows, (TpRange{sh->kv_heads.begin * 16, sh->kv_heads.end * 16}));
    heads = sh->heads.end;
    kv = sh->kv_heads.end;
    mlp = sh->mlp.end;
    vocab = sh->vocab.end;
  }
  EXPECT_EQ(heads, 8);
  EXPECT_EQ(kv, 4);
  EXPECT_EQ(mlp, I);
  EXPECT_EQ(vocab, 10);  // ceil(10 / 4) = 3 rows per rank, the last takes the remaining 1
  EXPECT_EQ(tp_shard(s, I, tp, 3)->vocab, (TpRange{9, 10}));
}

TEST(TensorParallel, OneRankHoldsEverything) {
  const ModelShape s = shape(4, 2, 320);
  auto sh = tp_shard(s, 192, 1, 0);
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(sh->heads, (TpRange{0, 4}));
  EXPECT_EQ(sh->kv_heads, (TpRange{0, 2}));
  EXPECT_EQ(sh->mlp, (TpRange{0, 192}));
  EXPECT_EQ(sh->vocab, (TpRange{0, 320}));
}

TEST(TensorParallel, RefusesADegreeThatDoesNotSplitTheModel) {
  const ModelShape s = shape(4, 2, 320);
  for (int32_t tp : {0, 3, 8}) {
    Status st = validate_tp(s, 192, tp);
    ASSERT_FALSE(st.ok()) << tp;
    EXPECT_EQ(st.error().reason(), "InvalidTensorParallel");
  }
  // 6 divides the 12 query heads but neither divides the 4 KV heads nor is a multiple of them.
  Status kv = validate_tp(shape(12, 4, 320), 192, 6);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.error().message().find("KV heads (4)"), std::string::npos) << kv.error().message();
  EXPECT_NE(validate_tp(shape(6, 6, 320), 191, 2).error().message().find("intermediate size"),
            std::string::npos);
  EXPECT_TRUE(refused(tp_shard(s, 192, 2, 2), "", {"rank 2 outside 0..1"}));  // rank outside 0..1
}

TEST(TensorParallel, MoreRanksThanKvHeadsGiveEachRankTheKvHeadItsQueryHeadsRead) {
  const ModelShape s = shape(8, 2, 320);  // query heads 0-3 read KV head 0, 4-7 read KV head 1
  for (int32_t tp : {4, 8}) {
    for (int32_t r = 0; r < tp; ++r) {
      auto sh = tp_shard(s, 192, tp, r);
      ASSERT_TRUE(sh.ok()) << sh.error().to_string();
      EXPECT_EQ(sh->heads.size(), 8 / tp);
      ASSERT_EQ(sh->kv_heads.size(), 1);
      EXPECT_EQ(sh->kv_heads.begin, sh->heads.begin / 4) << "tp " << tp << " rank " << r;
      EXPECT_EQ(sh->kv_heads.begin, (sh->heads.end - 1) / 4) << "tp " << tp << " rank " << r;
      EXPECT_EQ(sh->kv_rows, (TpRange{sh->kv_heads.begin * 16, sh->kv_heads.end * 16}));
    }
  }
}

// Every rank's decode attention over its own KV cache (its KV heads only, in pages laid out for that
// many heads) gives, for its query heads, what the unsharded attention gives: with the KV heads split
// (T = 1, 2) and replicated (T = 4, 8), for every KV dtype.
TEST(TensorParallel, RanksAttentionOverTheirOwnKvCachesEqualsTheUnshardedAttention) {
  const int32_t H = 8, Hkv = 2, D = 32, P = 16;
  const ModelShape shp = shape(H, Hkv, 320);
  const std::vector<int32_t> lens = {37, 20};  // two sequences, one token each to decode
  const int32_t seqs = static_cast<int32_t>(lens.size()), max_pages = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randoms = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  // K and V of every sequence's tokens, [seq][token][KV head][D]; q [seq][head][D].
  std::vector<std::vector<float>> k(seqs), v(seqs);
  for (int32_t q = 0; q < seqs; ++q) {
    k[q] = randoms(static_cast<size_t>(lens[q] * Hkv * D));
    v[q] = randoms(static_cast<size_t>(lens[q] * Hkv * D));
  }
  const std::vector<float> q = randoms(static_cast<size_t>(seqs * H * D));

  // Attention of the query heads `heads` over a cache holding the KV heads `kvh`.
  auto attend = [&](k::KvDtype dt, TpRange heads, TpRange kvh) {
    const int32_t nh = static_cast<int32_t>(heads.size()), nkv = static_cast<int32_t>(kvh.size());
    const k::KvPageLayout layout{dt, P, nkv, D};
    std::vector<uint8_t> pages(static_cast<size_t>(seqs * max_pages * k::kv_page_bytes(layout)));
    std::vector<uint8_t> staging(
        static_cast<size_t>(std::max<int64_t>(1, seqs * k::kv_staging_bytes(layout))));
    k::KvCache cache{layout, pages.data(), seqs * max_pages, staging.data(), seqs, nullptr, nullptr};
    std::vector<int32_t> table(static_cast<size_t>(seqs * max_pages));
    for (int32_t i = 0; i < seqs * max_pages; ++i) table[static_cast<size_t>(i)] = i;
    for (int32_t sq = 0; sq < seqs; ++sq) {
      const int32_t T = lens[static_cast<size_t>(sq)];
      std::vector<float> ks(static_cast<size_t>(T * nkv * D)), vs(ks.size());
      for (int32_t t = 0; t < T; ++t) {
        for (int32_t h = 0; h < nkv; ++h) {
          for (int32_t c = 0; c < D; ++c) {
            const size_t from = static_cast<size_t>((t * Hkv + kvh.begin + h) * D + c);
            ks[static_cast<size_t>((t * nkv + h) * D + c)] = k[static_cast<size_t>(sq)][from];
            vs[static_cast<size_t>((t * nkv + h) * D + c)] = v[static_cast<size_t>(sq)][from];
          }
        }
      }
      std::vector<int32_t> ids(static_cast<size_t>(T)), slots(ids.size()), wins(ids.size(), sq);
      for (int32_t t = 0; t < T; ++t) {
        ids[static_cast<size_t>(t)] = sq * max_pages + t / P;
        slots[static_cast<size_t>(t)] = t % P;
      }
      k::KvAppend a{k::contiguous<const float>(ks.data(), T, nkv, D),
                    k::contiguous<const float>(vs.data(), T, nkv, D), ids.data(), slots.data(), wins.data()};
      k::Status st = k::kv_append_cpu(cache, a);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    std::vector<float> qs(static_cast<size_t>(seqs * nh * D)), out(qs.size());
    for (int32_t sq = 0; sq < seqs; ++sq) {
      for (int32_t h = 0; h < nh; ++h) {
        for (int32_t c = 0; c < D; ++c) {
          qs[static_cast<size_t>((sq * nh + h) * D + c)] =
              q[static_cast<size_t>((sq * H + heads.begin + h) * D + c)];
        }
      }
    }
    std::vector<int32_t> q_start = {0, 1, 2}, staging_ids = {0, 1};
    k::AttentionBatch b;
    b.num_seqs = seqs;
    b.num_q_heads = nh;
    b.scale = 1.0f / std::sqrt(static_cast<float>(D));
    b.q_start = q_start.data();
    b.kv_len = lens.data();
    b.block_table = table.data();
    b.max_pages_per_seq = max_pages;
    b.staging_ids = staging_ids.data();
    k::Status st = k::attention_cpu(cache, b, k::contiguous<const float>(qs.data(), seqs, nh, D),
                                    k::contiguous(out.data(), seqs, nh, D));
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  };

  for (k::KvDtype dt : {k::KvDtype::kF16, k::KvDtype::kFp8E4M3, k::KvDtype::kInt8, k::KvDtype::kInt4,
                        k::KvDtype::kInt4Kivi}) {
    SCOPED_TRACE(std::string(k::kv_dtype_name(dt)));
    const std::vector<float> full = attend(dt, {0, H}, {0, Hkv});
    for (int32_t tp : {1, 2, 4, 8}) {
      for (int32_t r = 0; r < tp; ++r) {
        auto sh = tp_shard(shp, 192, tp, r);
        ASSERT_TRUE(sh.ok()) << sh.error().to_string();
        const std::vector<float> part = attend(dt, sh->heads, sh->kv_heads);
        const int32_t nh = static_cast<int32_t>(sh->heads.size());
        for (int32_t sq = 0; sq < seqs; ++sq) {
          for (int32_t h = 0; h < nh; ++h) {
            for (int32_t c = 0; c < D; ++c) {
              const float want = full[static_cast<size_t>((sq * H + sh->heads.begin + h) * D + c)];
              const float got = part[static_cast<size_t>((sq * nh + h) * D + c)];
              ASSERT_NEAR(got, want, 1e-5f * (1.0f + std::fabs(want)))
                  << "tp " << tp << " rank " << r << " seq " << sq << " head " << sh->heads.begin + h;
            }
          }
        }
      }
    }
  }
}

// ---- slicing the weights of a generated model ----

class SliceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string f = GetParam();
    dense_ = make_model(dir_.path() / "dense", small_options());
    if (f == "fp16") {
      path_ = dense_;
    } else if (f == "int8") {
      path_ = quantize(dense_, dir_.path() / "q", m::WeightFormat::kInt8);
    } else {
      path_ = quantize(dense_, dir_.path() / "q", m::WeightFormat::kInt4, f == "int4-sym", 32);
    }
    model_ = open_model(path_);
    ASSERT_TRUE(model_);
  }
  k::WeightView weight(const std::string& name) {
    auto w = model_->weight(name);
    EXPECT_TRUE(w.ok()) << w.error().to_string();
    auto v = m::kernel_weight_view(*w);
    EXPECT_TRUE(v.ok()) << v.error().to_string();
    return *v;
  }
  static std::vector<float> dequant(const k::WeightView& w) {
    std::vector<float> out(static_cast<size_t>(w.layout.rows * w.layout.cols));
    k::Status ks = k::dequantize_weight_cpu(w, k::contiguous(out.data(), w.layout.rows, w.layout.cols));
    EXPECT_TRUE(ks.ok()) << ks.to_string();
    return out;
  }
  static std::vector<float> matmul(const k::WeightView& w, const std::vector<float>& x, int64_t t) {
    std::vector<float> y(static_cast<size_t>(t * w.layout.rows));
    k::Status s = k::linear_cpu(k::contiguous<const float>(x.data(), t, w.layout.cols), w, nullptr,
                                k::contiguous(y.data(), t, w.layout.rows));
    EXPECT_TRUE(s.ok()) << s.to_string();
    return y;
  }
  static std::vector<float> random_rows(int64_t t, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(t * cols));
    for (float& v : x) v = n(rng);
    return x;
  }

  TempDir dir_ = temp_dir();
  std::filesystem::path dense_, path_;
  std::shared_ptr<const m::Model> model_;
};

TEST_P(SliceTest, RowAndColumnSlicesHoldExactlyTheOriginalValues) {
  const k::WeightView w = weight("model.layers.0.mlp.down_proj.weight");  // [64, 192]
  const std::vector<float> full = dequant(w);
  const int64_t cols = w.layout.cols;
  for (TpRange r : {TpRange{0, 32}, TpRange{32, 64}}) {
    auto s = slice_weight(w, TpSplit::kRows, r);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    const std::vector<float> part = dequant(s->view);
    for (int64_t n = 0; n < r.size(); ++n) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(part[static_cast<size_t>(n * cols + c)],
                  full[static_cast<size_t>((r.begin + n) * cols + c)])
            << "row " << n << " col " << c;
      }
    }
  }
  for (TpRange r : {TpRange{0, 96}, TpRange{96, 192}, TpRange{64, 128}}) {
    auto s = slice_weight(w, TpSplit::kCols, r);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    EXPECT_EQ(s->view.layout.cols, r.size());
    const std::vector<float> part = dequant(s->view);
    for (int64_t n = 0; n < w.layout.rows; ++n) {
      for (int64_t c = 0; c < r.size(); ++c) {
        ASSERT_EQ(part[static_cast<size_t>(n * r.size() + c)],
                  full[static_cast<size_t>(n * cols + r.begin + c)])
            << "row " << n << " col " << c;
      }
    }
  }
}

// Column-parallel layers concatenate; row-parallel layers sum. Two ranks over every linear of layer 0.
TEST_P(SliceTest, ShardedMatmulsPutTogetherEqualTheUnshardedOnes) {
  auto cfg = model_->config();
  ModelShape s;
  s.vocab = cfg.vocab_size;
  s.hidden = cfg.hidden_size;
  s.num_heads = static_cast<int32_t>(cfg.num_attention_heads);
  s.num_kv_heads = static_cast<int32_t>(cfg.num_key_value_heads);
  s.head_dim = static_cast<int32_t>(cfg.head_dim);
  const int64_t I = cfg.intermediate_size;
  const int32_t tp = 2;
  const int64_t t = 5;
  struct Case {
    const char* name;
    TpSplit split;
    TpRange (*range)(const TpShard&);
  };
  const Case cases[] = {
      {"self_attn.q_proj", TpSplit::kRows, [](const TpShard& sh) { return sh.q_rows; }},
      {"self_attn.k_proj", TpSplit::kRows, [](const TpShard& sh) { return sh.kv_rows; }},
      {"self_attn.v_proj", TpSplit::kRows, [](const TpShard& sh) { return sh.kv_rows; }},
      {"self_attn.o_proj", TpSplit::kCols, [](const TpShard& sh) { return sh.q_rows; }},
      {"mlp.gate_proj", TpSplit::kRows, [](const TpShard& sh) { return sh.mlp; }},
      {"mlp.up_proj", TpSplit::kRows, [](const TpShard& sh) { return sh.mlp; }},
      {"mlp.down_proj", TpSplit::kCols, [](const TpShard& sh) { return sh.mlp; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const k::WeightView w = weight("model.layers.0." + std::string(c.name) + ".weight");
    const int64_t N = w.layout.rows, K = w.layout.cols;
    const std::vector<float> x = random_rows(t, K, 7);
    const std::vector<float> want = matmul(w, x, t);
    std::vector<float> got(static_cast<size_t>(t * N), 0.0f);
    for (int32_t rank = 0; rank < tp; ++rank) {
      auto sh = tp_shard(s, I, tp, rank);
      ASSERT_TRUE(sh.ok()) << sh.error().to_string();
      const TpRange r = c.range(*sh);
      auto part = slice_weight(w, c.split, r);
      ASSERT_TRUE(part.ok()) << part.error().to_string();
      if (c.split == TpSplit::kRows) {
        const std::vector<float> y = matmul(part->view, x, t);  // [t, r.size()]
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t n = 0; n < r.size(); ++n) {
            got[static_cast<size_t>(i * N + r.begin + n)] = y[static_cast<size_t>(i * r.size() + n)];
          }
        }
      } else {
        std::vector<float> xs(static_cast<size_t>(t * r.size()));
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t col = 0; col < r.size(); ++col) {
            xs[static_cast<size_t>(i * r.size() + col)] = x[static_cast<size_t>(i * K + r.begin + col)];
          }
        }
        const std::vector<float> y = matmul(part->view, xs, t);  // a partial sum over r's columns
        for (size_t j = 0; j < y.size(); ++j) got[j] += y[j];    // the all-reduce
      }
    }
    // Rows: the same dot products. Columns: the same products summed in two parts (fp32 rounding).
    for (size_t j = 0; j < want.size(); ++j) {
      const float tol = c.split == TpSplit::kRows ? 1e-5f * (1.0f + std::fabs(want[j]))
                                                  : 1e-4f * (1.0f + std::fabs(want[j]));
      ASSERT_NEAR(got[j], want[j], tol) << "element " << j;
    }
  }
}

std::string format_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}
INSTANTIATE_TEST_SUITE_P(Formats, SliceTest, ::testing::Values("fp16", "int8", "int4-asym", "int4-sym"),
                         format_name);

TEST(TensorParallel, RefusesInt4ColumnsThatSplitAGroup) {
  TempDir dir = temp_dir();
  auto dense = make_model(dir.path() / "dense", small_options());
  auto q = quantize(dense, dir.path() / "q", m::WeightFormat::kInt4, false, 32);
  auto model = open_model(q);
  ASSERT_TRUE(model);
  auto w = model->weight("model.layers.0.self_attn.o_proj.weight");
  ASSERT_TRUE(w.ok());
  auto v = m::kernel_weight_view(*w);
  ASSERT_TRUE(v.ok());
  auto s = slice_weight(*v, TpSplit::kCols, {16, 48});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "InvalidTensorParallel");
  EXPECT_NE(s.error().message().find("groups of 32"), std::string::npos) << s.error().message();
  EXPECT_TRUE(
      refused(slice_weight(*v, TpSplit::kRows, {0, 0}), "InvalidTensorParallel", {"slice [0, 0) is empty"}));
  EXPECT_TRUE(refused(slice_weight(*v, TpSplit::kRows, {0, 1000}), "InvalidTensorParallel",
                      {"slice [0, 1000)", "outside the weight's 64 rows"}));
}

}  // namespace
}  // namespace infergate::runtime::engine
