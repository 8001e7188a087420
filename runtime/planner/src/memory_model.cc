// The memory model: KV pages through the kernels' page functions, weights through the kernels'
// weight formats and the quantizer's rule, per GPU under tensor parallelism.
#include "infergate/runtime/planner/memory_model.h"

#include <algorithm>
#include <string>

#include "infergate/runtime/model/quant_scheme.h"
#include "input_error.h"

namespace infergate::runtime::planner {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// KV heads one GPU holds: kv / T, or one (replicated) when T is a multiple of kv.
int64_t kv_heads_per_gpu(const model::ModelConfig& c, int64_t tp) {
  return c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
}

bool has_dense_mlp_layer(const model::ModelConfig& c) {
  if (!c.moe) return true;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (!c.moe->is_moe_layer(i)) return true;
  }
  return false;
}

// Where a tensor goes and how it splits, from its checkpoint name.
struct Placement {
  Split split;
  TensorRole role;
};

Placement place(std::string_view name) {
  if (name == "model.embed_tokens.weight") return {Split::kRows, TensorRole::kEmbedding};
  if (name == "lm_head.weight") return {Split::kRows, TensorRole::kLmHead};
  if (ends_with(name, "norm.weight")) return {Split::kReplicated, TensorRole::kNorm};
  if (contains(name, ".mlp.gate.")) return {Split::kReplicated, TensorRole::kRouter};
  const bool bias = ends_with(name, ".bias");
  if (contains(name, ".self_attn.")) {
    if (contains(name, ".q_a_proj.") || contains(name, ".kv_a_proj_with_mqa.")) {
      return {Split::kReplicated, TensorRole::kAttention};
    }
    if (contains(name, ".o_proj.")) return {bias ? Split::kReplicated : Split::kCols, TensorRole::kAttention};
    return {Split::kRows, TensorRole::kAttention};  // q/k/v, q_proj, q_b_proj, kv_b_proj
  }
  const TensorRole role = contains(name, ".mlp.experts.") || contains(name, ".mlp.shared_experts.")
                              ? TensorRole::kExperts
                              : TensorRole::kMlp;
  if (contains(name, ".down_proj.")) return {bias ? Split::kReplicated : Split::kCols, role};
  return {Split::kRows, role};  // gate_proj, up_proj, gate_up_proj
}

}  // namespace

// ---- formats ----

Result<WeightFormat> parse_weight_format(std::string_view n) {
  if (n == "fp16" || n == "f16" || n == "float16") return WeightFormat::kF16;
  if (n == "bf16" || n == "bfloat16") return WeightFormat::kBF16;
  if (n == "int8") return WeightFormat::kInt8;
  if (n == "int4") return WeightFormat::kInt4;
  return input_error("weight_format",
                     "unknown weight format '" + std::string(n) + "' (fp16, bf16, int8, int4)");
}

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF16: return "fp16";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
  }
  return "fp16";
}

Result<kernels::KvDtype> parse_kv_dtype(std::string_view n) {
  using kernels::KvDtype;
  if (n == "fp16" || n == "f16" || n == "float16") return KvDtype::kF16;
  if (n == "bf16" || n == "bfloat16") return KvDtype::kBF16;
  if (n == "fp8" || n == "fp8-e4m3" || n == "fp8_e4m3") return KvDtype::kFp8E4M3;
  if (n == "int8") return KvDtype::kInt8;
  if (n == "int4") return KvDtype::kInt4;
  if (n == "int4-kivi" || n == "int4_kivi") return KvDtype::kInt4Kivi;
  return input_error("kv_cache_dtype", "unknown KV cache dtype '" + std::string(n) +
                                           "' (fp16, bf16, fp8, int8, int4, int4-kivi)");
}

std::string_view kv_cache_dtype_name(kernels::KvDtype d) {
  using kernels::KvDtype;
  switch (d) {
    case KvDtype::kF16: return "fp16";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFp8E4M3: return "fp8";
    case KvDtype::kInt8: return "int8";
    case KvDtype::kInt4: return "int4";
    case KvDtype::kInt4Kivi: return "int4-kivi";
  }
  return "fp16";
}

double textbook_bytes_per_value(kernels::KvDtype d) {
  using kernels::KvDtype;
  switch (d) {
    case KvDtype::kF16:
    case KvDtype::kBF16: return 2.0;
    case KvDtype::kFp8E4M3:
    case KvDtype::kInt8: return 1.0;
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: return 0.5;
  }
  return 2.0;
}

