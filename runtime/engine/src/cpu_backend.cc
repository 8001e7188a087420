// CpuBackend: the forward pass of the dense decoder architectures (Llama, Mistral, Qwen2, GLM, GLM-4)
// over the kernels' CPU ops, with the weights used in their stored (compressed) form and the paged KV
// pool in host memory. Also the fp32 reference path (fp32 weights and an fp32 paged cache) that
// quality baselines are measured against, and a switch to the kernels' scalar references (a second
// code path for the noise floor).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu_backend_internal.h"
#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::engine {

// The references have no multi-product op: one linear_ref per output.
static kernels::Status linear_multi_ref(kernels::View2<const float> x, const kernels::LinearOutput* outs,
                                        int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    kernels::Status s = kernels::linear_ref(x, outs[i].w, outs[i].bias, outs[i].y);
    if (!s.ok()) return s;
  }
  return kernels::ok_status();
}
static kernels::Status linear_grouped_ref(const kernels::LinearProduct* products, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    kernels::Status s = kernels::linear_ref(products[i].x, products[i].w, products[i].bias, products[i].y);
    if (!s.ok()) return s;
  }
  return kernels::ok_status();
}
constexpr Ops kCpuOps{kernels::linear_cpu,    kernels::linear_multi_cpu,  kernels::linear_grouped_cpu,
                      kernels::rmsnorm_cpu,   kernels::rope_cpu,          kernels::silu_mul_cpu,
                      kernels::add_cpu,       kernels::embedding_cpu,     kernels::kv_append_cpu,
                      kernels::attention_cpu, kernels::latent_append_cpu, kernels::mla_attention_cpu};
constexpr Ops kRefOps{kernels::linear_ref,    linear_multi_ref,           linear_grouped_ref,
                      kernels::rmsnorm_ref,   kernels::rope_ref,          kernels::silu_mul_ref,
                      kernels::add_ref,       kernels::embedding_ref,     kernels::kv_append_ref,
                      kernels::attention_ref, kernels::latent_append_ref, kernels::mla_attention_ref};

namespace {

namespace k = infergate::kernels;
namespace m = infergate::runtime::model;

k::SourceDtype source_dtype(m::DType d) {
  return d == m::DType::kF16    ? k::SourceDtype::kF16
         : d == m::DType::kBF16 ? k::SourceDtype::kBF16
                                : k::SourceDtype::kF32;
}

bool is_float_dtype(m::DType d) { return d == m::DType::kF16 || d == m::DType::kBF16 || d == m::DType::kF32; }

}  // namespace

float tensor_element(const m::TensorView& t, uint64_t i) {
  switch (t.dtype) {
    case m::DType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return m::f16_to_f32(h);
    }
    case m::DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return m::bf16_to_f32(h);
    }
    default: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
  }
}

float smoothing_factor(double magnitude, double median) {
  if (!(median > 0)) return 1.0f;
  const int e = static_cast<int>(std::floor(std::log2(magnitude / median) + 0.5));
  return e <= 0 ? 1.0f : std::ldexp(1.0f, -std::min(e, 12));
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (data_) std::memset(data_, 0, rounded);
}
AlignedBuffer::~AlignedBuffer() { std::free(data_); }
AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

CpuBackend::CpuBackend(std::shared_ptr<const m::Model> model, const CpuBackendOptions& options)
    : model_(std::move(model)), options_(options) {}

Result<std::vector<float>> CpuBackend::vector_f32(std::string_view name, int64_t expect) const {
  INFERGATE_ASSIGN_OR_RETURN(m::TensorView t, model_->tensor(name));
  if (!is_float_dtype(t.dtype)) {
    return invalid_argument("tensor " + std::string(name) + " has dtype " +
                            std::string(m::dtype_name(t.dtype)) + ", expected F16, BF16 or F32")
        .with_reason("TensorDtypeMismatch")
        .with_detail("tensor", std::string(name));
  }
  if (static_cast<int64_t>(t.num_elements()) != expect) {
    return invalid_argument("tensor " + std::string(name) + " has " + std::to_string(t.num_elements()) +
                            " elements, the config needs " + std::to_string(expect))
        .with_reason("TensorShapeMismatch")
        .with_detail("tensor", std::string(name));
  }
  std::vector<float> v(static_cast<size_t>(expect));
  for (uint64_t i = 0; i < v.size(); ++i) v[i] = tensor_element(t, i);
  return v;
}

Result<CpuBackend::Linear> CpuBackend::load_linear(std::string_view name, int64_t rows, int64_t cols,
                                                   bool bias) {
  Linear l;
  l.rows = rows;
  l.cols = cols;
  INFERGATE_ASSIGN_OR_RETURN(m::WeightView w, model_->weight(name));
  if (static_cast<int64_t>(w.rows) != rows || static_cast<int64_t>(w.cols) != cols) {
    return invalid_argument("weight " + std::string(name) + " is [" + std::to_string(w.rows) + ", " +
                            std::to_string(w.cols) + "], the config needs [" + std::to_string(rows) + ", " +
                            std::to_string(cols) + "]")
        .with_reason("TensorShapeMismatch")
        .with_detail("tensor", std::string(name));
  }
  const WeightFormat want = options_.weight_format;
  if (w.format == m::WeightFormat::kDense) {
    if (!is_float_dtype(w.dense.dtype)) {
      return invalid_argument("weight " + std::string(name) + " has dtype " +
                              std::string(m::dtype_name(w.dense.dtype)))
          .with_reason("TensorDtypeMismatch")
          .with_detail("tensor", std::string(name));
    }
    // Dense layers of a quantized checkpoint (lm_head by default) stay in their float dtype;
    // fp32 ones become fp16. Dense checkpoints take the requested float format.
    m::DType target;
    if (want == WeightFormat::kF32) {
      target = m::DType::kF32;
    } else if (want == WeightFormat::kBF16) {
      target = m::DType::kBF16;
    } else if (want == WeightFormat::kF16) {
      target = m::DType::kF16;
    } else {
      target = w.dense.dtype == m::DType::kF32 ? m::DType::kF16 : w.dense.dtype;
    }
    const size_t n = static_cast<size_t>(rows * cols);
    if (target == w.dense.dtype && w.dense.aligned()) {
      if (target == m::DType::kF32) {
        l.f32 = w.dense.as<float>();
      } else {
        l.view.layout = {target == m::DType::kF16 ? k::WeightFormat::kF16 : k::WeightFormat::kBF16, rows,
                         cols, 0, k::ScaleDtype::kF16};
        l.view.data = w.dense.data;
      }
    } else {
      AlignedBuffer buf(n * m::dtype_size(target));
      if (!buf.data()) return resource_exhausted("out of memory converting " + std::string(name));
      for (size_t i = 0; i < n; ++i) {
        const float f = tensor_element(w.dense, i);
        if (target == m::DType::kF32) {
          reinterpret_cast<float*>(buf.data())[i] = f;
        } else {
          const uint16_t h = target == m::DType::kF16 ? m::f32_to_f16(f) : m::f32_to_bf16(f);
          std::memcpy(buf.data() + 2 * i, &h, 2);
        }
      }
      if (target == m::DType::kF32) {
        l.f32 = reinterpret_cast<const float*>(buf.data());
      } else {
        l.view.layout = {target == m::DType::kF16 ? k::WeightFormat::kF16 : k::WeightFormat::kBF16, rows,
                         cols, 0, k::ScaleDtype::kF16};
        l.view.data = buf.data();
      }
      owned_bytes_ += static_cast<int64_t>(buf.size());
      owned_.push_back(std::move(buf));
    }
    weight_bytes_ += static_cast<int64_t>(n * m::dtype_size(target));
  } else {
    INFERGATE_ASSIGN_OR_RETURN(l.view, m::kernel_weight_view(w));
    weight_bytes_ += k::weight_bytes(l.view.layout).total();
  }
  if (bias) {
    std::string bname(name);
    bname.replace(bname.size() - std::string_view(".weight").size(), std::string::npos, ".bias");
    INFERGATE_ASSIGN_OR_RETURN(l.bias, vector_f32(bname, rows));
    weight_bytes_ += rows * 4;
  }
  return l;
}

