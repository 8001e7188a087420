// The plan: the memory model's parts added up against a GPU, the verdict, the limits at the
// requested context and concurrency, and the text and JSON renderings.
#include "infergate/runtime/planner/plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "infergate/common/fs.h"
#include "input_error.h"

namespace infergate::runtime::planner {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxConcurrency = int64_t{1} << 20;
constexpr int64_t kMaxContext = int64_t{1} << 26;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string num(int64_t v) { return std::to_string(v); }

// What the limits depend on, computed once per (model, formats, TP, GPU).
struct Parts {
  WeightBreakdown weights;
  KvModel kv;
  Reserves reserves;
  int64_t available = 0;
};

int64_t needed(const Parts& p, const model::ModelConfig& c, const WorkspaceOptions& wo, int64_t tp,
               int64_t concurrency, int64_t context) {
  return p.weights.total() + p.reserves.total() + activation_workspace(c, concurrency, wo, tp).total() +
         p.kv.bytes_for(concurrency, context);
}

// The most sequences of `context` tokens that fit (0 when not even one does).
int64_t max_concurrency(const Parts& p, const model::ModelConfig& c, const WorkspaceOptions& wo, int64_t tp,
                        int64_t context) {
  int64_t lo = 0, hi = kMaxConcurrency;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (needed(p, c, wo, tp, mid, context) <= p.available)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The longest context, in whole blocks, at which `concurrency` sequences fit (0 when none does).
int64_t max_context(const Parts& p, const model::ModelConfig& c, const WorkspaceOptions& wo, int64_t tp,
                    int64_t concurrency) {
  int64_t lo = 0, hi = kMaxContext / kBlockTokens;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (needed(p, c, wo, tp, concurrency, mid * kBlockTokens) <= p.available)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * kBlockTokens;
}

std::string scheme_text(const WeightOptions& w) {
  switch (w.format) {
    case WeightFormat::kF16: return "fp16";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8:
      return std::string("int8 per output channel, ") +
             (w.scale_dtype == model::DType::kBF16 ? "bf16" : "f16") + " scales";
    case WeightFormat::kInt4:
      return "int4 group " + num(w.group_size) + (w.symmetric ? " symmetric, " : " asymmetric, ") +
             (w.scale_dtype == model::DType::kBF16 ? "bf16" : "f16") + " scales";
  }
  return "";
}

TextbookEstimate textbook(const PlanInput& in) {
  const model::ModelConfig& c = in.config;
  TextbookEstimate t;
  t.layers = c.num_hidden_layers;
  t.kv_heads = c.num_key_value_heads;
  t.head_dim = c.head_dim;
  t.tokens = in.max_context_length;
  t.concurrency = in.max_concurrency;
  t.bytes_per_value = textbook_bytes_per_value(in.kv_cache_dtype);
  t.bytes = static_cast<double>(t.layers) * 2 * static_cast<double>(t.tokens) *
            static_cast<double>(t.kv_heads) * static_cast<double>(t.head_dim) * t.bytes_per_value *
            static_cast<double>(t.concurrency);
  t.applies = !c.mla;
  const std::string bytes = t.bytes_per_value == 1.0   ? "1 byte"
                            : t.bytes_per_value == 0.5 ? "0.5 bytes"
                                                       : fmt("%g bytes", t.bytes_per_value);
  t.line = "textbook KV estimate: " + num(t.layers) + " layers x 2 x " + num(t.tokens) + " tokens x " +
           num(t.kv_heads) + " kv_heads x " + num(t.head_dim) + " head_dim x " + bytes + " x " +
           num(t.concurrency) + " sequences = " + fmt("%.2f GB", t.bytes / 1e9) + " (" +
           format_bytes(static_cast<int64_t>(t.bytes)) + ")";
  if (!t.applies) {
    t.line += "; does not apply to multi-head latent attention, which caches kv_lora_rank " +
              num(c.mla->kv_lora_rank) + " + qk_rope_head_dim " + num(c.mla->qk_rope_head_dim) + " = " +
              num(c.mla->kv_lora_rank + c.mla->qk_rope_head_dim) +
              " values per token per layer (no heads, no factor 2)";
  }
  return t;
}

Status validate_input(const PlanInput& in) {
  if (in.max_context_length <= 0) {
    return input_error("max_context_length", "must be positive, got " + num(in.max_context_length));
  }
  if (in.max_context_length > kMaxContext) {
    return input_error("max_context_length",
                       num(in.max_context_length) + " is larger than " + num(kMaxContext));
  }
  if (in.max_concurrency <= 0) {
    return input_error("max_concurrency", "must be positive, got " + num(in.max_concurrency));
  }
  if (in.max_concurrency > kMaxConcurrency) {
    return input_error("max_concurrency",
                       num(in.max_concurrency) + " is larger than " + num(kMaxConcurrency));
  }
  if (in.workspace.prefill_chunk_tokens <= 0) {
    return input_error("prefill_chunk_tokens",
                       "must be positive, got " + num(in.workspace.prefill_chunk_tokens));
  }
  if (in.gpu.empty() == !in.gpu_memory_bytes.has_value()) {
    return input_error("gpu", in.gpu.empty() ? "give a GPU name or its memory size"
                                             : "give a GPU name or a memory size, not both");
  }
  if (in.gpu_memory_bytes && *in.gpu_memory_bytes <= 0) {
    return input_error("gpu_memory", "must be positive, got " + num(*in.gpu_memory_bytes));
  }
  return validate_tensor_parallel(in.config, in.tensor_parallel);
}

Result<GpuSpec> gpu_of(const PlanInput& in) {
  if (in.gpu_memory_bytes) {
    return GpuSpec{"custom", "a GPU", format_bytes(*in.gpu_memory_bytes), *in.gpu_memory_bytes, ""};
  }
  return find_gpu(in.gpu);
}

Result<Parts> parts(const PlanInput& in, int64_t usable) {
  Parts p;
  INFERGATE_ASSIGN_OR_RETURN(p.weights, weight_bytes(in.config, in.weights, in.tensor_parallel));
  INFERGATE_ASSIGN_OR_RETURN(p.kv, kv_model(in.config, in.kv_cache_dtype, in.tensor_parallel));
  INFERGATE_ASSIGN_OR_RETURN(p.reserves, reserves(in.reserves, usable, in.tensor_parallel));
  p.available = usable;
  return p;
}

// Fills the verdict and the limits from the parts.
void evaluate(Plan& pl, const Parts& p) {
  const PlanInput& in = pl.input;
  const model::ModelConfig& c = in.config;
  const int64_t tp = in.tensor_parallel;
  pl.weights = p.weights;
  pl.kv = p.kv;
  pl.reserves = p.reserves;
  pl.available_bytes = p.available;
  pl.workspace = activation_workspace(c, in.max_concurrency, in.workspace, tp);
  pl.kv_blocks_per_sequence = KvModel::blocks_for(in.max_context_length);
  pl.kv_blocks = pl.kv_blocks_per_sequence * in.max_concurrency;
  pl.kv_bytes = p.kv.bytes_for(in.max_concurrency, in.max_context_length);
  pl.total_bytes = pl.weights.total() + pl.kv_bytes + pl.workspace.total() + pl.reserves.total();
  pl.margin_bytes = pl.available_bytes - pl.total_bytes;
  pl.max_concurrency_at_context = max_concurrency(p, c, in.workspace, tp, in.max_context_length);
  const int64_t ctx = max_context(p, c, in.workspace, tp, in.max_concurrency);
  pl.max_context_capped_by_model = ctx > pl.model_max_context;
  pl.max_context_at_concurrency = std::min(ctx, pl.model_max_context);

  const int64_t fixed = pl.weights.total() + pl.workspace.total() + pl.reserves.total();
  if (in.max_context_length > pl.model_max_context) {
    pl.fits = false;
    pl.reason = kReasonContextTooLong;
  } else if (fixed > pl.available_bytes) {
    pl.fits = false;
    pl.reason = kReasonWeightsTooLarge;
  } else if (pl.margin_bytes < 0) {
    pl.fits = false;
    pl.reason = kReasonKvCacheTooLarge;
  } else {
    pl.fits = true;
    pl.reason = kReasonFits;
  }

  const std::string where = pl.gpu.name + (tp > 1 ? " x" + num(tp) : "");
  std::string m = pl.input.model_name + " " + std::string(weight_format_name(in.weights.format)) +
                  " weights, " + std::string(kv_cache_dtype_name(in.kv_cache_dtype)) + " KV, " +
                  num(in.max_concurrency) + " x " + num(in.max_context_length) + " tokens on " + where +
                  ": needs " + format_bytes(pl.total_bytes) + " of " + format_bytes(pl.available_bytes) +
                  " per GPU (weights " + format_bytes(pl.weights.total()) + ", KV " +
                  format_bytes(pl.kv_bytes) + ")";
  if (pl.reason == kReasonContextTooLong) {
    m += "; the context is longer than the model's " + num(pl.model_max_context) + " tokens";
  } else if (pl.fits) {
    m += "; fits with " + format_bytes(pl.margin_bytes) + " to spare";
  } else if (pl.reason == kReasonWeightsTooLarge) {
    m += "; weights, workspace and reserves alone exceed the GPU by " +
         format_bytes(fixed - pl.available_bytes);
  } else {
    m += "; short by " + format_bytes(-pl.margin_bytes);
  }
  m += "; at most " + num(pl.max_concurrency_at_context) + " sequences at " + num(in.max_context_length) +
       " tokens, at most " + num(pl.max_context_at_concurrency) + " tokens at " + num(in.max_concurrency) +
       " sequences";
  pl.message = m;
}

}  // namespace

Result<Plan> plan(const PlanInput& in) {
  INFERGATE_RETURN_IF_ERROR(validate_input(in));
  Plan pl;
  pl.input = in;
  if (pl.input.model_name.empty())
    pl.input.model_name = std::string(model::architecture_name(in.config.architecture));
  INFERGATE_ASSIGN_OR_RETURN(pl.gpu, gpu_of(in));
  pl.model_max_context = in.config.max_position_embeddings;
  pl.textbook = textbook(in);
  INFERGATE_ASSIGN_OR_RETURN(Parts p, parts(in, pl.gpu.usable_bytes));
  evaluate(pl, p);
  pl.model_parameters = p.weights.model_parameters;

  const model::ModelConfig& c = in.config;
  if (c.quantization && c.quantization->quant_method != "infergate") {
    pl.notes.push_back("the checkpoint is published as " + c.quantization->quant_method +
                       "; this plan is for " + std::string(weight_format_name(in.weights.format)) +
                       " weights, quantized from the original (bf16) release");
  }
  if (c.num_nextn_predict_layers > 0) {
    pl.notes.push_back(num(c.num_nextn_predict_layers) +
                       " multi-token-prediction layer(s) in the checkpoint are not loaded and not counted");
  }
  if (c.moe) {
    pl.notes.push_back("all " + num(c.moe->n_routed_experts) + " routed experts are resident (" +
                       num(c.moe->num_experts_per_tok) + " active per token)");
  }
  if (c.mla && in.tensor_parallel > 1) {
    pl.notes.push_back("the latent KV cache is replicated on every GPU under tensor parallelism");
  }
  if (!c.mla && in.tensor_parallel > c.num_key_value_heads) {
    pl.notes.push_back("more GPUs than KV heads: each GPU holds one KV head, replicated " +
                       num(in.tensor_parallel / c.num_key_value_heads) + " times");
  }
  return pl;
}

Json plan_json(const Plan& p) {
  const PlanInput& in = p.input;
  Json j;
  j["model"] = {{"name", in.model_name},
                {"architecture", std::string(model::architecture_name(in.config.architecture))},
                {"parameters", p.model_parameters},
                {"max_position_embeddings", p.model_max_context}};
  j["gpu"] = {{"name", p.gpu.name},
              {"product", p.gpu.product},
              {"marketed", p.gpu.marketed},
              {"memory_bytes", p.gpu.usable_bytes},
              {"count", in.tensor_parallel}};
  Json settings = {{"weight_format", std::string(weight_format_name(in.weights.format))},
                   {"kv_cache_dtype", std::string(kv_cache_dtype_name(in.kv_cache_dtype))},
                   {"max_context_length", in.max_context_length},
                   {"max_concurrency", in.max_concurrency},
                   {"tensor_parallel", in.tensor_parallel},
                   {"prefill_chunk_tokens", in.workspace.prefill_chunk_tokens}};
  if (in.weights.format == WeightFormat::kInt4) {
    settings["group_size"] = in.weights.group_size;
    settings["symmetric"] = in.weights.symmetric;
  }
  if (in.weights.format == WeightFormat::kInt4 || in.weights.format == WeightFormat::kInt8) {
    settings["scale_dtype"] = in.weights.scale_dtype == model::DType::kBF16 ? "bf16" : "f16";
    settings["quantize_lm_head"] = in.weights.quantize_lm_head;
  }
  j["settings"] = settings;
  j["textbook"] = {{"bytes", p.textbook.bytes}, {"applies", p.textbook.applies}, {"line", p.textbook.line}};
  j["kv_cache"] = {{"kind", std::string(cache_kind_name(p.kv.kind))},
                   {"layers", p.kv.layers},
                   {"kv_heads_per_gpu", p.kv.page.num_kv_heads},
                   {"head_dim", p.kv.page.head_dim},
                   {"values_per_token_per_layer", p.kv.values_per_token_per_layer},
                   {"block_tokens", kBlockTokens},
                   {"page_bytes", p.kv.page_bytes},
                   {"page_data_bytes", p.kv.page_data_bytes},
                   {"page_param_bytes", p.kv.page_param_bytes},
                   {"block_bytes", p.kv.block_bytes()},
                   {"bytes_per_token", p.kv.bytes_per_token()},
                   {"staging_bytes_per_sequence", p.kv.staging_bytes()},
                   {"blocks_per_sequence", p.kv_blocks_per_sequence},
                   {"blocks", p.kv_blocks},
                   {"bytes", p.kv_bytes}};
  const WeightBreakdown& w = p.weights;
  j["weights"] = {{"bytes", w.total()},
                  {"parameters", w.parameters},
                  {"packed", w.packed},
                  {"scales", w.scales},
                  {"zeros", w.zeros},
                  {"dense", w.dense},
                  {"embeddings", w.embeddings},
                  {"lm_head", w.lm_head},
                  {"attention", w.attention},
                  {"mlp", w.mlp},
                  {"experts", w.experts},
                  {"router", w.router},
                  {"norms", w.norms},
                  {"tensors", w.tensors},
                  {"tensors_compressed", w.tensors_compressed}};
  j["workspace"] = {{"bytes", p.workspace.total()},
                    {"activations", p.workspace.activations},
                    {"logits", p.workspace.logits},
                    {"step_tokens", p.workspace.step_tokens},
                    {"floats_per_token", p.workspace.floats_per_token}};
  j["reserves"] = {{"bytes", p.reserves.total()},
                   {"cuda_context", p.reserves.cuda_context},
                   {"cuda_graphs", p.reserves.cuda_graphs},
                   {"nccl", p.reserves.nccl},
                   {"fragmentation", p.reserves.fragmentation},
                   {"fragmentation_fraction", p.reserves.fragmentation_fraction}};
  j["total_bytes"] = p.total_bytes;
  j["available_bytes"] = p.available_bytes;
  j["margin_bytes"] = p.margin_bytes;
  j["fits"] = p.fits;
  j["reason"] = p.reason;
  j["message"] = p.message;
  j["max_concurrency_at_context"] = p.max_concurrency_at_context;
  j["max_context_at_concurrency"] = p.max_context_at_concurrency;
  j["max_context_capped_by_model"] = p.max_context_capped_by_model;
  j["notes"] = p.notes;
  return j;
}

std::string plan_text(const Plan& p) {
  const PlanInput& in = p.input;
  const model::ModelConfig& c = in.config;
  const int64_t tp = in.tensor_parallel;
  std::ostringstream o;
  o << p.textbook.line << "\n";
  o << "plan: " << in.model_name << " (" << model::architecture_name(c.architecture) << ", "
    << fmt("%.2fB", static_cast<double>(p.model_parameters) / 1e9) << " parameters) on " << p.gpu.name;
  if (p.gpu.name != "custom")
    o << " (" << p.gpu.product << ", " << p.gpu.marketed << " marketed";
  else
    o << " (";
  o << (p.gpu.name != "custom" ? ", " : "") << format_bytes(p.gpu.usable_bytes) << " usable)";
  if (tp > 1) o << " x" << tp << " with tensor parallelism; figures per GPU";
  o << "\n";
  const KvModel& kv = p.kv;
  const std::string scales_word = kv.page_param_bytes > 0 ? " + scales " + num(kv.page_param_bytes) : "";
  auto row = [&](const char* label, int64_t bytes, const std::string& detail) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %-10s %11s  ", label, format_bytes(bytes).c_str());
    o << buf << detail << "\n";
  };
  std::string kv_detail =
      std::string(kv_cache_dtype_name(in.kv_cache_dtype)) + " " + std::string(cache_kind_name(kv.kind)) +
      " pages: " + num(kv.page_bytes) + " B per " + num(kBlockTokens) + "-token block per layer (data " +
      num(kv.page_data_bytes) + scales_word + ") x " + num(kv.layers) +
      " layers = " + format_bytes(kv.block_bytes()) + " per block, " + fmt("%.0f", kv.bytes_per_token()) +
      " B per token; " + num(p.kv_blocks_per_sequence) + " blocks per sequence x " + num(in.max_concurrency) +
      " sequences";
  if (kv.staging_bytes() > 0) {
    kv_detail += " + int4-kivi key staging " + format_bytes(kv.staging_bytes()) + " per sequence";
  }
  row("KV cache", p.kv_bytes, kv_detail);
  const WeightBreakdown& w = p.weights;
  std::string wd = scheme_text(in.weights);
  if (w.tensors_compressed > 0) {
    wd += ": packed " + format_bytes(w.packed) + " + scales " + format_bytes(w.scales) +
          (w.zeros > 0 ? " + zero points " + format_bytes(w.zeros) : "") + " + uncompressed " +
          format_bytes(w.dense);
  }
  wd += " (embeddings " + format_bytes(w.embeddings) + ", lm_head " + format_bytes(w.lm_head) +
        ", attention " + format_bytes(w.attention) + ", " +
        (c.moe ? "experts " + format_bytes(w.experts) + ", dense MLP " : "MLP ") + format_bytes(w.mlp) +
        ", norms " + format_bytes(w.norms) + (c.moe ? ", router " + format_bytes(w.router) : "") + ")";
  row("weights", w.total(), wd);
  row("workspace", p.workspace.total(),
      "fp32 activations of " + num(p.workspace.step_tokens) + " tokens x " +
          num(p.workspace.floats_per_token) + " floats + logits " + num(in.max_concurrency) + " x " +
          num(c.vocab_size));
  row("reserves", p.reserves.total(),
      "CUDA context " + format_bytes(p.reserves.cuda_context) + " + CUDA graphs " +
          format_bytes(p.reserves.cuda_graphs) + " + NCCL " + format_bytes(p.reserves.nccl) +
          " + fragmentation " + fmt("%g%%", p.reserves.fragmentation_fraction * 100) + " " +
          format_bytes(p.reserves.fragmentation));
  row("total", p.total_bytes, "of " + format_bytes(p.available_bytes) + " per GPU");
  const double pct = 100.0 * static_cast<double>(p.margin_bytes) / static_cast<double>(p.available_bytes);
  if (p.fits) {
    o << "verdict: fits, " << format_bytes(p.margin_bytes) << " (" << fmt("%.1f", pct) << "%) to spare\n";
  } else if (p.reason == kReasonContextTooLong) {
    o << "verdict: does not fit (" << p.reason << "): " << in.max_context_length
      << " tokens is longer than the model's max_position_embeddings " << p.model_max_context << "\n";
  } else {
    o << "verdict: does not fit (" << p.reason << "), short by " << format_bytes(-p.margin_bytes) << "\n";
  }
  o << "max concurrency at " << in.max_context_length << " tokens: " << p.max_concurrency_at_context
    << " sequences\n";
  o << "max context at " << in.max_concurrency << " sequences: " << p.max_context_at_concurrency << " tokens";
  if (p.max_context_capped_by_model) o << " (the model's limit; memory would allow more)";
  o << "\n";
  for (const std::string& n : p.notes) o << "note: " << n << "\n";
  return o.str();
}

