// Opening a model directory and handing out typed views of its tensors.
#include "infergate/runtime/model/model.h"

#include <algorithm>
#include <set>

#include "infergate/common/json.h"
#include "infergate/common/log.h"

namespace infergate::runtime::model {
namespace {

constexpr size_t kMaxConfigBytes = 16u << 20;
constexpr size_t kMaxTokenizerBytes = 256u << 20;
constexpr size_t kMaxRecordBytes = 64u << 20;

std::string shape_string(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Error tensor_error(std::string_view reason, std::string_view tensor, std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), std::string(reason))
      .with_detail("tensor", std::string(tensor));
}

Result<DType> parse_scale_dtype(std::string_view s, std::string_view field) {
  if (s == "float16") return DType::kF16;
  if (s == "bfloat16") return DType::kBF16;
  return invalid_argument(std::string(field) + ": expected float16 or bfloat16");
}

}  // namespace

Result<kernels::WeightView> kernel_weight_view(const WeightView& w) {
  kernels::WeightView k;
  if (w.format == WeightFormat::kDense) {
    if (w.dense.dtype != DType::kF16 && w.dense.dtype != DType::kBF16) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(w.dense.name) + ": " + std::string(dtype_name(w.dense.dtype)) +
                       " weights have no kernels format (F16 or BF16)",
                   "UnsupportedWeightDtype")
          .with_detail("tensor", std::string(w.dense.name));
    }
    k.layout.format =
        w.dense.dtype == DType::kF16 ? kernels::WeightFormat::kF16 : kernels::WeightFormat::kBF16;
    k.layout.rows = static_cast<int64_t>(w.rows);
    k.layout.cols = static_cast<int64_t>(w.cols);
    k.data = w.dense.data;
    return k;
  }
  k.layout = kernel_layout(w.scheme, static_cast<int64_t>(w.rows), static_cast<int64_t>(w.cols));
  k.data = w.qweight.data;
  k.scales = w.scales.data;
  k.zeros = w.zeros.data;
  return k;
}

uint64_t TensorView::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool TensorView::aligned() const { return reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0; }

Result<GenerationConfig> parse_generation_config(std::string_view text, std::string_view file) {
  auto parsed = parse_json(text, file);
  if (!parsed.ok()) return Error(std::move(parsed).error()).with_reason("InvalidConfig");
  const Json& j = *parsed;
  GenerationConfig g;
  if (!j.is_object())
    return Error(ErrorCode::kInvalidArgument, std::string(file) + ": expected an object", "InvalidConfig");
  auto bad = [&](std::string_view key, std::string what) {
    return Error(ErrorCode::kInvalidArgument, std::string(file) + ": " + std::string(key) + ": " + what,
                 "InvalidConfig")
        .with_detail("field", std::string(key));
  };
  auto present = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (present("bos_token_id")) {
    if (!j["bos_token_id"].is_number_integer()) return bad("bos_token_id", "expected a token id");
    g.bos_token_id = j["bos_token_id"].get<int64_t>();
  }
  if (present("pad_token_id")) {
    if (!j["pad_token_id"].is_number_integer()) return bad("pad_token_id", "expected a token id");
    g.pad_token_id = j["pad_token_id"].get<int64_t>();
  }
  if (present("eos_token_id")) {
    const Json& e = j["eos_token_id"];
    if (e.is_number_integer()) {
      g.eos_token_ids.push_back(e.get<int64_t>());
    } else if (e.is_array()) {
      for (const Json& x : e) {
        if (!x.is_number_integer()) return bad("eos_token_id", "expected token ids");
        g.eos_token_ids.push_back(x.get<int64_t>());
      }
    } else {
      return bad("eos_token_id", "expected a token id or a list of them");
    }
  }
  if (present("do_sample")) {
    if (!j["do_sample"].is_boolean()) return bad("do_sample", "expected true or false");
    g.do_sample = j["do_sample"].get<bool>();
  }
  for (auto [key, out] : {std::pair{"temperature", &g.temperature}, std::pair{"top_p", &g.top_p},
                          std::pair{"repetition_penalty", &g.repetition_penalty}}) {
    if (present(key)) {
      if (!j[key].is_number() || j[key].get<double>() < 0) return bad(key, "expected a non-negative number");
      *out = j[key].get<double>();
    }
  }
  for (auto [key, out] : {std::pair{"top_k", &g.top_k}, std::pair{"max_new_tokens", &g.max_new_tokens}}) {
    if (present(key)) {
      if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0)
        return bad(key, "expected a non-negative integer");
      *out = j[key].get<int64_t>();
    }
  }
  return g;
}