Status CpuBackend::scale_rows(Linear& l, const std::vector<float>& f) {
  auto own = [&](const void* src, size_t bytes) -> uint8_t* {
    AlignedBuffer buf(bytes);
    if (!buf.data()) return nullptr;
    std::memcpy(buf.data(), src, bytes);
    owned_.push_back(std::move(buf));
    return owned_.back().data();
  };
  const size_t rows = static_cast<size_t>(l.rows), cols = static_cast<size_t>(l.cols);
  if (l.f32) {
    float* w = reinterpret_cast<float*>(own(l.f32, rows * cols * 4));
    if (!w) return resource_exhausted("out of memory smoothing keys");
    for (size_t n = 0; n < rows; ++n) {
      for (size_t c = 0; c < cols; ++c) w[n * cols + c] *= f[n];
    }
    l.f32 = w;
  } else if (l.view.layout.format == k::WeightFormat::kF16 ||
             l.view.layout.format == k::WeightFormat::kBF16) {
    const bool f16 = l.view.layout.format == k::WeightFormat::kF16;
    uint16_t* w = reinterpret_cast<uint16_t*>(own(l.view.data, rows * cols * 2));
    if (!w) return resource_exhausted("out of memory smoothing keys");
    for (size_t n = 0; n < rows; ++n) {
      if (f[n] == 1.0f) continue;
      for (size_t c = 0; c < cols; ++c) {
        uint16_t& h = w[n * cols + c];
        h = f16 ? m::f32_to_f16(m::f16_to_f32(h) * f[n]) : m::f32_to_bf16(m::bf16_to_f32(h) * f[n]);
      }
    }
    l.view.data = w;
  } else {
    // Quantized: W[n, :] = d[n, g] * (...), so scaling row n is scaling its scales.
    const size_t groups = static_cast<size_t>(k::weight_groups_per_row(l.view.layout));
    uint16_t* d = reinterpret_cast<uint16_t*>(own(l.view.scales, rows * groups * 2));
    if (!d) return resource_exhausted("out of memory smoothing keys");
    const bool f16 = l.view.layout.scale_dtype == k::ScaleDtype::kF16;
    for (size_t n = 0; n < rows; ++n) {
      for (size_t g = 0; g < groups; ++g) {
        uint16_t& h = d[n * groups + g];
        h = f16 ? m::f32_to_f16(m::f16_to_f32(h) * f[n]) : m::f32_to_bf16(m::bf16_to_f32(h) * f[n]);
      }
    }
    l.view.scales = d;
  }
  for (size_t n = 0; n < l.bias.size(); ++n) l.bias[n] *= f[n];
  return ok_status();
}

Status CpuBackend::smooth_keys(Layer& L, std::string_view prefix) {
  const int64_t Hk = shape_.num_kv_heads, Hq = shape_.num_heads, D = shape_.head_dim, H = shape_.hidden;
  const int64_t r = rope_.rotary_dim;
  // Expected RMS of each key channel for a unit-RMS normalised input: || W_k[row] * norm_w || (+ |b|).
  std::vector<double> mag(static_cast<size_t>(Hk * D));
  std::vector<float> row(static_cast<size_t>(H));
  // With per-head q/k norms a key channel's size is its k_norm weight (the norm gives every head
  // unit RMS), and the factors go on the two norms' weights, shared by all heads.
  const bool on_norms = !L.k_norm.empty();
  for (int64_t n = 0; n < Hk * D && on_norms; ++n) {
    mag[static_cast<size_t>(n)] = std::abs(static_cast<double>(L.k_norm[static_cast<size_t>(n % D)]));
  }
  for (int64_t n = 0; n < Hk * D && !on_norms; ++n) {
    if (L.k.f32) {
      std::memcpy(row.data(), L.k.f32 + n * H, static_cast<size_t>(H) * 4);
    } else {
      k::WeightView one = L.k.view;
      one.layout.rows = 1;
      const int64_t rb = k::weight_row_bytes(L.k.view.layout), gr = k::weight_groups_per_row(L.k.view.layout);
      one.data = static_cast<const uint8_t*>(L.k.view.data) + n * rb;
      if (one.scales) one.scales = static_cast<const uint8_t*>(L.k.view.scales) + n * gr * 2;
      if (one.zeros) one.zeros = L.k.view.zeros + n * gr;
      ENGINE_K(k::dequantize_weight_cpu(one, k::contiguous(row.data(), 1, H)), "smooth_keys");
    }
    double s = 0;
    for (int64_t c = 0; c < H; ++c) {
      const double w =
          static_cast<double>(row[static_cast<size_t>(c)]) * L.input_norm[static_cast<size_t>(c)];
      s += w * w;
    }
    mag[static_cast<size_t>(n)] =
        std::sqrt(s) + (L.k.bias.empty() ? 0.0 : std::abs(L.k.bias[static_cast<size_t>(n)]));
  }
  std::vector<float> kf(static_cast<size_t>(Hk * D), 1.0f), qf(static_cast<size_t>(Hq * D), 1.0f);
  const bool interleaved = rope_.style == k::RopeStyle::kInterleaved;
  for (int64_t h = 0; h < Hk; ++h) {
    const double* m_h = mag.data() + h * D;
    std::vector<double> sorted(m_h, m_h + D);
    std::nth_element(sorted.begin(), sorted.begin() + D / 2, sorted.end());
    const double median = sorted[static_cast<size_t>(D / 2)];
    if (!(median > 0)) continue;
    for (int64_t j = 0; j < D; ++j) {
      // The channel RoPE rotates with j: both get the same factor so that rotation commutes.
      int64_t partner = j;
      if (j < r) partner = interleaved ? (j ^ 1) : (j < r / 2 ? j + r / 2 : j - r / 2);
      const float f = smoothing_factor(std::max(m_h[j], m_h[partner]), median);
      if (f == 1.0f) continue;
      kf[static_cast<size_t>(h * D + j)] = f;
      ++smoothed_channels_;
      for (int64_t q = h * (Hq / Hk); q < (h + 1) * (Hq / Hk); ++q)
        qf[static_cast<size_t>(q * D + j)] = 1.0f / f;
    }
  }
  if (std::all_of(kf.begin(), kf.end(), [](float f) { return f == 1.0f; })) return ok_status();
  if (on_norms) {  // every head got the same factors (the magnitudes are the same per head)
    for (int64_t j = 0; j < D; ++j) {
      L.k_norm[static_cast<size_t>(j)] *= kf[static_cast<size_t>(j)];
      L.q_norm[static_cast<size_t>(j)] *= qf[static_cast<size_t>(j)];
    }
    return ok_status();
  }
  INFERGATE_RETURN_IF_ERROR(scale_rows(L.k, kf).context(std::string(prefix) + "self_attn.k_proj"));
  INFERGATE_RETURN_IF_ERROR(scale_rows(L.q, qf).context(std::string(prefix) + "self_attn.q_proj"));
  return ok_status();
}