Result<model::QuantScheme> quant_scheme(const WeightOptions& w) {
  if (w.format != WeightFormat::kInt8 && w.format != WeightFormat::kInt4) {
    return input_error("weight_format",
                       std::string(weight_format_name(w.format)) + " is not a compressed format");
  }
  model::QuantScheme s;
  s.format = w.format == WeightFormat::kInt8 ? model::WeightFormat::kInt8 : model::WeightFormat::kInt4;
  s.group_size = w.format == WeightFormat::kInt4 ? w.group_size : 0;
  s.symmetric = w.format == WeightFormat::kInt8 ? true : w.symmetric;
  s.scale_dtype = w.scale_dtype;
  if (w.format == WeightFormat::kInt4 &&
      std::find(std::begin(kernels::kInt4GroupSizes), std::end(kernels::kInt4GroupSizes), w.group_size) ==
          std::end(kernels::kInt4GroupSizes)) {
    return input_error("group_size",
                       "int4 group size must be 32, 64 or 128, got " + std::to_string(w.group_size));
  }
  Status st = model::validate_scheme(s);
  if (!st.ok()) return input_error("weight_format", st.error().message());
  return s;
}

Result<std::optional<WeightOptions>> weight_options_from_config(const model::ModelConfig& c) {
  if (!c.quantization || c.quantization->quant_method != "infergate") return std::optional<WeightOptions>();
  const model::QuantizationConfig& q = *c.quantization;
  WeightOptions w;
  w.format = q.weight_format == "int8" ? WeightFormat::kInt8 : WeightFormat::kInt4;
  w.group_size = q.group_size;
  w.symmetric = q.symmetric;
  w.scale_dtype = q.scale_dtype == "bfloat16" ? model::DType::kBF16 : model::DType::kF16;
  auto scheme = quant_scheme(w);
  if (!scheme.ok()) return Error(scheme.error()).context("config.json: quantization_config");
  return std::optional<WeightOptions>(w);
}

// ---- tensor parallelism ----

std::string_view split_name(Split s) {
  switch (s) {
    case Split::kReplicated: return "replicated";
    case Split::kRows: return "rows";
    case Split::kCols: return "cols";
  }
  return "replicated";
}

std::string_view tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::kEmbedding: return "embeddings";
    case TensorRole::kLmHead: return "lm_head";
    case TensorRole::kAttention: return "attention";
    case TensorRole::kMlp: return "mlp";
    case TensorRole::kExperts: return "experts";
    case TensorRole::kRouter: return "router";
    case TensorRole::kNorm: return "norms";
  }
  return "norms";
}

Status validate_tensor_parallel(const model::ModelConfig& c, int64_t tp) {
  const std::string field = "tensor_parallel";
  if (tp < 1) return input_error(field, "must be at least 1, got " + std::to_string(tp));
  if (tp > 1024)
    return input_error(field, std::to_string(tp) + " GPUs is more than the planner supports (1024)");
  auto need = [&](int64_t value, std::string_view what) -> Status {
    if (value % tp != 0) {
      return input_error(field, std::to_string(tp) + " does not divide " + std::string(what) + " (" +
                                    std::to_string(value) + ")");
    }
    return ok_status();
  };
  INFERGATE_RETURN_IF_ERROR(need(c.num_attention_heads, "num_attention_heads"));
  if (!c.mla && c.num_key_value_heads % tp != 0 && tp % c.num_key_value_heads != 0) {
    return input_error(field, std::to_string(tp) +
                                  " neither divides nor is a multiple of num_key_value_heads (" +
                                  std::to_string(c.num_key_value_heads) + ")");
  }
  if (has_dense_mlp_layer(c)) INFERGATE_RETURN_IF_ERROR(need(c.intermediate_size, "intermediate_size"));
  if (c.moe) INFERGATE_RETURN_IF_ERROR(need(c.moe->moe_intermediate_size, "moe_intermediate_size"));
  return ok_status();
}

Result<std::vector<ShardedTensor>> shard_tensors(const model::ModelConfig& c, int64_t tp) {
  INFERGATE_RETURN_IF_ERROR(validate_tensor_parallel(c, tp));
  std::vector<ShardedTensor> out;
  const uint64_t t = static_cast<uint64_t>(tp);
  const uint64_t kv_rows = static_cast<uint64_t>(kv_heads_per_gpu(c, tp) * c.head_dim);
  for (model::ExpectedTensor& e : model::expected_tensors(c)) {
    const Placement p = place(e.name);
    ShardedTensor s;
    s.shard_shape = e.shape;
    s.split = tp == 1 ? Split::kReplicated : p.split;
    s.role = p.role;
    if (s.split == Split::kRows) {
      const bool kv = !c.mla && (contains(e.name, ".k_proj.") || contains(e.name, ".v_proj."));
      s.shard_shape[0] = kv ? kv_rows : ceil_div(e.shape[0], t);
    } else if (s.split == Split::kCols && e.shape.size() == 2) {
      s.shard_shape[1] = ceil_div(e.shape[1], t);
    }
    s.name = std::move(e.name);
    s.shape = std::move(e.shape);
    out.push_back(std::move(s));
  }
  return out;
}

