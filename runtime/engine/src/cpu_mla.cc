// CpuBackend's multi-head latent attention (DeepSeek-V3, Kimi K2), in the absorbed form:
//   q      = q_b_proj(q_a_layernorm(q_a_proj(h)))  (or q_proj(h)), per head [nope | rope]
//   [c|kr] = kv_a_proj_with_mqa(h);  c = kv_a_layernorm(c);  rope on q's rope part and on kr
//   cache  <- [c | kr]: one row per token, shared by every head
//   q_abs  = [W_UK_a^T q_nope_a | q_rope_a]   (W_UK folded into the query: a kv_lora-wide query)
//   o_a    = W_UV_a softmax(scale q_abs . [c|kr]_j) c_j,   out = o_proj([o_a])
// which equals attention over k_a = [W_UK_a c | kr], v_a = W_UV_a c (transformers' DeepseekV3Attention)
// but reads the cache once for all heads. kv_b_proj is re-laid out at load as W_UK^T and W_UV per
// head, dense in the activations' float dtype (as vLLM's MLA backends keep them); the quantizer leaves
// it dense, so this costs no second rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cpu_backend_internal.h"
#include "infergate/kernels/cpu.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::engine {
namespace {

namespace k = infergate::kernels;
namespace m = infergate::runtime::model;

double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

}  // namespace

Status check_rope_scaling(const m::ModelConfig& c) {
  const m::RopeScaling& r = c.rope_scaling;
  if (r.type == m::RopeType::kDefault || r.type == m::RopeType::kLlama3) return ok_status();
  if (r.type == m::RopeType::kYarn) {
    // transformers' attention factor multiplies cos and sin; the engine's rope has none, so it must be 1.
    const double af = r.attention_factor ? *r.attention_factor
                      : r.mscale_all_dim > 0
                          ? yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim)
                          : yarn_mscale(r.factor, 1.0);
    if (std::abs(af - 1.0) <= 1e-6) return ok_status();
    return unimplemented("rope_scaling yarn with an attention factor of " + std::to_string(af) +
                         " is not supported (only 1, as with mscale == mscale_all_dim)")
        .with_reason("UnsupportedRopeScaling");
  }
  return unimplemented("rope_scaling type " + std::string(m::rope_type_name(r.type)) +
                       " is not supported (default, llama3, and yarn with mscale == mscale_all_dim are)")
      .with_reason("UnsupportedRopeScaling");
}

float mla_softmax_scale(const m::ModelConfig& c) {
  double s = 1.0 / std::sqrt(static_cast<double>(c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim));
  if (c.rope_scaling.type == m::RopeType::kYarn && c.rope_scaling.mscale_all_dim > 0) {
    const double ms = yarn_mscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    s *= ms * ms;
  }
  return static_cast<float>(s);
}

Result<CpuBackend::Linear> CpuBackend::dense_linear(const std::vector<float>& w, int64_t rows, int64_t cols,
                                                    m::DType target) {
  Linear l;
  l.rows = rows;
  l.cols = cols;
  const size_t n = static_cast<size_t>(rows * cols);
  AlignedBuffer buf(n * m::dtype_size(target));
  if (!buf.data()) return resource_exhausted("out of memory re-laying out kv_b_proj");
  if (target == m::DType::kF32) {
    std::memcpy(buf.data(), w.data(), n * 4);
    l.f32 = reinterpret_cast<const float*>(buf.data());
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = target == m::DType::kF16 ? m::f32_to_f16(w[i]) : m::f32_to_bf16(w[i]);
      std::memcpy(buf.data() + 2 * i, &h, 2);
    }
    l.view.layout = {target == m::DType::kF16 ? k::WeightFormat::kF16 : k::WeightFormat::kBF16, rows, cols, 0,
                     k::ScaleDtype::kF16};
    l.view.data = buf.data();
  }
  weight_bytes_ += static_cast<int64_t>(buf.size());
  owned_bytes_ += static_cast<int64_t>(buf.size());
  owned_.push_back(std::move(buf));
  return l;
}