Result<CpuBackend::Expert> CpuBackend::load_expert(const std::string& prefix, int64_t width, bool bias) {
  const int64_t H = shape_.hidden;
  Expert e;
  INFERGATE_ASSIGN_OR_RETURN(e.gate, load_linear(prefix + ".gate_proj.weight", width, H, bias));
  INFERGATE_ASSIGN_OR_RETURN(e.up, load_linear(prefix + ".up_proj.weight", width, H, bias));
  INFERGATE_ASSIGN_OR_RETURN(e.down, load_linear(prefix + ".down_proj.weight", H, width, bias));
  return e;
}

Result<CpuBackend::Moe> CpuBackend::load_moe(const std::string& p) {
  const m::MoeConfig& mc = *model_->config().moe;
  const int64_t E = mc.n_routed_experts;
  Moe moe;
  // The router stays dense (the quantizer never compresses it); its logits are fp32 like every product.
  INFERGATE_ASSIGN_OR_RETURN(moe.router, load_linear(p + "mlp.gate.weight", E, shape_.hidden, false));
  if (mc.topk_method == "noaux_tc") {
    INFERGATE_ASSIGN_OR_RETURN(moe.selection_bias, vector_f32(p + "mlp.gate.e_score_correction_bias", E));
    weight_bytes_ += E * 4;
  }
  k::MoeRouting& r = moe.routing;
  r.num_experts = static_cast<int32_t>(E);
  r.top_k = static_cast<int32_t>(mc.num_experts_per_tok);
  r.num_groups = mc.topk_method == "noaux_tc" ? static_cast<int32_t>(mc.n_group) : 1;
  r.topk_groups = mc.topk_method == "noaux_tc" ? static_cast<int32_t>(mc.topk_group) : 1;
  r.softmax = mc.scoring_func == "softmax";
  r.normalize = mc.norm_topk_prob;
  r.scaling = static_cast<float>(mc.routed_scaling_factor);
  std::vector<float> probe(static_cast<size_t>(E));
  std::vector<int32_t> pe(static_cast<size_t>(r.top_k));
  std::vector<float> pw(static_cast<size_t>(r.top_k));
  const k::Status check =
      k::moe_route_ref(r, k::contiguous<const float>(probe.data(), 1, E), pe.data(), pw.data());
  if (!check.ok()) {
    return invalid_argument(p + "mlp: the config's routing cannot be run: " + check.message())
        .with_reason("InvalidConfig");
  }
  moe.experts.reserve(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    INFERGATE_ASSIGN_OR_RETURN(
        Expert x, load_expert(p + "mlp.experts." + std::to_string(e), mc.moe_intermediate_size, false));
    moe.experts.push_back(std::move(x));
  }
  if (mc.n_shared_experts > 0) {
    INFERGATE_ASSIGN_OR_RETURN(
        moe.shared,
        load_expert(p + "mlp.shared_experts", mc.moe_intermediate_size * mc.n_shared_experts, false));
  }
  return moe;
}