// ---- KV cache ----

std::string_view cache_kind_name(CacheKind k) { return k == CacheKind::kLatent ? "latent" : "grouped-query"; }

Result<KvModel> kv_model(const model::ModelConfig& c, kernels::KvDtype dtype, int64_t tp) {
  INFERGATE_RETURN_IF_ERROR(validate_tensor_parallel(c, tp));
  KvModel m;
  m.layers = c.num_hidden_layers;
  m.page.dtype = dtype;
  m.page.page_size = kBlockTokens;
  if (c.mla) {
    m.kind = CacheKind::kLatent;
    m.page = kernels::kv_latent_layout(dtype, kBlockTokens, static_cast<int32_t>(c.mla->kv_lora_rank),
                                       static_cast<int32_t>(c.mla->qk_rope_head_dim));
  } else {
    m.kind = CacheKind::kGroupedQuery;
    m.page.num_kv_heads = static_cast<int32_t>(kv_heads_per_gpu(c, tp));
    m.page.head_dim = static_cast<int32_t>(c.head_dim);
  }
  kernels::Status st = kernels::validate_kv_layout(m.page);
  if (!st.ok()) {
    return input_error(c.mla ? "kv_lora_rank" : "head_dim",
                       "the KV cache cannot hold this shape: " + st.message());
  }
  const kernels::KvPageRegions r = kernels::kv_page_regions(m.page);
  if (m.kind == CacheKind::kLatent) {
    // One row per token: the K half of the page (its data region, then its parameter region).
    m.page_data_bytes = r.v_data - r.k_data;
    m.page_param_bytes = r.v_params - r.k_params;
    m.page_bytes = m.page_data_bytes + m.page_param_bytes;
    m.values_per_token_per_layer = m.page.head_dim;
  } else {
    m.page_bytes = kernels::kv_page_bytes(m.page);
    m.page_data_bytes = r.k_params - r.k_data;
    m.page_param_bytes = r.bytes - r.k_params;
    m.values_per_token_per_layer = int64_t{2} * m.page.num_kv_heads * m.page.head_dim;
  }
  m.staging_bytes_per_layer = kernels::kv_staging_bytes(m.page);
  return m;
}

// ---- weights ----

Result<WeightBreakdown> weight_bytes(const model::ModelConfig& c, const WeightOptions& w, int64_t tp) {
  const bool compressed = w.format == WeightFormat::kInt8 || w.format == WeightFormat::kInt4;
  model::QuantScheme scheme;
  if (compressed) {
    INFERGATE_ASSIGN_OR_RETURN(scheme, quant_scheme(w));
  }
  const model::DType source = w.source_dtype ? *w.source_dtype : c.torch_dtype.value_or(model::DType::kBF16);
  const int64_t source_size = static_cast<int64_t>(model::dtype_size(source));
  // The dtype 2-D dense weights are held in: the requested one for fp16/bf16; for int8/int4 the
  // checkpoint's (fp32 becomes fp16).
  const model::DType dense_dtype = w.format == WeightFormat::kF16    ? model::DType::kF16
                                   : w.format == WeightFormat::kBF16 ? model::DType::kBF16
                                   : source == model::DType::kF32    ? model::DType::kF16
                                                                     : source;
  INFERGATE_ASSIGN_OR_RETURN(std::vector<ShardedTensor> tensors, shard_tensors(c, tp));
  WeightBreakdown b;
  for (const ShardedTensor& t : tensors) {
    int64_t elements = 1;
    for (uint64_t d : t.shard_shape) elements *= static_cast<int64_t>(d);
    int64_t bytes = 0;
    if (t.shard_shape.size() == 1) {
      bytes = elements * 4;  // norms and biases: fp32, as the kernels' rmsnorm and bias_add take them
      b.dense += bytes;
    } else if (t.role == TensorRole::kEmbedding) {
      bytes = elements * source_size;  // looked up in the checkpoint's dtype, never converted
      b.dense += bytes;
      if (c.tie_word_embeddings && dense_dtype != source) {
        // The tied lm_head needs its own copy in the dense dtype.
        const int64_t copy = elements * 2;
        b.dense += copy;
        b.lm_head += copy;
      }
    } else if (compressed && model::quantizer_compresses({t.name, t.shape}, w.quantize_lm_head)) {
      const kernels::WeightBytes wb = kernels::weight_bytes(model::kernel_layout(
          scheme, static_cast<int64_t>(t.shard_shape[0]), static_cast<int64_t>(t.shard_shape[1])));
      b.packed += wb.data;
      b.scales += wb.scales;
      b.zeros += wb.zeros;
      bytes = wb.total();
      ++b.tensors_compressed;
    } else {
      bytes = elements * static_cast<int64_t>(model::dtype_size(dense_dtype));
      b.dense += bytes;
    }
    b.parameters += elements;
    int64_t full = 1;
    for (uint64_t d : t.shape) full *= static_cast<int64_t>(d);
    b.model_parameters += full;
    ++b.tensors;
    switch (t.role) {
      case TensorRole::kEmbedding: b.embeddings += bytes; break;
      case TensorRole::kLmHead: b.lm_head += bytes; break;
      case TensorRole::kAttention: b.attention += bytes; break;
      case TensorRole::kMlp: b.mlp += bytes; break;
      case TensorRole::kExperts: b.experts += bytes; break;
      case TensorRole::kRouter: b.router += bytes; break;
      case TensorRole::kNorm: b.norms += bytes; break;
    }
  }
  return b;
}