Result<CpuBackend::Mla> CpuBackend::load_mla(const std::string& p) {
  const m::ModelConfig& c = model_->config();
  const m::MlaConfig& ml = *c.mla;
  const int64_t H = c.hidden_size, A = c.num_attention_heads, nope = ml.qk_nope_head_dim,
                rope = ml.qk_rope_head_dim, v = ml.v_head_dim, kvl = ml.kv_lora_rank;
  Mla M;
  if (ml.q_lora_rank > 0) {
    INFERGATE_ASSIGN_OR_RETURN(M.q_a,
                               load_linear(p + "self_attn.q_a_proj.weight", ml.q_lora_rank, H, c.qkv_bias));
    INFERGATE_ASSIGN_OR_RETURN(M.q_a_norm, vector_f32(p + "self_attn.q_a_layernorm.weight", ml.q_lora_rank));
    INFERGATE_ASSIGN_OR_RETURN(
        M.q_b, load_linear(p + "self_attn.q_b_proj.weight", A * (nope + rope), ml.q_lora_rank, false));
  } else {
    INFERGATE_ASSIGN_OR_RETURN(M.q, load_linear(p + "self_attn.q_proj.weight", A * (nope + rope), H, false));
  }
  INFERGATE_ASSIGN_OR_RETURN(
      M.kv_a, load_linear(p + "self_attn.kv_a_proj_with_mqa.weight", kvl + rope, H, c.qkv_bias));
  INFERGATE_ASSIGN_OR_RETURN(M.kv_a_norm, vector_f32(p + "self_attn.kv_a_layernorm.weight", kvl));
  weight_bytes_ += static_cast<int64_t>(M.q_a_norm.size() + M.kv_a_norm.size()) * 4;

  // kv_b_proj [A x (nope + v), kvl] as fp32, dense or (a third party's checkpoint) dequantized.
  const std::string name = p + "self_attn.kv_b_proj.weight";
  INFERGATE_ASSIGN_OR_RETURN(m::WeightView w, model_->weight(name));
  if (static_cast<int64_t>(w.rows) != A * (nope + v) || static_cast<int64_t>(w.cols) != kvl) {
    return invalid_argument("weight " + name + " is [" + std::to_string(w.rows) + ", " +
                            std::to_string(w.cols) + "], the config needs [" +
                            std::to_string(A * (nope + v)) + ", " + std::to_string(kvl) + "]")
        .with_reason("TensorShapeMismatch")
        .with_detail("tensor", name);
  }
  std::vector<float> kvb(static_cast<size_t>(A * (nope + v) * kvl));
  m::DType target = m::DType::kF16;
  if (w.format == m::WeightFormat::kDense) {
    const m::TensorView& t = w.dense;
    if (t.dtype != m::DType::kF16 && t.dtype != m::DType::kBF16 && t.dtype != m::DType::kF32) {
      return invalid_argument("weight " + name + " has dtype " + std::string(m::dtype_name(t.dtype)))
          .with_reason("TensorDtypeMismatch")
          .with_detail("tensor", name);
    }
    for (size_t i = 0; i < kvb.size(); ++i) kvb[i] = tensor_element(t, i);
    // The float dtype the other dense layers get (load_linear's rule).
    const WeightFormat want = options_.weight_format;
    target = want == WeightFormat::kF32    ? m::DType::kF32
             : want == WeightFormat::kBF16 ? m::DType::kBF16
             : want == WeightFormat::kF16  ? m::DType::kF16
             : t.dtype == m::DType::kF32   ? m::DType::kF16
                                           : t.dtype;
  } else {  // a third party's quantized kv_b_proj
    INFERGATE_ASSIGN_OR_RETURN(k::WeightView kv, m::kernel_weight_view(w));
    ENGINE_K(k::dequantize_weight_cpu(kv, k::contiguous(kvb.data(), A * (nope + v), kvl)), name);
    if (options_.weight_format == WeightFormat::kBF16) target = m::DType::kBF16;
  }
  // Latent key smoothing (fp8/int8/int4 caches): a latent channel j whose kv_a_layernorm weight stands
  // 2^e above the median is scaled down by 2^e in the norm and up by 2^e in W_UK^T's row j and W_UV's
  // column j: the same attention, exactly (powers of two), with a latent the per-token scales can hold.
  std::vector<float> f(static_cast<size_t>(kvl), 1.0f);
  if (options_.smooth_keys) {
    std::vector<double> mag(M.kv_a_norm.begin(), M.kv_a_norm.end());
    for (double& x : mag) x = std::abs(x);
    std::vector<double> sorted = mag;
    std::nth_element(sorted.begin(), sorted.begin() + kvl / 2, sorted.end());
    const double median = sorted[static_cast<size_t>(kvl / 2)];
    for (int64_t j = 0; j < kvl; ++j) {
      f[static_cast<size_t>(j)] = smoothing_factor(mag[static_cast<size_t>(j)], median);
      if (f[static_cast<size_t>(j)] == 1.0f) continue;
      M.kv_a_norm[static_cast<size_t>(j)] *= f[static_cast<size_t>(j)];
      ++smoothed_channels_;
    }
  }
  std::vector<float> uk(static_cast<size_t>(kvl * nope)), uv(static_cast<size_t>(v * kvl));
  for (int64_t a = 0; a < A; ++a) {
    const float* rows = kvb.data() + a * (nope + v) * kvl;  // W_UK_a [nope, kvl], then W_UV_a [v, kvl]
    for (int64_t j = 0; j < kvl; ++j) {
      for (int64_t i = 0; i < nope; ++i)
        uk[static_cast<size_t>(j * nope + i)] = rows[i * kvl + j] / f[static_cast<size_t>(j)];
    }
    for (int64_t r = 0; r < v; ++r) {
      for (int64_t j = 0; j < kvl; ++j)
        uv[static_cast<size_t>(r * kvl + j)] = rows[(nope + r) * kvl + j] / f[static_cast<size_t>(j)];
    }
    INFERGATE_ASSIGN_OR_RETURN(Linear ukl, dense_linear(uk, kvl, nope, target));
    INFERGATE_ASSIGN_OR_RETURN(Linear uvl, dense_linear(uv, v, kvl, target));
    M.uk_t.push_back(std::move(ukl));
    M.uv.push_back(std::move(uvl));
  }
  return M;
}