Status CpuBackend::load() {
  const m::ModelConfig& c = model_->config();

  if (c.hidden_act != "silu") {
    return unimplemented("hidden_act \"" + c.hidden_act + "\" is not supported (silu only)")
        .with_reason("UnsupportedArchitecture");
  }
  if (c.moe) {
    const m::MoeConfig& mc = *c.moe;
    if (mc.scoring_func != "sigmoid" && mc.scoring_func != "softmax") {
      return unimplemented("scoring_func \"" + mc.scoring_func + "\" is not supported (sigmoid, softmax)")
          .with_reason("UnsupportedArchitecture")
          .with_detail("field", "scoring_func");
    }
    if (mc.topk_method != "noaux_tc" && mc.topk_method != "greedy") {
      return unimplemented("topk_method \"" + mc.topk_method + "\" is not supported (noaux_tc, greedy)")
          .with_reason("UnsupportedArchitecture")
          .with_detail("field", "topk_method");
    }
  }
  INFERGATE_RETURN_IF_ERROR(check_rope_scaling(c));
  // Which checkpoint formats can be served as which weight formats.
  const m::WeightFormat stored = model_->weight_format();
  const WeightFormat want = options_.weight_format;
  const bool ok =
      (stored == m::WeightFormat::kDense &&
       (want == WeightFormat::kF16 || want == WeightFormat::kBF16 || want == WeightFormat::kF32)) ||
      (stored == m::WeightFormat::kInt8 && want == WeightFormat::kInt8) ||
      (stored == m::WeightFormat::kInt4 && want == WeightFormat::kInt4);
  if (!ok) {
    std::string have = stored == m::WeightFormat::kDense
                           ? "a dense (unquantized)"
                           : std::string("an ") + std::string(m::weight_format_name(stored));
    std::string hint =
        (want == WeightFormat::kInt8 || want == WeightFormat::kInt4) && stored == m::WeightFormat::kDense
            ? "; write one with `infergate-runtime quantize --weight-format " +
                  std::string(weight_format_name(want)) + "`"
            : "";
    return invalid_argument("--weight-format " + std::string(weight_format_name(want)) + " cannot serve " +
                            have + " checkpoint" + hint)
        .with_reason("WeightFormatMismatch")
        .with_detail("weight_format", std::string(weight_format_name(want)))
        .with_detail("checkpoint_format", std::string(m::weight_format_name(stored)));
  }
  ops_ = options_.reference_ops ? &kRefOps : &kCpuOps;
  if (options_.threads > 0) k::set_cpu_threads(options_.threads);

  shape_.vocab = c.vocab_size;
  shape_.hidden = c.hidden_size;
  shape_.num_layers = static_cast<int32_t>(c.num_hidden_layers);
  shape_.num_heads = static_cast<int32_t>(c.num_attention_heads);
  shape_.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads);
  shape_.head_dim = static_cast<int32_t>(c.head_dim);
  shape_.max_position = c.max_position_embeddings;
  attention_scale_ = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.mla) {  // the cache holds one row per token: the latent and the shared rope key
    shape_.num_kv_heads = 1;
    shape_.head_dim = static_cast<int32_t>(c.mla->kv_lora_rank + c.mla->qk_rope_head_dim);
    shape_.latent_kv = true;
    shape_.latent_rank = static_cast<int32_t>(c.mla->kv_lora_rank);
    attention_scale_ = mla_softmax_scale(c);
  }
  eps_ = static_cast<float>(c.rms_norm_eps);
  const int64_t H = c.hidden_size, I = c.intermediate_size;

  rope_.style =
      c.rope_layout == m::RopeLayout::kInterleaved ? k::RopeStyle::kInterleaved : k::RopeStyle::kHalfSplit;
  // MLA rotates only the rope part of each query head and the shared rope key, as heads of their own.
  rope_.head_dim = static_cast<int32_t>(c.mla ? c.mla->qk_rope_head_dim : c.head_dim);
  rope_.rotary_dim = static_cast<int32_t>(c.rotary_dim);
  rope_.theta = static_cast<float>(c.rope_theta);
  if (c.rope_scaling.type == m::RopeType::kYarn) {
    rope_.yarn.enabled = true;
    rope_.yarn.factor = static_cast<float>(c.rope_scaling.factor);
    rope_.yarn.original_max_position = static_cast<int32_t>(c.rope_scaling.original_max_position_embeddings);
    rope_.yarn.beta_fast = static_cast<float>(c.rope_scaling.beta_fast);
    rope_.yarn.beta_slow = static_cast<float>(c.rope_scaling.beta_slow);
  }
  if (c.rope_scaling.type == m::RopeType::kLlama3) {
    rope_.llama3.enabled = true;
    rope_.llama3.factor = static_cast<float>(c.rope_scaling.factor);
    rope_.llama3.low_freq_factor = static_cast<float>(c.rope_scaling.low_freq_factor);
    rope_.llama3.high_freq_factor = static_cast<float>(c.rope_scaling.high_freq_factor);
    rope_.llama3.original_max_position =
        static_cast<int32_t>(c.rope_scaling.original_max_position_embeddings);
  }
  ENGINE_K(k::rope_inv_freq(rope_, &inv_freq_), "rope");

  // Embeddings: used in place (any float dtype).
  INFERGATE_ASSIGN_OR_RETURN(m::TensorView emb, model_->tensor("model.embed_tokens.weight"));
  if (!is_float_dtype(emb.dtype) || emb.shape.size() != 2 ||
      static_cast<int64_t>(emb.shape[0]) != c.vocab_size || static_cast<int64_t>(emb.shape[1]) != H) {
    return invalid_argument("model.embed_tokens.weight must be a float [vocab_size, hidden_size] matrix")
        .with_reason("TensorShapeMismatch")
        .with_detail("tensor", "model.embed_tokens.weight");
  }
  embed_ = {emb.data, source_dtype(emb.dtype), c.vocab_size, H, H};
  weight_bytes_ += static_cast<int64_t>(emb.nbytes);

  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    INFERGATE_ASSIGN_OR_RETURN(L.input_norm, vector_f32(p + "input_layernorm.weight", H));
    INFERGATE_ASSIGN_OR_RETURN(L.post_attention_norm, vector_f32(p + "post_attention_layernorm.weight", H));
    if (c.post_sublayer_norms) {
      INFERGATE_ASSIGN_OR_RETURN(L.post_self_attn_norm, vector_f32(p + "post_self_attn_layernorm.weight", H));
      INFERGATE_ASSIGN_OR_RETURN(L.post_mlp_norm, vector_f32(p + "post_mlp_layernorm.weight", H));
    }
    if (c.qk_norm) {
      INFERGATE_ASSIGN_OR_RETURN(L.q_norm, vector_f32(p + "self_attn.q_norm.weight", c.head_dim));
      INFERGATE_ASSIGN_OR_RETURN(L.k_norm, vector_f32(p + "self_attn.k_norm.weight", c.head_dim));
    }
    weight_bytes_ += static_cast<int64_t>(L.input_norm.size() + L.post_attention_norm.size() +
                                          L.post_self_attn_norm.size() + L.post_mlp_norm.size() +
                                          L.q_norm.size() + L.k_norm.size()) *
                     4;
    if (c.mla) {
      INFERGATE_ASSIGN_OR_RETURN(L.mla, load_mla(p));
      INFERGATE_ASSIGN_OR_RETURN(L.o, load_linear(p + "self_attn.o_proj.weight", H,
                                                  c.num_attention_heads * c.mla->v_head_dim, false));
    } else {
      INFERGATE_ASSIGN_OR_RETURN(L.q, load_linear(p + "self_attn.q_proj.weight", c.q_dim(), H, c.qkv_bias));
      INFERGATE_ASSIGN_OR_RETURN(L.k, load_linear(p + "self_attn.k_proj.weight", c.kv_dim(), H, c.qkv_bias));
      INFERGATE_ASSIGN_OR_RETURN(L.v, load_linear(p + "self_attn.v_proj.weight", c.kv_dim(), H, c.qkv_bias));
      INFERGATE_ASSIGN_OR_RETURN(L.o, load_linear(p + "self_attn.o_proj.weight", H, c.q_dim(), c.o_bias));
      if (options_.smooth_keys) INFERGATE_RETURN_IF_ERROR(smooth_keys(L, p));
    }
    L.fused = c.fused_gate_up;
    if (c.moe && c.moe->is_moe_layer(i)) {
      INFERGATE_ASSIGN_OR_RETURN(L.moe, load_moe(p));
      mlp_width_ = std::max(
          {mlp_width_, c.moe->moe_intermediate_size, c.moe->moe_intermediate_size * c.moe->n_shared_experts});
    } else if (c.fused_gate_up) {
      INFERGATE_ASSIGN_OR_RETURN(L.gate_up, load_linear(p + "mlp.gate_up_proj.weight", 2 * I, H, false));
      INFERGATE_ASSIGN_OR_RETURN(L.down, load_linear(p + "mlp.down_proj.weight", H, I, false));
      mlp_width_ = std::max(mlp_width_, I);
    } else {
      INFERGATE_ASSIGN_OR_RETURN(L.gate, load_linear(p + "mlp.gate_proj.weight", I, H, c.mlp_bias));
      INFERGATE_ASSIGN_OR_RETURN(L.up, load_linear(p + "mlp.up_proj.weight", I, H, c.mlp_bias));
      INFERGATE_ASSIGN_OR_RETURN(L.down, load_linear(p + "mlp.down_proj.weight", H, I, c.mlp_bias));
      mlp_width_ = std::max(mlp_width_, I);
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(final_norm_, vector_f32("model.norm.weight", H));
  weight_bytes_ += H * 4;
  if (c.tie_word_embeddings) {
    const int64_t before = weight_bytes_;
    const size_t owned_before = owned_.size();
    INFERGATE_ASSIGN_OR_RETURN(lm_head_, load_linear("model.embed_tokens.weight", c.vocab_size, H, false));
    // The shared table is counted once, unless the lm_head needed a converted copy of it.
    if (owned_.size() == owned_before) weight_bytes_ = before;
  } else {
    INFERGATE_ASSIGN_OR_RETURN(lm_head_, load_linear("lm_head.weight", c.vocab_size, H, false));
  }
  return ok_status();
}