Result<QuantizationRecord> parse_quantization_record(std::string_view text, std::string_view file) {
  auto parsed = parse_json(text, file);
  if (!parsed.ok()) return Error(std::move(parsed).error()).with_reason("InvalidQuantization");
  const Json& j = *parsed;
  auto bad = [&](std::string_view key, std::string what) {
    return Error(ErrorCode::kInvalidArgument, std::string(file) + ": " + std::string(key) + ": " + what,
                 "InvalidQuantization")
        .with_detail("field", std::string(key));
  };
  if (!j.is_object()) return bad("(root)", "expected an object");
  QuantizationRecord r;
  auto fmt = json_string(j, "weight_format");
  if (!fmt.ok() || (*fmt != "int8" && *fmt != "int4")) return bad("weight_format", "expected int8 or int4");
  r.scheme.format = *fmt == "int8" ? WeightFormat::kInt8 : WeightFormat::kInt4;
  auto group = json_int_or(j, "group_size", 0);
  if (!group.ok()) return bad("group_size", "expected an integer");
  r.scheme.group_size = *group;
  auto sym = json_bool_or(j, "symmetric", true);
  if (!sym.ok()) return bad("symmetric", "expected true or false");
  r.scheme.symmetric = *sym;
  auto scale = json_string_or(j, "scale_dtype", "float16");
  if (!scale.ok()) return bad("scale_dtype", "expected a string");
  auto sd = parse_scale_dtype(*scale, "scale_dtype");
  if (!sd.ok()) return bad("scale_dtype", "expected float16 or bfloat16");
  r.scheme.scale_dtype = *sd;
  if (Status s = validate_scheme(r.scheme); !s.ok()) return bad("weight_format", s.error().message());
  r.tool_version = json_string_or(j, "tool_version", "").value_or("");
  if (!j.contains("quantized") || !j["quantized"].is_object()) return bad("quantized", "expected an object");
  for (auto it = j["quantized"].begin(); it != j["quantized"].end(); ++it) {
    const Json& shape = it.value().is_object() && it.value().contains("shape") ? it.value()["shape"] : Json();
    if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_unsigned() ||
        !shape[1].is_number_unsigned()) {
      return bad("quantized." + it.key() + ".shape", "expected [rows, cols]");
    }
    r.quantized.emplace(it.key(), std::pair{shape[0].get<uint64_t>(), shape[1].get<uint64_t>()});
  }
  if (j.contains("unquantized")) {
    if (!j["unquantized"].is_array()) return bad("unquantized", "expected a list of tensor names");
    for (const Json& x : j["unquantized"]) {
      if (!x.is_string()) return bad("unquantized", "expected a list of tensor names");
      r.unquantized.push_back(x.get<std::string>());
    }
  }
  return r;
}