Result<LoadedModel> load_model(const fs::path& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path file = is_dir ? path / "config.json" : path;
  INFERGATE_ASSIGN_OR_RETURN(std::string text, read_file(file, 16u << 20));
  INFERGATE_ASSIGN_OR_RETURN(Json j, parse_json(text, file.string()));
  LoadedModel m;
  INFERGATE_ASSIGN_OR_RETURN(m.config, model::model_config_from_json(j, file.string()));
  INFERGATE_ASSIGN_OR_RETURN(m.weights, weight_options_from_config(m.config));
  if (m.weights) {
    // `quantize` lists what it left uncompressed; lm_head missing from that list was compressed.
    bool lm_head_kept = true;
    auto qc = j.find("quantization_config");
    if (qc != j.end() && qc->is_object()) {
      auto keep = qc->find("modules_not_to_convert");
      if (keep != qc->end() && keep->is_array()) {
        lm_head_kept = std::find(keep->begin(), keep->end(), Json("lm_head.weight")) != keep->end();
      }
    }
    m.weights->quantize_lm_head = !lm_head_kept && !m.config.tie_word_embeddings;
  }
  m.name = is_dir ? path.filename().string() : path.stem().string();
  if (m.name.empty() || m.name == "config") m.name = (is_dir ? path : path.parent_path()).filename().string();
  if (m.name.empty()) m.name = std::string(model::architecture_name(m.config.architecture));
  return m;
}