Status CpuBackend::allocate_kv(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) {
  if (spec.num_layers != shape_.num_layers || spec.num_kv_heads != shape_.num_kv_heads ||
      spec.head_dim != shape_.head_dim || spec.block_tokens != kBlockTokens ||
      spec.latent != shape_.latent_kv || (spec.latent && spec.latent_rank != shape_.latent_rank)) {
    return invalid_argument(
        "KV spec does not match the model (layers, KV heads, head_dim, 16-token blocks, latent or not, "
        "latent rank)");
  }
  if (spec.latent) {
    max_sequences_ = max_sequences;
    return allocate_latent(spec, num_blocks);
  }
  INFERGATE_ASSIGN_OR_RETURN(KvBytes b, engine::kv_bytes(spec));
  INFERGATE_ASSIGN_OR_RETURN(int64_t total, kv_pool_bytes(spec, num_blocks, max_sequences));
  kv_spec_ = spec;
  num_blocks_ = num_blocks;
  max_sequences_ = max_sequences;
  kv_pages_.clear();
  kv_staging_.clear();
  caches_.clear();
  k_scale_.assign(static_cast<size_t>(shape_.num_kv_heads), 1.0f);
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    AlignedBuffer pages(static_cast<size_t>(b.page_bytes * num_blocks));
    if (!pages.data()) {
      return resource_exhausted("cannot allocate the KV pool (" + std::to_string(total) + " bytes)")
          .with_reason("KvPoolAllocationFailed");
    }
    AlignedBuffer staging(static_cast<size_t>(b.staging_bytes / spec.num_layers * max_sequences));
    k::KvCache cache;
    if (auto kd = kernel_kv_dtype(spec.dtype)) {
      cache.layout = {*kd, spec.block_tokens, spec.num_kv_heads, spec.head_dim};
    }
    cache.pages = pages.data();
    cache.num_pages = num_blocks;
    cache.staging = b.staging_bytes ? staging.data() : nullptr;
    cache.num_staging = b.staging_bytes ? max_sequences : 0;
    cache.k_scale = nullptr;  // fp8: 1.0 per head (no calibration data)
    cache.v_scale = nullptr;
    caches_.push_back(cache);
    kv_pages_.push_back(std::move(pages));
    kv_staging_.push_back(std::move(staging));
  }
  kv_bytes_ = total;
  return ok_status();
}

Status CpuBackend::linear(const Linear& l, const float* x, int64_t t, float* y) {
  return linear_strided(l, x, l.cols, t, y, l.rows);
}

Status CpuBackend::linear_strided(const Linear& l, const float* x, int64_t x_stride, int64_t t, float* y,
                                  int64_t y_stride) {
  if (l.f32) {
    // fp32 reference weights: y = x W^T + b, fp32 products summed in double.
    for (int64_t r = 0; r < t; ++r) {
      const float* xr = x + r * x_stride;
      for (int64_t n = 0; n < l.rows; ++n) {
        const float* w = l.f32 + n * l.cols;
        double s = 0;
        for (int64_t c = 0; c < l.cols; ++c) s += static_cast<double>(xr[c]) * w[c];
        if (!l.bias.empty()) s += l.bias[static_cast<size_t>(n)];
        y[r * y_stride + n] = static_cast<float>(s);
      }
    }
    return ok_status();
  }
  ENGINE_K(ops_->linear(k::View2<const float>{x, t, l.cols, x_stride}, l.view,
                        l.bias.empty() ? nullptr : l.bias.data(), k::View2<float>{y, t, l.rows, y_stride}),
           "linear");
  return ok_status();
}

Status CpuBackend::linears(const float* x, int64_t t, std::initializer_list<LinearTo> outs) {
  bool all_kernels = true;
  for (const LinearTo& o : outs) all_kernels = all_kernels && o.l->f32 == nullptr;
  if (!all_kernels) {
    for (const LinearTo& o : outs) INFERGATE_RETURN_IF_ERROR(linear(*o.l, x, t, o.y));
    return ok_status();
  }
  k::LinearOutput lo[kMaxLinears];
  int64_t n = 0;
  for (const LinearTo& o : outs) {
    if (n == kMaxLinears) return Error(ErrorCode::kInternal, "linears: more than 4 products of one input");
    lo[n++] = {o.l->view, o.l->bias.empty() ? nullptr : o.l->bias.data(), k::contiguous(o.y, t, o.l->rows)};
  }
  ENGINE_K(ops_->linear_multi(k::contiguous<const float>(x, t, outs.begin()->l->cols), lo, n), "linear");
  return ok_status();
}

Status CpuBackend::kv_write_f32(int32_t layer, const float* kk, const float* vv, int64_t t,
                                const int32_t* pages, const int32_t* slots) {
  // fp32 page: K [heads][16][dim] then V [heads][16][dim].
  const int64_t Hk = shape_.num_kv_heads, D = shape_.head_dim, P = kBlockTokens;
  float* pool = reinterpret_cast<float*>(kv_pages_[static_cast<size_t>(layer)].data());
  for (int64_t i = 0; i < t; ++i) {
    float* page = pool + static_cast<int64_t>(pages[i]) * 2 * Hk * P * D;
    for (int64_t h = 0; h < Hk; ++h) {
      std::memcpy(page + (h * P + slots[i]) * D, kk + (i * Hk + h) * D, static_cast<size_t>(D) * 4);
      std::memcpy(page + Hk * P * D + (h * P + slots[i]) * D, vv + (i * Hk + h) * D,
                  static_cast<size_t>(D) * 4);
    }
  }
  return ok_status();
}