Result<Model> Model::open(const std::filesystem::path& dir_path, const ModelOptions& options) {
  INFERGATE_ASSIGN_OR_RETURN(
      ModelDirectory dir,
      ModelDirectory::open(dir_path, DirectoryOptions{options.refuse_symlinks, options.hasher}));
  INFERGATE_RETURN_IF_ERROR(refuse_pickle_files(dir));
  Model m;
  m.path_ = dir_path;
  {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("config.json", kMaxConfigBytes));
    INFERGATE_ASSIGN_OR_RETURN(m.config_, parse_model_config(text, "config.json"));
  }
  {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("tokenizer.json", kMaxTokenizerBytes));
    INFERGATE_ASSIGN_OR_RETURN(m.tokenizer_, Tokenizer::from_json(text, "tokenizer.json"));
  }
  if (m.tokenizer_.vocab_size() > m.config_.vocab_size) {
    return Error(ErrorCode::kInvalidArgument,
                 "tokenizer.json: token ids go up to " + std::to_string(m.tokenizer_.vocab_size() - 1) +
                     " but config.json's vocab_size is " + std::to_string(m.config_.vocab_size),
                 "InvalidTokenizer");
  }
  if (dir.exists("tokenizer_config.json")) {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("tokenizer_config.json", kMaxTokenizerBytes));
    INFERGATE_ASSIGN_OR_RETURN(m.tokenizer_config_, parse_tokenizer_config(text, "tokenizer_config.json"));
  }
  if (dir.exists("generation_config.json")) {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("generation_config.json", kMaxConfigBytes));
    INFERGATE_ASSIGN_OR_RETURN(m.generation_config_, parse_generation_config(text, "generation_config.json"));
  }
  const auto& qc = m.config_.quantization;
  const bool ours = qc && qc->quant_method == "infergate";
  if (ours || dir.exists("quantization.json")) {
    if (!ours) {
      return Error(ErrorCode::kInvalidArgument,
                   "quantization.json is present but config.json has no infergate quantization_config",
                   "QuantizationMismatch");
    }
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("quantization.json", kMaxRecordBytes));
    INFERGATE_ASSIGN_OR_RETURN(QuantizationRecord rec, parse_quantization_record(text, "quantization.json"));
    if (std::string(weight_format_name(rec.scheme.format)) != qc->weight_format ||
        rec.scheme.group_size != qc->group_size || rec.scheme.symmetric != qc->symmetric) {
      return Error(ErrorCode::kInvalidArgument,
                   "quantization.json and config.json's quantization_config disagree on the weight format",
                   "QuantizationMismatch");
    }
    m.quantization_ = std::move(rec);
  } else if (qc) {
    return Error(ErrorCode::kUnimplemented,
                 "config.json: quantization_config.quant_method '" + qc->quant_method +
                     "' is not a format this runtime loads (quantize with `infergate-runtime quantize`)",
                 "UnsupportedQuantization")
        .with_detail("field", "quantization_config.quant_method");
  }
  INFERGATE_ASSIGN_OR_RETURN(m.checkpoint_, Checkpoint::open(dir, options.limits));
  m.files_read_ = dir.files_read();
  if (options.check_tensors) INFERGATE_RETURN_IF_ERROR(m.check_tensors());
  return m;
}

Result<TensorView> Model::tensor(std::string_view name) const {
  const Checkpoint::Entry* e = checkpoint_.find(name);
  if (!e) {
    return tensor_error("MissingTensor", name, "tensor '" + std::string(name) + "' is not in the checkpoint");
  }
  auto bytes = checkpoint_.data(*e);
  TensorView v;
  v.name = e->info->name;
  v.dtype = e->info->dtype;
  v.shape = e->info->shape;
  v.data = bytes.data();
  v.nbytes = bytes.size();
  return v;
}