Status CpuBackend::allocate_latent(const KvSpec& spec, int64_t num_blocks) {
  INFERGATE_ASSIGN_OR_RETURN(KvBytes b, engine::kv_bytes(spec));
  INFERGATE_ASSIGN_OR_RETURN(int64_t total, kv_pool_bytes(spec, num_blocks, max_sequences_));
  kv_spec_ = spec;
  num_blocks_ = num_blocks;
  kv_pages_.clear();
  kv_staging_.clear();
  caches_.clear();
  latent_caches_.clear();
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    AlignedBuffer pages(static_cast<size_t>(b.page_bytes * num_blocks));
    if (!pages.data()) {
      return resource_exhausted("cannot allocate the latent KV pool (" + std::to_string(total) + " bytes)")
          .with_reason("KvPoolAllocationFailed");
    }
    k::LatentCache cache;
    if (auto kd = kernel_kv_dtype(spec.dtype)) {
      cache.layout = {*kd, spec.block_tokens, 1, spec.head_dim};
      cache.layout.int4_group = kv_int4_group(spec);
    }
    cache.pages = pages.data();
    cache.num_pages = num_blocks;
    latent_caches_.push_back(cache);
    kv_pages_.push_back(std::move(pages));
  }
  kv_bytes_ = total;
  return ok_status();
}

void CpuBackend::mla_attention_f32(int32_t layer, const Step& st, const float* q, float* out) {
  const int64_t A = shape_.num_heads, D = shape_.head_dim, P = kBlockTokens;
  const int64_t dv = model_->config().mla->kv_lora_rank;
  const float* pool = reinterpret_cast<const float*>(kv_pages_[static_cast<size_t>(layer)].data());
  std::vector<double> s, acc(static_cast<size_t>(dv));
  for (size_t si = 0; si < st.batch.size(); ++si) {
    const SequenceInput& in = st.batch[si];
    for (int64_t i = 0; i < static_cast<int64_t>(in.tokens.size()); ++i) {
      const int64_t row = st.q_start[si] + i, pos = in.start_position + i;
      s.assign(static_cast<size_t>(pos + 1), 0.0);
      for (int64_t a = 0; a < A; ++a) {
        const float* qv = q + (row * A + a) * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* kv = pool + (int64_t{in.block_table[static_cast<size_t>(j / P)]} * P + j % P) * D;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += static_cast<double>(qv[c]) * kv[c];
          s[static_cast<size_t>(j)] = d * attention_scale_;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const float* kv = pool + (int64_t{in.block_table[static_cast<size_t>(j / P)]} * P + j % P) * D;
          const double w = s[static_cast<size_t>(j)] / sum;
          for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] += w * kv[c];
        }
        float* o = out + (row * A + a) * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
      }
    }
  }
}