void CpuBackend::attention_f32(int32_t layer, std::span<const SequenceInput> batch,
                               const std::vector<int32_t>& q_start, const float* q, float* out) {
  const int64_t Hq = shape_.num_heads, Hk = shape_.num_kv_heads, D = shape_.head_dim, P = kBlockTokens;
  const int64_t group = Hq / Hk;
  const float* pool = reinterpret_cast<const float*>(kv_pages_[static_cast<size_t>(layer)].data());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> s, acc(static_cast<size_t>(D));
  for (size_t si = 0; si < batch.size(); ++si) {
    const SequenceInput& in = batch[si];
    for (int64_t i = 0; i < static_cast<int64_t>(in.tokens.size()); ++i) {
      const int64_t row = q_start[si] + i;
      const int64_t pos = in.start_position + i;
      s.assign(static_cast<size_t>(pos + 1), 0.0);
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / group;
        const float* qv = q + (row * Hq + h) * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* page =
              pool + static_cast<int64_t>(in.block_table[static_cast<size_t>(j / P)]) * 2 * Hk * P * D;
          const float* kv = page + (kh * P + j % P) * D;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += static_cast<double>(qv[c]) * kv[c];
          s[static_cast<size_t>(j)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const float* page =
              pool + static_cast<int64_t>(in.block_table[static_cast<size_t>(j / P)]) * 2 * Hk * P * D;
          const float* vv = page + Hk * P * D + (kh * P + j % P) * D;
          const double w = s[static_cast<size_t>(j)] / sum;
          for (int64_t c = 0; c < D; ++c) acc[static_cast<size_t>(c)] += w * vv[c];
        }
        float* o = out + (row * Hq + h) * D;
        for (int64_t c = 0; c < D; ++c) o[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
      }
    }
  }
}

Status CpuBackend::swiglu(const Linear& gate, const Linear& up, const Linear& down, const float* x, int64_t t,
                          float* y) {
  const int64_t w = gate.rows;
  INFERGATE_RETURN_IF_ERROR(linears(x, t, {{&gate, mlp_.data()}, {&up, mlp_.data() + t * w}}));
  ENGINE_K(
      ops_->silu_mul(k::contiguous<const float>(mlp_.data(), t, w),
                     k::contiguous<const float>(mlp_.data() + t * w, t, w), k::contiguous(act_.data(), t, w)),
      "silu_mul");
  return linear(down, act_.data(), t, y);
}

Status CpuBackend::mlp(const Layer& L, const float* h, int64_t t, float* y) {
  if (L.moe) return moe_mlp(*L.moe, h, t, y);
  if (!L.fused) return swiglu(L.gate, L.up, L.down, h, t, y);
  const int64_t I = L.down.cols;
  INFERGATE_RETURN_IF_ERROR(linear(L.gate_up, h, t, mlp_.data()));
  const k::View2<const float> gate{mlp_.data(), t, I, 2 * I}, up{mlp_.data() + I, t, I, 2 * I};
  ENGINE_K(ops_->silu_mul(gate, up, k::contiguous(act_.data(), t, I)), "silu_mul");
  return linear(L.down, act_.data(), t, y);
}

Status CpuBackend::grouped(std::span<const Product> products) {
  auto xs = [](const Product& p) { return p.x_stride ? p.x_stride : p.l->cols; };
  auto ys = [](const Product& p) { return p.y_stride ? p.y_stride : p.l->rows; };
  bool all_kernels = true;
  for (const Product& p : products) all_kernels = all_kernels && p.l->f32 == nullptr;
  if (!all_kernels) {
    for (const Product& p : products)
      INFERGATE_RETURN_IF_ERROR(linear_strided(*p.l, p.x, xs(p), p.rows, p.y, ys(p)));
    return ok_status();
  }
  grouped_.clear();
  for (const Product& p : products) {
    grouped_.push_back({k::View2<const float>{p.x, p.rows, p.l->cols, xs(p)}, p.l->view,
                        p.l->bias.empty() ? nullptr : p.l->bias.data(),
                        k::View2<float>{p.y, p.rows, p.l->rows, ys(p)}});
  }
  ENGINE_K(ops_->linear_grouped(grouped_.data(), static_cast<int64_t>(grouped_.size())), "grouped linear");
  return ok_status();
}

Status CpuBackend::moe_mlp(const Moe& m, const float* h, int64_t t, float* y) {
  const int64_t H = shape_.hidden, E = static_cast<int64_t>(m.experts.size()), K = m.routing.top_k;
  const int64_t P = t * K;  // (token, choice) pairs
  router_logits_.resize(static_cast<size_t>(t * E));
  route_experts_.resize(static_cast<size_t>(P));
  route_weights_.resize(static_cast<size_t>(P));
  INFERGATE_RETURN_IF_ERROR(linear(m.router, h, t, router_logits_.data()));
  k::MoeRouting r = m.routing;
  r.bias = m.selection_bias.empty() ? nullptr : m.selection_bias.data();
  ENGINE_K(k::moe_route_ref(r, k::contiguous<const float>(router_logits_.data(), t, E), route_experts_.data(),
                            route_weights_.data()),
           "router");
  // The pairs grouped by expert, tokens in order within each (a counting sort): each expert's weights
  // are read once per step however many tokens chose it, and experts nobody chose are not read.
  expert_offsets_.assign(static_cast<size_t>(E) + 1, 0);
  for (int32_t e : route_experts_) ++expert_offsets_[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < E; ++e)
    expert_offsets_[static_cast<size_t>(e) + 1] += expert_offsets_[static_cast<size_t>(e)];
  expert_rows_.resize(static_cast<size_t>(P));
  expert_fill_.assign(expert_offsets_.begin(), expert_offsets_.end() - 1);
  for (int64_t i = 0; i < P; ++i) {
    expert_rows_[static_cast<size_t>(
        expert_fill_[static_cast<size_t>(route_experts_[static_cast<size_t>(i)])]++)] =
        static_cast<int32_t>(i);
  }
  const int64_t W = m.experts.front().down.cols, Ws = m.shared.down.cols;
  const bool shared = m.shared.down.rows > 0;
  expert_x_.resize(static_cast<size_t>(P * H));
  expert_y_.resize(static_cast<size_t>(P * H));
  expert_gu_.resize(static_cast<size_t>(2 * P * W + 2 * t * Ws));
  expert_act_.resize(static_cast<size_t>(P * W + t * Ws));
  for (int64_t j = 0; j < P && t > 1; ++j) {
    const int64_t tok = expert_rows_[static_cast<size_t>(j)] / K;
    std::copy(h + tok * H, h + (tok + 1) * H, expert_x_.begin() + j * H);
  }
  float* gate = expert_gu_.data();    // [P, W], then the shared expert's [t, Ws]
  float* up = gate + P * W + t * Ws;  // the same layout
  float* act = expert_act_.data();    // the same layout
  // Every chosen expert's gate and up (and the shared expert's) in one pass, then one SiLU-and-multiply,
  // then every down projection in one pass.
  products_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = expert_offsets_[static_cast<size_t>(e)],
                  n = expert_offsets_[static_cast<size_t>(e) + 1] - b;
    if (n == 0) continue;
    const Expert& x = m.experts[static_cast<size_t>(e)];
    // One token (batch-1 decode): every expert reads h itself, so int4 reorders it once for all.
    const float* in = t == 1 ? h : expert_x_.data() + b * H;
    products_.push_back({&x.gate, in, n, gate + b * W});
    products_.push_back({&x.up, in, n, up + b * W});
  }
  if (shared) {
    products_.push_back({&m.shared.gate, h, t, gate + P * W});
    products_.push_back({&m.shared.up, h, t, up + P * W});
  }
  INFERGATE_RETURN_IF_ERROR(grouped(products_));
  // One shared expert is as wide as a routed one: its rows follow the routed rows in one call.
  const int64_t joint = shared && Ws == W ? P + t : P;
  ENGINE_K(ops_->silu_mul(k::contiguous<const float>(gate, joint, W),
                          k::contiguous<const float>(up, joint, W), k::contiguous(act, joint, W)),
           "silu_mul");
  if (shared && joint == P) {
    ENGINE_K(ops_->silu_mul(k::contiguous<const float>(gate + P * W, t, Ws),
                            k::contiguous<const float>(up + P * W, t, Ws), k::contiguous(act + P * W, t, Ws)),
             "silu_mul");
  }
  products_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = expert_offsets_[static_cast<size_t>(e)],
                  n = expert_offsets_[static_cast<size_t>(e) + 1] - b;
    if (n > 0)
      products_.push_back(
          {&m.experts[static_cast<size_t>(e)].down, act + b * W, n, expert_y_.data() + b * H});
  }
  if (shared) products_.push_back({&m.shared.down, act + P * W, t, y});
  INFERGATE_RETURN_IF_ERROR(grouped(products_));
  if (!shared) std::fill(y, y + t * H, 0.0f);
  // y[token] += weight x expert output, in expert order for every token (the same sums whatever else
  // is in the batch).
  for (int64_t j = 0; j < P; ++j) {
    const int32_t pair = expert_rows_[static_cast<size_t>(j)];
    const float w = route_weights_[static_cast<size_t>(pair)];
    float* out = y + (pair / K) * H;
    const float* ye = expert_y_.data() + j * H;
    for (int64_t c = 0; c < H; ++c) out[c] += w * ye[c];
  }
  return ok_status();
}