Result<WeightView> Model::weight(std::string_view name) const {
  WeightView w;
  if (const Checkpoint::Entry* e = checkpoint_.find(name)) {
    INFERGATE_ASSIGN_OR_RETURN(w.dense, tensor(name));
    if (w.dense.shape.size() != 2) {
      return tensor_error(
          "TensorShapeMismatch", name,
          "tensor '" + std::string(name) + "' is " + shape_string(w.dense.shape) + ", not a matrix");
    }
    (void)e;
    w.rows = w.dense.shape[0];
    w.cols = w.dense.shape[1];
    return w;
  }
  if (!quantization_) {
    return tensor_error("MissingTensor", name, "tensor '" + std::string(name) + "' is not in the checkpoint");
  }
  std::string qname = qweight_name(name);
  if (qname.empty() || !checkpoint_.find(qname)) {
    return tensor_error("MissingTensor", name,
                        "tensor '" + std::string(name) +
                            "' is in the checkpoint neither dense nor quantized (" +
                            (qname.empty() ? std::string("not a .weight name") : qname + " missing") + ")");
  }
  w.scheme = quantization_->scheme;
  w.format = w.scheme.format;
  INFERGATE_ASSIGN_OR_RETURN(w.qweight, tensor(qname));
  INFERGATE_ASSIGN_OR_RETURN(w.scales, tensor(scales_name(name)));
  if (w.format == WeightFormat::kInt4 && !w.scheme.symmetric) {
    INFERGATE_ASSIGN_OR_RETURN(w.zeros, tensor(zeros_name(name)));
  }
  if (w.qweight.shape.size() != 2) {
    return tensor_error("TensorShapeMismatch", qname,
                        qname + " is " + shape_string(w.qweight.shape) + ", not a matrix");
  }
  // The logical shape is recorded in quantization.json (int4 packing hides an odd width).
  auto rec = quantization_->quantized.find(name);
  if (rec == quantization_->quantized.end()) {
    return tensor_error(
        "QuantizationMismatch", name,
        "quantization.json does not list '" + std::string(name) + "' although " + qname + " exists");
  }
  w.rows = rec->second.first;
  w.cols = rec->second.second;
  for (const TensorSpec& p : quantized_parts(name, w.rows, w.cols, w.scheme)) {
    const Checkpoint::Entry* pe = checkpoint_.find(p.name);
    if (!pe || pe->info->dtype != p.dtype || pe->info->shape != p.shape) {
      return tensor_error("TensorShapeMismatch", p.name,
                          "'" + p.name + "' should be " + std::string(dtype_name(p.dtype)) + " " +
                              shape_string(p.shape) + " for a " + std::string(weight_format_name(w.format)) +
                              " [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] weight" +
                              (pe ? std::string(", found ") + std::string(dtype_name(pe->info->dtype)) + " " +
                                        shape_string(pe->info->shape)
                                  : std::string(", but it is missing")));
    }
  }
  return w;
}

Status Model::check_tensors() const {
  std::set<std::string> expected_names;
  for (const ExpectedTensor& t : expected_tensors(config_)) {
    expected_names.insert(t.name);
    const bool is_linear = t.shape.size() == 2 && t.name != "model.embed_tokens.weight";
    if (checkpoint_.find(t.name)) {
      INFERGATE_ASSIGN_OR_RETURN(TensorView v, tensor(t.name));
      if (!std::equal(v.shape.begin(), v.shape.end(), t.shape.begin(), t.shape.end())) {
        return tensor_error("TensorShapeMismatch", t.name,
                            "tensor '" + t.name + "' has shape " + shape_string(v.shape) + " but " +
                                std::string(architecture_name(config_.architecture)) +
                                " with this config.json expects " + shape_string(t.shape));
      }
      if (!is_float(v.dtype) || v.dtype == DType::kF64) {
        return tensor_error(
            "TensorDtypeMismatch", t.name,
            "tensor '" + t.name + "' is " + std::string(dtype_name(v.dtype)) +
                "; weights must be F16, BF16 or F32" +
                (v.dtype == DType::kF8E4M3 || v.dtype == DType::kF8E5M2 ? " (fp8 weights are not loaded)"
                                                                        : ""));
      }
      continue;
    }
    if (is_linear && quantization_) {
      auto w = weight(t.name);
      if (!w.ok()) return std::move(w).error();
      if (w->rows != t.shape[0] || w->cols != t.shape[1]) {
        return tensor_error("TensorShapeMismatch", t.name,
                            "quantized tensor '" + t.name + "' is [" + std::to_string(w->rows) + ", " +
                                std::to_string(w->cols) + "] but the config expects " +
                                shape_string(t.shape));
      }
      for (const TensorSpec& p : quantized_parts(t.name, t.shape[0], t.shape[1], w->scheme))
        expected_names.insert(p.name);
      continue;
    }
    return tensor_error("MissingTensor", t.name,
                        "tensor '" + t.name + "', which " +
                            std::string(architecture_name(config_.architecture)) +
                            " needs, is not in the checkpoint");
  }
  size_t extra = 0;
  for (const std::string& n : checkpoint_.tensor_names()) {
    if (!expected_names.count(n) && !(config_.tie_word_embeddings && n == "lm_head.weight")) ++extra;
  }
  if (extra)
    log::warn("checkpoint holds tensors the architecture does not use",
              {{"count", static_cast<unsigned long>(extra)}});
  return ok_status();
}

}  // namespace infergate::runtime::model