Status CpuBackend::mla_attention(const Layer& L, int32_t layer, const Step& st) {
  const m::MlaConfig& ml = *model_->config().mla;
  const Mla& M = *L.mla;
  const int64_t T = st.tokens, A = shape_.num_heads, nope = ml.qk_nope_head_dim, rope = ml.qk_rope_head_dim,
                v = ml.v_head_dim, kvl = ml.kv_lora_rank, D = kvl + rope, qh = nope + rope;
  q_.resize(static_cast<size_t>(T * A * qh));
  ckv_.resize(static_cast<size_t>(T * D));
  q_abs_.resize(static_cast<size_t>(T * A * D));
  latent_out_.resize(static_cast<size_t>(T * A * kvl));
  attn_.resize(static_cast<size_t>(T * A * v));
  // The query and the latent row from the normalised input.
  if (ml.q_lora_rank > 0) {
    q_a_.resize(static_cast<size_t>(T * ml.q_lora_rank));
    INFERGATE_RETURN_IF_ERROR(linears(h_.data(), T, {{&M.q_a, q_a_.data()}, {&M.kv_a, ckv_.data()}}));
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(q_a_.data(), T, ml.q_lora_rank), M.q_a_norm.data(),
                           eps_, k::contiguous(q_a_.data(), T, ml.q_lora_rank)),
             "q_a_layernorm");
    INFERGATE_RETURN_IF_ERROR(linear(M.q_b, q_a_.data(), T, q_.data()));
  } else {
    INFERGATE_RETURN_IF_ERROR(linears(h_.data(), T, {{&M.q, q_.data()}, {&M.kv_a, ckv_.data()}}));
  }
  ENGINE_K(ops_->rmsnorm(k::View2<const float>{ckv_.data(), T, kvl, D}, M.kv_a_norm.data(), eps_,
                         k::View2<float>{ckv_.data(), T, kvl, D}),
           "kv_a_layernorm");
  ENGINE_K(ops_->rope(rope_, inv_freq_.data(), st.pos.data(),
                      k::View3<float>{q_.data() + nope, T, A, rope, A * qh, qh},
                      k::View3<float>{ckv_.data() + kvl, T, 1, rope, D, rope}),
           "rope");
  // The absorbed query: W_UK^T q_nope per head (one grouped pass), then the roped part as it is.
  products_.clear();
  for (int64_t a = 0; a < A; ++a) {
    products_.push_back(
        {&M.uk_t[static_cast<size_t>(a)], q_.data() + a * qh, T, q_abs_.data() + a * D, A * qh, A * D});
  }
  INFERGATE_RETURN_IF_ERROR(grouped(products_));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t a = 0; a < A; ++a) {
      std::memcpy(q_abs_.data() + (t * A + a) * D + kvl, q_.data() + (t * A + a) * qh + nope,
                  static_cast<size_t>(rope) * 4);
    }
  }
  // Cache the rows, attend.
  if (kv_spec_.dtype == KvCacheDtype::kF32) {
    float* pool = reinterpret_cast<float*>(kv_pages_[static_cast<size_t>(layer)].data());
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(pool + (int64_t{st.page_ids[static_cast<size_t>(t)]} * kBlockTokens +
                          st.slots[static_cast<size_t>(t)]) *
                             D,
                  ckv_.data() + t * D, static_cast<size_t>(D) * 4);
    }
    mla_attention_f32(layer, st, q_abs_.data(), latent_out_.data());
  } else {
    const k::LatentCache& cache = latent_caches_[static_cast<size_t>(layer)];
    ENGINE_K(ops_->latent_append(cache, k::contiguous<const float>(ckv_.data(), T, D), st.page_ids.data(),
                                 st.slots.data()),
             "latent_append");
    ENGINE_K(ops_->mla_attention(cache, st.attention, k::contiguous<const float>(q_abs_.data(), T, A, D),
                                 static_cast<int32_t>(kvl), k::contiguous(latent_out_.data(), T, A, kvl)),
             "mla_attention");
  }
  // W_UV per head (one grouped pass), then o_proj.
  products_.clear();
  for (int64_t a = 0; a < A; ++a) {
    products_.push_back({&M.uv[static_cast<size_t>(a)], latent_out_.data() + a * kvl, T, attn_.data() + a * v,
                         A * kvl, A * v});
  }
  INFERGATE_RETURN_IF_ERROR(grouped(products_));
  return linear(L.o, attn_.data(), T, h_.data());
}

}  // namespace infergate::runtime::engine