// ---- workspace ----

Workspace activation_workspace(const model::ModelConfig& c, int64_t concurrency, const WorkspaceOptions& o,
                               int64_t tp) {
  const int64_t H = c.hidden_size, A = c.num_attention_heads / std::max<int64_t>(tp, 1);
  int64_t attn = 0;
  if (c.mla) {
    const model::MlaConfig& m = *c.mla;
    // q (and its low-rank input), q absorbed into the latent space, the latent row, the output.
    attn = m.q_lora_rank + A * (m.qk_nope_head_dim + m.qk_rope_head_dim) + A * m.kv_lora_rank +
           (m.kv_lora_rank + m.qk_rope_head_dim) + A * m.v_head_dim;
  } else {
    attn = 2 * A * c.head_dim + 2 * kv_heads_per_gpu(c, tp) * c.head_dim;
  }
  int64_t mlp = 0;
  if (has_dense_mlp_layer(c)) mlp = 3 * c.intermediate_size / std::max<int64_t>(tp, 1);
  if (c.moe) {
    const model::MoeConfig& m = *c.moe;
    const int64_t per_expert = 3 * m.moe_intermediate_size / std::max<int64_t>(tp, 1);
    mlp = std::max(mlp, (m.num_experts_per_tok + m.n_shared_experts) * per_expert + m.n_routed_experts);
  }
  Workspace w;
  w.step_tokens = std::max(o.prefill_chunk_tokens, concurrency);
  w.floats_per_token = 3 * H + attn + mlp;
  w.activations = w.step_tokens * w.floats_per_token * 4;
  w.logits = concurrency * c.vocab_size * 4;
  return w;
}

// ---- reserves ----

Result<Reserves> reserves(const ReserveOptions& o, int64_t gpu_memory_bytes, int64_t tp) {
  Reserves r;
  auto size = [](std::optional<int64_t> v, int64_t fallback, const char* field) -> Result<int64_t> {
    if (!v) return fallback;
    if (*v < 0) return input_error(field, "must not be negative, got " + std::to_string(*v));
    return *v;
  };
  INFERGATE_ASSIGN_OR_RETURN(r.cuda_context,
                             size(o.cuda_context, kDefaultCudaContextReserve, "cuda_context_reserve"));
  INFERGATE_ASSIGN_OR_RETURN(r.cuda_graphs,
                             size(o.cuda_graphs, kDefaultCudaGraphReserve, "cuda_graph_reserve"));
  INFERGATE_ASSIGN_OR_RETURN(r.nccl, size(o.nccl, tp > 1 ? kDefaultNcclReserve : 0, "nccl_reserve"));
  r.fragmentation_fraction = o.fragmentation_fraction.value_or(kDefaultFragmentationFraction);
  if (!(r.fragmentation_fraction >= 0 && r.fragmentation_fraction < 0.5)) {
    return input_error("fragmentation_reserve",
                       "must be a fraction in [0, 0.5), got " + std::to_string(r.fragmentation_fraction));
  }
  r.fragmentation = static_cast<int64_t>(r.fragmentation_fraction * static_cast<double>(gpu_memory_bytes));
  return r;
}

}  // namespace infergate::runtime::planner