Result<std::string> fit_table_markdown(const std::vector<LoadedModel>& models, int64_t context,
                                       int64_t concurrency) {
  const WeightFormat formats[] = {WeightFormat::kF16, WeightFormat::kInt8, WeightFormat::kInt4};
  const kernels::KvDtype dtypes[] = {kernels::KvDtype::kF16, kernels::KvDtype::kFp8E4M3,
                                     kernels::KvDtype::kInt8, kernels::KvDtype::kInt4};
  const int64_t tps[] = {1, 2, 4, 8};
  std::ostringstream o;
  o << "| model | context | weights | KV | ";
  for (const GpuSpec& g : gpu_catalog()) o << g.name << " | ";
  o << "\n|---|---|---|---|";
  for (size_t i = 0; i < gpu_catalog().size(); ++i) o << "---|";
  o << "\n";
  for (const LoadedModel& m : models) {
    // Weights depend on (format, TP) only, KV on (dtype, TP) only: compute each once.
    std::map<std::pair<int, int64_t>, WeightBreakdown> weights;
    std::map<std::pair<int, int64_t>, KvModel> kvs;
    // A model shorter than `context` is shown at its own limit.
    const int64_t ctx = std::min(context, m.config.max_position_embeddings);
    for (WeightFormat f : formats) {
      for (kernels::KvDtype d : dtypes) {
        o << "| " << m.name << " | " << ctx << " | " << weight_format_name(f) << " | "
          << kv_cache_dtype_name(d) << " | ";
        for (const GpuSpec& g : gpu_catalog()) {
          std::string cell = "no";
          for (int64_t tp : tps) {
            if (!validate_tensor_parallel(m.config, tp).ok()) continue;
            PlanInput in;
            in.config = m.config;
            in.model_name = m.name;
            in.gpu = g.name;
            in.weights.format = f;
            in.kv_cache_dtype = d;
            in.max_context_length = ctx;
            in.max_concurrency = concurrency;
            in.tensor_parallel = tp;
            Parts p;
            auto wk = std::make_pair(static_cast<int>(f), tp);
            if (!weights.count(wk)) {
              INFERGATE_ASSIGN_OR_RETURN(weights[wk], weight_bytes(m.config, in.weights, tp));
            }
            auto kk = std::make_pair(static_cast<int>(d), tp);
            if (!kvs.count(kk)) {
              INFERGATE_ASSIGN_OR_RETURN(kvs[kk], kv_model(m.config, d, tp));
            }
            p.weights = weights[wk];
            p.kv = kvs[kk];
            INFERGATE_ASSIGN_OR_RETURN(p.reserves, reserves(in.reserves, g.usable_bytes, tp));
            p.available = g.usable_bytes;
            Plan pl;
            pl.input = in;
            pl.gpu = g;
            pl.model_max_context = m.config.max_position_embeddings;
            evaluate(pl, p);
            if (pl.fits) {
              cell = (tp == 1 ? "1 GPU" : num(tp) + " GPUs") + ", " + num(pl.max_concurrency_at_context);
              break;
            }
          }
          o << cell << " | ";
        }
        o << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace infergate::runtime::planner