Status validate_sequence_input(const SequenceInput& in, int32_t s, const ModelShape& shape,
                               int64_t num_blocks, int32_t max_sequences) {
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  if (n <= 0) return invalid_argument("forward: sequence " + std::to_string(s) + " has no new tokens");
  if (in.start_position < 0) return invalid_argument("forward: negative start position");
  const int64_t end = in.start_position + n;
  if (end > shape.max_position) {
    return out_of_range("forward: position " + std::to_string(end - 1) + " is past the model's maximum of " +
                        std::to_string(shape.max_position))
        .with_reason("ContextTooLong");
  }
  if (static_cast<int64_t>(in.block_table.size()) < blocks_for_tokens(end)) {
    return invalid_argument("forward: sequence " + std::to_string(s) + "'s block table is too short");
  }
  for (int32_t b : in.block_table) {
    if (b < 0 || b >= num_blocks)
      return invalid_argument("forward: block id " + std::to_string(b) + " out of range");
  }
  if (in.slot < 0 || in.slot >= max_sequences) return invalid_argument("forward: slot out of range");
  for (int32_t id : in.tokens) {
    if (id < 0 || id >= shape.vocab) {
      return invalid_argument("forward: token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(shape.vocab))
          .with_reason("TokenOutOfRange");
    }
  }
  return ok_status();
}

Status CpuBackend::plan_step(std::span<const SequenceInput> batch, Step* st) {
  const int32_t S = static_cast<int32_t>(batch.size());
  st->batch = batch;
  st->q_start.assign(static_cast<size_t>(S) + 1, 0);
  st->kv_len.assign(static_cast<size_t>(S), 0);
  st->staging.assign(static_cast<size_t>(S), 0);
  st->max_pages = 1;
  st->rows_out = 0;
  for (int32_t s = 0; s < S; ++s) {
    const SequenceInput& in = batch[static_cast<size_t>(s)];
    INFERGATE_RETURN_IF_ERROR(validate_sequence_input(in, s, shape_, num_blocks_, max_sequences_));
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    const int64_t end = in.start_position + n;
    st->q_start[static_cast<size_t>(s) + 1] = st->q_start[static_cast<size_t>(s)] + static_cast<int32_t>(n);
    st->kv_len[static_cast<size_t>(s)] = static_cast<int32_t>(end);
    st->staging[static_cast<size_t>(s)] = in.slot;
    st->max_pages = std::max<int32_t>(st->max_pages, static_cast<int32_t>(blocks_for_tokens(end)));
    st->rows_out += in.logits == LogitsWanted::kAll ? n : in.logits == LogitsWanted::kLast ? 1 : 0;
  }
  const int64_t T = st->q_start[static_cast<size_t>(S)];
  st->tokens = T;
  st->ids.assign(static_cast<size_t>(T), 0);
  st->pos.assign(static_cast<size_t>(T), 0);
  st->page_ids.assign(static_cast<size_t>(T), 0);
  st->slots.assign(static_cast<size_t>(T), 0);
  st->tok_staging.assign(static_cast<size_t>(T), 0);
  st->table.assign(static_cast<size_t>(S) * static_cast<size_t>(st->max_pages), 0);
  for (int32_t s = 0; s < S; ++s) {
    const SequenceInput& in = batch[static_cast<size_t>(s)];
    for (int64_t i = 0; i < static_cast<int64_t>(in.tokens.size()); ++i) {
      const size_t r = static_cast<size_t>(st->q_start[static_cast<size_t>(s)] + i);
      const int64_t p = in.start_position + i;
      st->ids[r] = in.tokens[static_cast<size_t>(i)];
      st->pos[r] = static_cast<int32_t>(p);
      st->page_ids[r] = in.block_table[static_cast<size_t>(p / kBlockTokens)];
      st->slots[r] = static_cast<int32_t>(p % kBlockTokens);
      st->tok_staging[r] = in.slot;
    }
    const int64_t np = blocks_for_tokens(st->kv_len[static_cast<size_t>(s)]);
    for (int64_t i = 0; i < np; ++i) {
      st->table[static_cast<size_t>(s) * static_cast<size_t>(st->max_pages) + static_cast<size_t>(i)] =
          in.block_table[static_cast<size_t>(i)];
    }
  }
  k::AttentionBatch& ab = st->attention;
  ab.num_seqs = S;
  ab.num_q_heads = shape_.num_heads;
  ab.scale = attention_scale_;
  ab.q_start = st->q_start.data();
  ab.kv_len = st->kv_len.data();
  ab.block_table = st->table.data();
  ab.max_pages_per_seq = st->max_pages;
  ab.staging_ids = st->staging.data();
  return ok_status();
}

Status CpuBackend::gqa_attention(const Layer& L, int32_t layer, const Step& st) {
  const int64_t T = st.tokens, Hq = shape_.num_heads, Hk = shape_.num_kv_heads, D = shape_.head_dim;
  q_.resize(static_cast<size_t>(T * Hq * D));
  k_.resize(static_cast<size_t>(T * Hk * D));
  v_.resize(static_cast<size_t>(T * Hk * D));
  attn_.resize(static_cast<size_t>(T * Hq * D));
  INFERGATE_RETURN_IF_ERROR(linears(h_.data(), T, {{&L.q, q_.data()}, {&L.k, k_.data()}, {&L.v, v_.data()}}));
  if (!L.q_norm.empty()) {  // GLM-4.5: RMSNorm over each head of q and of k, before RoPE
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(q_.data(), T * Hq, D), L.q_norm.data(), eps_,
                           k::contiguous(q_.data(), T * Hq, D)),
             "q_norm");
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(k_.data(), T * Hk, D), L.k_norm.data(), eps_,
                           k::contiguous(k_.data(), T * Hk, D)),
             "k_norm");
  }
  ENGINE_K(ops_->rope(rope_, inv_freq_.data(), st.pos.data(), k::contiguous(q_.data(), T, Hq, D),
                      k::contiguous(k_.data(), T, Hk, D)),
           "rope");
  if (kv_spec_.dtype == KvCacheDtype::kF32) {
    INFERGATE_RETURN_IF_ERROR(
        kv_write_f32(layer, k_.data(), v_.data(), T, st.page_ids.data(), st.slots.data()));
    attention_f32(layer, st.batch, st.q_start, q_.data(), attn_.data());
  } else {
    k::KvAppend app;
    app.k = k::contiguous<const float>(k_.data(), T, Hk, D);
    app.v = k::contiguous<const float>(v_.data(), T, Hk, D);
    app.page_ids = st.page_ids.data();
    app.slots = st.slots.data();
    app.staging_ids = st.tok_staging.data();
    ENGINE_K(ops_->kv_append(caches_[static_cast<size_t>(layer)], app), "kv_append");
    ENGINE_K(ops_->attention(caches_[static_cast<size_t>(layer)], st.attention,
                             k::contiguous<const float>(q_.data(), T, Hq, D),
                             k::contiguous(attn_.data(), T, Hq, D)),
             "attention");
  }
  return linear(L.o, attn_.data(), T, h_.data());
}

Status CpuBackend::forward(std::span<const SequenceInput> batch, ForwardOutput* out) {
  if (caches_.empty() && latent_caches_.empty() && kv_pages_.empty())
    return failed_precondition("forward before allocate_kv");
  if (batch.empty()) return invalid_argument("forward: empty batch");
  const int64_t H = shape_.hidden;
  const int32_t S = static_cast<int32_t>(batch.size());
  INFERGATE_RETURN_IF_ERROR(plan_step(batch, &step_));
  const Step& st = step_;
  const int64_t T = st.tokens;
  // ---- workspaces ----
  const int64_t I = mlp_width_;
  x_.resize(static_cast<size_t>(T * H));
  mlp_out_.resize(static_cast<size_t>(T * H));
  h_.resize(static_cast<size_t>(T * H));
  mlp_.resize(static_cast<size_t>(T * 2 * I));
  act_.resize(static_cast<size_t>(T * I));

  ENGINE_K(ops_->embedding(embed_, st.ids.data(), T, k::contiguous(x_.data(), T, H)), "embedding");
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    const int32_t layer = static_cast<int32_t>(li);
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(x_.data(), T, H), L.input_norm.data(), eps_,
                           k::contiguous(h_.data(), T, H)),
             "input_layernorm");
    // h_ = the attention block's output (after o_proj)
    INFERGATE_RETURN_IF_ERROR(L.mla ? mla_attention(L, layer, st) : gqa_attention(L, layer, st));
    if (!L.post_self_attn_norm.empty()) {
      ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(h_.data(), T, H), L.post_self_attn_norm.data(), eps_,
                             k::contiguous(h_.data(), T, H)),
               "post_self_attn_layernorm");
    }
    ENGINE_K(ops_->add(k::contiguous<const float>(x_.data(), T, H),
                       k::contiguous<const float>(h_.data(), T, H), k::contiguous(x_.data(), T, H)),
             "residual");
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(x_.data(), T, H), L.post_attention_norm.data(), eps_,
                           k::contiguous(h_.data(), T, H)),
             "post_attention_layernorm");
    INFERGATE_RETURN_IF_ERROR(mlp(L, h_.data(), T, mlp_out_.data()));
    if (!L.post_mlp_norm.empty()) {
      ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(mlp_out_.data(), T, H), L.post_mlp_norm.data(), eps_,
                             k::contiguous(mlp_out_.data(), T, H)),
               "post_mlp_layernorm");
    }
    ENGINE_K(ops_->add(k::contiguous<const float>(x_.data(), T, H),
                       k::contiguous<const float>(mlp_out_.data(), T, H), k::contiguous(x_.data(), T, H)),
             "residual");
  }
  // ---- logits only where wanted ----
  out->vocab = shape_.vocab;
  out->row_start.assign(static_cast<size_t>(S) + 1, 0);
  std::vector<float> sel(static_cast<size_t>(st.rows_out * H));
  int64_t r = 0;
  for (int32_t s = 0; s < S; ++s) {
    const SequenceInput& in = batch[static_cast<size_t>(s)];
    out->row_start[static_cast<size_t>(s)] = r;
    const int64_t first = st.q_start[static_cast<size_t>(s)],
                  last = st.q_start[static_cast<size_t>(s) + 1] - 1;
    const int64_t from = in.logits == LogitsWanted::kAll ? first : last;
    if (in.logits == LogitsWanted::kNone) continue;
    for (int64_t t = from; t <= last; ++t, ++r) {
      std::memcpy(sel.data() + r * H, x_.data() + t * H, static_cast<size_t>(H) * 4);
    }
  }
  out->row_start[static_cast<size_t>(S)] = r;
  out->logits.resize(static_cast<size_t>(st.rows_out * shape_.vocab));
  if (st.rows_out > 0) {
    ENGINE_K(ops_->rmsnorm(k::contiguous<const float>(sel.data(), st.rows_out, H), final_norm_.data(), eps_,
                           k::contiguous(sel.data(), st.rows_out, H)),
             "norm");
    INFERGATE_RETURN_IF_ERROR(linear(lm_head_, sel.data(), st.rows_out, out->logits.data()));
  }
  return ok_status();
}

Result<std::unique_ptr<Backend>> make_cpu_backend(std::shared_ptr<const m::Model> model,
                                                  const CpuBackendOptions& options) {
  if (!model) return invalid_argument("make_cpu_backend: no model");
  auto b = std::make_unique<CpuBackend>(std::move(model), options);
  INFERGATE_RETURN_IF_ERROR(b->load());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace infergate::runtime::engine
