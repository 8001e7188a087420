// quantization_config readers, one per quant_method: fp8 (DeepSeek-V3 / Kimi-K2-Instruct),
// compressed-tensors (pack-quantized int4, float-quantized fp8), awq (AutoAWQ GEMM), gptq, and ours.
#include "quant_config.h"

#include <algorithm>
#include <cctype>

#include "infergate/weights/description.h"

namespace infergate::weights::detail {

Error refuse(std::string_view reason, std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), std::string(reason));
}
Error field_error(std::string_view reason, std::string_view field, std::string message) {
  return refuse(reason, std::string(field) + ": " + message).with_detail("field", std::string(field));
}
Error tensor_error(std::string_view reason, std::string_view tensor, std::string message) {
  return refuse(reason, std::string(tensor.substr(0, 300)) + ": " + message)
      .with_detail("tensor", std::string(tensor.substr(0, 300)));
}

namespace {

using reasons::kInvalidQuantizationConfig;
using reasons::kUnknownQuantMethod;
using reasons::kUnsupportedQuantization;

Error bad(std::string_view field, std::string message) {
  return field_error(kInvalidQuantizationConfig, field, std::move(message));
}
Error unsupported(std::string_view field, std::string message) {
  return field_error(kUnsupportedQuantization, field, std::move(message));
}

const Json* member(const Json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}
bool absent_or_null(const Json& obj, std::string_view key) {
  const Json* v = member(obj, key);
  return v == nullptr || v->is_null();
}

// Optional typed fields: absent or null gives nullopt; another type is refused, naming the path.
Result<std::optional<std::string>> opt_string(const Json& obj, std::string_view key, std::string_view path) {
  if (absent_or_null(obj, key)) return std::optional<std::string>();
  INFERGATE_ASSIGN_OR_RETURN(std::string s, json_string(obj, key, path));
  return std::optional<std::string>(std::move(s));
}
Result<std::optional<int64_t>> opt_int(const Json& obj, std::string_view key, std::string_view path) {
  if (absent_or_null(obj, key)) return std::optional<int64_t>();
  INFERGATE_ASSIGN_OR_RETURN(int64_t v, json_int(obj, key, path));
  return std::optional<int64_t>(v);
}
Result<std::optional<bool>> opt_bool(const Json& obj, std::string_view key, std::string_view path) {
  if (absent_or_null(obj, key)) return std::optional<bool>();
  INFERGATE_ASSIGN_OR_RETURN(bool v, json_bool(obj, key, path));
  return std::optional<bool>(v);
}
// A list of strings (absent or null: empty).
Result<std::vector<std::string>> string_list(const Json& obj, std::string_view key, std::string_view path) {
  std::vector<std::string> out;
  if (absent_or_null(obj, key)) return out;
  INFERGATE_ASSIGN_OR_RETURN(const Json* arr, json_array(obj, key, path));
  const std::string field = json_path(path, key);
  for (size_t i = 0; i < arr->size(); ++i) {
    const Json& v = (*arr)[i];
    if (!v.is_string()) return bad(field + "[" + std::to_string(i) + "]", "expected a string");
    out.push_back(v.get_ref<const std::string&>());
  }
  return out;
}
// Re-wraps a common/json.h field error under our reason word.
Error as_config_error(Error e) {
  return Error(ErrorCode::kInvalidArgument, e.message(), std::string(kInvalidQuantizationConfig));
}
template <class T>
Result<T> config_field(Result<T> r) {
  if (!r.ok()) return as_config_error(std::move(r).error());
  return r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// ---- fp8 (DeepSeek-V3, Kimi-K2-Instruct: transformers' FineGrainedFP8Config) ----

Result<ParsedConfig> parse_fp8(const Json& q, const std::string& f, ParsedConfig out) {
  Scheme& s = out.scheme;
  s.family = Family::kFp8Block;
  s.bits = 8;
  s.scale_dtype = Dtype::kF32;
  const std::string block_field = json_path(f, "weight_block_size");
  if (absent_or_null(q, "weight_block_size")) {
    return unsupported(block_field,
                       "fp8 without weight_block_size (one scale per tensor) is not a format we serve");
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* block, config_field(json_array(q, "weight_block_size", f)));
  if (block->size() != 2 || !(*block)[0].is_number_unsigned() || !(*block)[1].is_number_unsigned() ||
      (*block)[0].get<uint64_t>() < 1 || (*block)[1].get<uint64_t>() < 1 ||
      (*block)[0].get<uint64_t>() > 65536 || (*block)[1].get<uint64_t>() > 65536) {
    return bad(block_field, "expected [rows, columns], two positive integers");
  }
  s.block = {static_cast<int64_t>((*block)[0].get<uint64_t>()),
             static_cast<int64_t>((*block)[1].get<uint64_t>())};
  INFERGATE_ASSIGN_OR_RETURN(auto fmt, config_field(opt_string(q, "fmt", f)));
  if (fmt && *fmt != "e4m3")
    return unsupported(json_path(f, "fmt"), "'" + *fmt + "': only e4m3 weights are described");
  INFERGATE_ASSIGN_OR_RETURN(auto act, config_field(opt_string(q, "activation_scheme", f)));
  if (act && *act != "dynamic") {
    return unsupported(json_path(f, "activation_scheme"),
                       "'" + *act + "': static activation scales are not supported");
  }
  INFERGATE_ASSIGN_OR_RETURN(auto scale_fmt, config_field(opt_string(q, "scale_fmt", f)));
  if (scale_fmt && *scale_fmt != "ue8m0") {
    return unsupported(json_path(f, "scale_fmt"),
                       "'" + *scale_fmt + "': only ue8m0 (power-of-two scales) is known");
  }
  s.scale_ue8m0 = scale_fmt.has_value();
  out.rules.kind = Rules::Kind::kAllButExcluded;
  INFERGATE_ASSIGN_OR_RETURN(out.rules.not_convert, string_list(q, "modules_to_not_convert", f));
  out.fp8_scale_suffix = "weight_scale_inv";
  return out;
}

// ---- compressed-tensors ----

struct CtWeights {
  int64_t num_bits = 8;
  std::string type = "int";
  bool symmetric = true;
  std::string strategy;
  std::optional<int64_t> group_size;
  std::optional<std::array<int64_t, 2>> block;
  std::string actorder;  // "", "group", "weight"
};

Result<CtWeights> parse_ct_weights(const Json& w, const std::string& f) {
  CtWeights out;
  INFERGATE_ASSIGN_OR_RETURN(auto bits, config_field(opt_int(w, "num_bits", f)));
  if (bits) out.num_bits = *bits;
  INFERGATE_ASSIGN_OR_RETURN(auto type, config_field(opt_string(w, "type", f)));
  if (type) out.type = *type;
  INFERGATE_ASSIGN_OR_RETURN(auto sym, config_field(opt_bool(w, "symmetric", f)));
  if (sym) out.symmetric = *sym;
  INFERGATE_ASSIGN_OR_RETURN(auto strategy, config_field(opt_string(w, "strategy", f)));
  INFERGATE_ASSIGN_OR_RETURN(out.group_size, config_field(opt_int(w, "group_size", f)));
  // compressed-tensors infers the strategy when it is left out: a group size means group, -1 channel.
  if (strategy) {
    out.strategy = *strategy;
  } else if (out.group_size && *out.group_size > 0) {
    out.strategy = "group";
  } else if (out.group_size && *out.group_size == -1) {
    out.strategy = "channel";
  } else {
    out.strategy = "tensor";
  }
  if (!absent_or_null(w, "block_structure")) {
    const Json* b = member(w, "block_structure");
    std::array<int64_t, 2> v{0, 0};
    if (b->is_array() && b->size() == 2 && (*b)[0].is_number_unsigned() && (*b)[1].is_number_unsigned()) {
      v = {static_cast<int64_t>((*b)[0].get<uint64_t>()), static_cast<int64_t>((*b)[1].get<uint64_t>())};
    } else if (b->is_string()) {  // older releases write "128x128"
      const std::string& t = b->get_ref<const std::string&>();
      const size_t x = t.find('x');
      if (x != std::string::npos && x > 0 && x + 1 < t.size() && t.size() < 16 &&
          std::all_of(t.begin(), t.end(), [](char c) { return (c >= '0' && c <= '9') || c == 'x'; }) &&
          t.find('x', x + 1) == std::string::npos) {
        v = {std::stoll(t.substr(0, x)), std::stoll(t.substr(x + 1))};
      }
    }
    if (v[0] < 1 || v[1] < 1 || v[0] > 65536 || v[1] > 65536)
      return bad(json_path(f, "block_structure"), "expected [rows, columns] of positive integers");
    out.block = v;
  }
  if (!absent_or_null(w, "actorder")) {
    const Json* a = member(w, "actorder");
    if (a->is_boolean()) {
      out.actorder = a->get<bool>() ? "group" : "";
    } else if (a->is_string()) {
      const std::string v = lower(a->get_ref<const std::string&>());
      out.actorder = v == "dynamic" ? "group" : v == "static" ? "weight" : v;
      if (out.actorder != "group" && out.actorder != "weight")
        return bad(json_path(f, "actorder"), "expected null, group, weight, dynamic or static");
    } else {
      return bad(json_path(f, "actorder"), "expected null, a boolean or a string");
    }
  }
  if (!absent_or_null(w, "dynamic")) {
    const Json* d = member(w, "dynamic");
    if (!d->is_boolean() || d->get<bool>()) {
      return unsupported(json_path(f, "dynamic"), "weights quantized at run time are not a stored format");
    }
  }
  return out;
}

// Input activations are quantized by the engine at run time (dynamic), or with stored static scales,
// which we do not describe.
Status check_ct_activations(const Json& group, const std::string& gf) {
  for (std::string_view key : {"input_activations", "output_activations"}) {
    if (absent_or_null(group, key)) continue;
    const Json* a = member(group, key);
    const std::string af = json_path(gf, key);
    if (!a->is_object()) return bad(af, "expected an object or null");
    if (key == "output_activations") return unsupported(af, "quantized output activations are not supported");
    const Json* d = member(*a, "dynamic");
    const bool dynamic = d != nullptr && ((d->is_boolean() && d->get<bool>()) || (d->is_string()));
    if (!dynamic) return unsupported(af, "static activation scales (dynamic: false) are not supported");
  }
  return ok_status();
}

Result<ParsedConfig> parse_compressed_tensors(const Json& q, const std::string& f, ParsedConfig out) {
  INFERGATE_ASSIGN_OR_RETURN(auto status, config_field(opt_string(q, "quantization_status", f)));
  if (status && *status != "compressed") {
    return unsupported(json_path(f, "quantization_status"),
                       "'" + *status + "': only checkpoints saved compressed hold the packed format");
  }
  for (std::string_view key : {"sparsity_config", "transform_config"}) {
    const Json* v = member(q, key);
    if (v != nullptr && !v->is_null() && !(v->is_object() && v->empty())) {
      return unsupported(json_path(f, key),
                         "sparsity and transforms change the weights' maths; not supported");
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(std::string format, config_field(json_string(q, "format", f)));
  INFERGATE_ASSIGN_OR_RETURN(const Json* groups, config_field(json_object(q, "config_groups", f)));
  if (groups->empty()) return bad(json_path(f, "config_groups"), "no config group");
  // Several groups are fine when they quantize weights the same way (they differ in targets only).
  std::optional<CtWeights> weights;
  const Json* weights_json = nullptr;
  std::vector<std::string> targets;
  for (const auto& [name, group] : groups->items()) {
    const std::string gf = json_path(json_path(f, "config_groups"), name);
    if (!group.is_object()) return bad(gf, "expected an object");
    INFERGATE_ASSIGN_OR_RETURN(auto gformat, config_field(opt_string(group, "format", gf)));
    if (gformat && *gformat != format) {
      return unsupported(json_path(gf, "format"), "'" + *gformat + "' differs from the config's '" + format +
                                                      "': mixed-format releases are not supported");
    }
    INFERGATE_RETURN_IF_ERROR(check_ct_activations(group, gf));
    if (absent_or_null(group, "weights"))
      return unsupported(json_path(gf, "weights"), "a group without weights");
    INFERGATE_ASSIGN_OR_RETURN(const Json* w, config_field(json_object(group, "weights", gf)));
    if (weights_json != nullptr && *w != *weights_json) {
      return unsupported(json_path(gf, "weights"),
                         "config groups that quantize weights differently are not supported");
    }
    INFERGATE_ASSIGN_OR_RETURN(CtWeights parsed, parse_ct_weights(*w, json_path(gf, "weights")));
    weights = parsed;
    weights_json = w;
    INFERGATE_ASSIGN_OR_RETURN(std::vector<std::string> t, string_list(group, "targets", gf));
    if (t.empty()) return bad(json_path(gf, "targets"), "a group without targets");
    targets.insert(targets.end(), t.begin(), t.end());
  }
  const CtWeights& w = *weights;
  const std::string wf = json_path(json_path(f, "config_groups"), groups->begin().key()) + ".weights";
  Scheme& s = out.scheme;
  if (format == "pack-quantized") {
    if (w.type != "int" || w.num_bits != 4) {
      return unsupported(
          wf, std::to_string(w.num_bits) + "-bit " + w.type + " pack-quantized weights: only 4-bit int");
    }
    s.family = Family::kCtInt4;
    s.bits = 4;
    s.symmetric = w.symmetric;
    if (w.strategy == "group") {
      if (!w.group_size || *w.group_size < 1)
        return bad(json_path(wf, "group_size"), "the group strategy needs a group_size");
      s.group_size = *w.group_size;
    } else if (w.strategy == "channel") {
      s.group_size = 0;
    } else {
      return unsupported(json_path(wf, "strategy"), "'" + w.strategy + "' int4: only group and channel");
    }
    s.act_order = w.actorder == "group";
    if (s.act_order && s.group_size == 0)
      return bad(json_path(wf, "actorder"), "activation order needs groups");
    s.scale_dtype = Dtype::kBF16;
  } else if (format == "float-quantized") {
    if (w.type != "float" || w.num_bits != 8) {
      return unsupported(
          wf, std::to_string(w.num_bits) + "-bit " + w.type + " float-quantized weights: only 8-bit float");
    }
    if (!w.symmetric) return unsupported(json_path(wf, "symmetric"), "asymmetric fp8 is not supported");
    s.bits = 8;
    if (w.strategy == "channel") {
      s.family = Family::kFp8Channel;
    } else if (w.strategy == "block") {
      if (!w.block)
        return bad(json_path(wf, "block_structure"), "the block strategy needs a block_structure");
      s.family = Family::kFp8Block;
      s.block = *w.block;
      out.fp8_scale_suffix = "weight_scale";
    } else {
      return unsupported(json_path(wf, "strategy"), "'" + w.strategy + "' fp8: only channel and block");
    }
    s.scale_dtype = Dtype::kBF16;
  } else {
    return unsupported(json_path(f, "format"), "'" + format +
                                                   "': described formats are pack-quantized (int4) and "
                                                   "float-quantized (fp8)");
  }
  out.rules.kind = Rules::Kind::kTargetsIgnore;
  INFERGATE_ASSIGN_OR_RETURN(out.rules.targets, ModuleRules::parse(targets));
  INFERGATE_ASSIGN_OR_RETURN(std::vector<std::string> ignore, string_list(q, "ignore", f));
  INFERGATE_ASSIGN_OR_RETURN(out.rules.ignore, ModuleRules::parse(ignore));
  return out;
}

// ---- AutoAWQ ----

Result<ParsedConfig> parse_awq(const Json& q, const std::string& f, ParsedConfig out) {
  INFERGATE_ASSIGN_OR_RETURN(auto bits, config_field(opt_int(q, "bits", f)));
  INFERGATE_ASSIGN_OR_RETURN(auto w_bit, config_field(opt_int(q, "w_bit", f)));
  const int64_t b = bits ? *bits : w_bit ? *w_bit : 4;
  if (b != 4) return unsupported(json_path(f, "bits"), std::to_string(b) + "-bit AWQ: only 4-bit");
  INFERGATE_ASSIGN_OR_RETURN(auto group, config_field(opt_int(q, "group_size", f)));
  INFERGATE_ASSIGN_OR_RETURN(auto q_group, config_field(opt_int(q, "q_group_size", f)));
  const int64_t g = group ? *group : q_group ? *q_group : 128;
  if (g != -1 && g < 1) return bad(json_path(f, "group_size"), "expected a positive group size or -1");
  INFERGATE_ASSIGN_OR_RETURN(auto zero_point, config_field(opt_bool(q, "zero_point", f)));
  if (zero_point && !*zero_point)
    return unsupported(json_path(f, "zero_point"), "AWQ GEMM without zero points");
  INFERGATE_ASSIGN_OR_RETURN(auto version, config_field(opt_string(q, "version", f)));
  if (version && lower(*version) != "gemm") {
    return unsupported(json_path(f, "version"), "'" + *version + "': only the GEMM layout is described");
  }
  Scheme& s = out.scheme;
  s.family = Family::kAwqInt4;
  s.bits = 4;
  s.group_size = g == -1 ? 0 : g;
  s.symmetric = false;
  s.scale_dtype = Dtype::kF16;
  out.rules.kind = Rules::Kind::kAllButExcluded;
  INFERGATE_ASSIGN_OR_RETURN(out.rules.not_convert, string_list(q, "modules_to_not_convert", f));
  return out;
}

// ---- GPTQ ----

Result<ParsedConfig> parse_gptq(const Json& q, const std::string& f, ParsedConfig out) {
  INFERGATE_ASSIGN_OR_RETURN(auto bits, config_field(opt_int(q, "bits", f)));
  if (!bits || *bits != 4) return unsupported(json_path(f, "bits"), "only 4-bit GPTQ is described");
  INFERGATE_ASSIGN_OR_RETURN(auto group, config_field(opt_int(q, "group_size", f)));
  const int64_t g = group ? *group : 128;
  if (g != -1 && (g < 8 || g % 8 != 0)) {
    return bad(json_path(f, "group_size"),
               "expected -1 or a positive multiple of 8, got " + std::to_string(g));
  }
  INFERGATE_ASSIGN_OR_RETURN(auto desc_act, config_field(opt_bool(q, "desc_act", f)));
  INFERGATE_ASSIGN_OR_RETURN(auto sym, config_field(opt_bool(q, "sym", f)));
  INFERGATE_ASSIGN_OR_RETURN(auto fmt, config_field(opt_string(q, "checkpoint_format", f)));
  if (fmt && *fmt != "gptq" && *fmt != "gptq_v2") {
    return unsupported(json_path(f, "checkpoint_format"), "'" + *fmt + "': only gptq and gptq_v2");
  }
  for (std::string_view key : {"dynamic", "modules_in_block_to_quantize"}) {
    const Json* v = member(q, key);
    if (v != nullptr && !v->is_null() && !((v->is_object() || v->is_array()) && v->empty())) {
      return unsupported(json_path(f, key), "per-module GPTQ settings are not supported");
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(auto lm_head, config_field(opt_bool(q, "lm_head", f)));
  Scheme& s = out.scheme;
  s.family = Family::kGptqInt4;
  s.bits = 4;
  s.group_size = g == -1 ? 0 : g;
  s.act_order = desc_act.value_or(false) && s.group_size > 0;
  s.symmetric = sym.value_or(true);
  s.gptq_v2 = fmt && *fmt == "gptq_v2";
  s.scale_dtype = Dtype::kF16;
  out.rules.kind = Rules::Kind::kAllButExcluded;
  out.rules.lm_head_quantized = lm_head.value_or(false);
  INFERGATE_ASSIGN_OR_RETURN(out.rules.not_convert, string_list(q, "modules_to_not_convert", f));
  return out;
}

// ---- ours (infergate-runtime quantize) ----

Result<ParsedConfig> parse_ours(const Json& q, const std::string& f, const std::string* record,
                                ParsedConfig out) {
  INFERGATE_ASSIGN_OR_RETURN(std::string format, config_field(json_string(q, "weight_format", f)));
  Scheme& s = out.scheme;
  if (format == "int8") {
    s.family = Family::kInfergateInt8;
    s.bits = 8;
  } else if (format == "int4") {
    s.family = Family::kInfergateInt4;
    s.bits = 4;
  } else {
    return bad(json_path(f, "weight_format"), "expected int8 or int4, got '" + format.substr(0, 32) + "'");
  }
  INFERGATE_ASSIGN_OR_RETURN(auto group, config_field(opt_int(q, "group_size", f)));
  s.group_size = group.value_or(0);
  if (s.family == Family::kInfergateInt4 && s.group_size != 32 && s.group_size != 64 && s.group_size != 128)
    return bad(json_path(f, "group_size"), "int4 groups are 32, 64 or 128");
  if (s.family == Family::kInfergateInt8 && s.group_size != 0)
    return bad(json_path(f, "group_size"), "int8 has one scale per output channel (group_size 0)");
  INFERGATE_ASSIGN_OR_RETURN(auto sym, config_field(opt_bool(q, "symmetric", f)));
  s.symmetric = sym.value_or(true);
  INFERGATE_ASSIGN_OR_RETURN(auto scale, config_field(opt_string(q, "scale_dtype", f)));
  const std::string sd = scale.value_or("float16");
  if (sd != "float16" && sd != "bfloat16")
    return bad(json_path(f, "scale_dtype"), "expected float16 or bfloat16");
  s.scale_dtype = sd == "float16" ? Dtype::kF16 : Dtype::kBF16;
  if (record == nullptr) {
    return field_error(kInvalidQuantizationConfig, "quantization.json",
                       "config.json names infergate quantization but quantization.json is missing");
  }
  INFERGATE_ASSIGN_OR_RETURN(Json r, config_field(parse_json(*record, "quantization.json")));
  if (!r.is_object()) return bad("quantization.json", "not a JSON object");
  INFERGATE_ASSIGN_OR_RETURN(std::string rec_format,
                             config_field(json_string(r, "weight_format", "quantization.json")));
  if (rec_format != format) {
    return bad("quantization.json.weight_format",
               "'" + rec_format.substr(0, 32) + "' disagrees with config.json's '" + format + "'");
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* quantized,
                             config_field(json_object(r, "quantized", "quantization.json")));
  out.rules.kind = Rules::Kind::kListed;
  for (const auto& [name, entry] : quantized->items()) {
    const std::string ef = "quantization.json.quantized." + name.substr(0, 200);
    if (!entry.is_object()) return bad(ef, "expected an object");
    INFERGATE_ASSIGN_OR_RETURN(const Json* shape, config_field(json_array(entry, "shape", ef)));
    if (shape->size() != 2 || !(*shape)[0].is_number_unsigned() || !(*shape)[1].is_number_unsigned())
      return bad(ef + ".shape", "expected [rows, columns]");
    out.ours_shapes[name] = {(*shape)[0].get<uint64_t>(), (*shape)[1].get<uint64_t>()};
    const auto [module, suffix] = split_tensor_name(name);
    if (suffix != "weight") return bad(ef, "a quantized tensor's name ends in .weight");
    out.rules.listed.insert(std::string(module));
  }
  return out;
}

}  // namespace

Result<Rules::Verdict> Rules::verdict(std::string_view module, bool is_linear) const {
  switch (kind) {
    case Kind::kNothing: return Verdict{false, "config.json has no quantization_config"};
    case Kind::kListed:
      if (listed.count(module)) return Verdict{true, "quantization.json lists it"};
      return Verdict{false, "quantization.json does not list it"};
    case Kind::kAllButExcluded: {
      if (!is_linear) return Verdict{false, "it is not a linear layer"};
      const bool lm_head = module == "lm_head" || module.ends_with(".lm_head");
      if (lm_head && !lm_head_quantized) return Verdict{false, "lm_head is not quantized"};
      for (const std::string& s : not_convert) {
        if (!s.empty() && module.find(s) != std::string_view::npos)
          return Verdict{false, "modules_to_not_convert entry '" + s + "' excludes it"};
      }
      return Verdict{true, "every linear layer is quantized but lm_head and modules_to_not_convert"};
    }
    case Kind::kTargetsIgnore: {
      INFERGATE_ASSIGN_OR_RETURN(const ModuleRule* t, targets.first_match(module, is_linear));
      if (t == nullptr) return Verdict{false, "no target matches it"};
      INFERGATE_ASSIGN_OR_RETURN(const ModuleRule* i, ignore.first_match(module, is_linear));
      if (i != nullptr) return Verdict{false, "ignore entry '" + i->text() + "' excludes it"};
      return Verdict{true, "target '" + t->text() + "' matches it and no ignore entry does"};
    }
  }
  return Verdict{};
}

Result<ParsedConfig> parse_quantization(const Json* config, const std::string* quantization_json) {
  ParsedConfig out;
  ConfigQuantization found;
  if (config != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(found, find_quantization_config(*config));
  }
  out.num_hidden_layers = found.num_hidden_layers;
  if (found.config == nullptr) {
    if (quantization_json != nullptr) {
      return field_error(kInvalidQuantizationConfig, "config.json",
                         "quantization.json is present but config.json has no infergate quantization_config");
    }
    return out;  // dense
  }
  const Json& q = *found.config;
  out.field = found.field;
  if (!q.is_object()) return bad(found.field, "expected an object");
  INFERGATE_ASSIGN_OR_RETURN(std::string method, config_field(json_string(q, "quant_method", found.field)));
  out.quant_method = method;
  if (quantization_json != nullptr && method != "infergate") {
    return field_error(
        kInvalidQuantizationConfig, "quantization.json",
        "quantization.json (infergate's record) is present but config.json's quant_method is '" +
            method.substr(0, 40) + "'");
  }
  if (method == "fp8") return parse_fp8(q, found.field, std::move(out));
  if (method == "compressed-tensors") return parse_compressed_tensors(q, found.field, std::move(out));
  if (method == "awq") return parse_awq(q, found.field, std::move(out));
  if (method == "gptq") return parse_gptq(q, found.field, std::move(out));
  if (method == "infergate") return parse_ours(q, found.field, quantization_json, std::move(out));
  return field_error(kUnknownQuantMethod, json_path(found.field, "quant_method"),
                     "'" + method.substr(0, 40) +
                         "' is not a known quant_method (fp8, compressed-tensors, awq, gptq, infergate)");
}

}  // namespace infergate::weights::detail

namespace infergate::weights {

Result<ConfigQuantization> find_quantization_config(const Json& config) {
  ConfigQuantization out;
  if (!config.is_object())
    return detail::field_error(reasons::kInvalidQuantizationConfig, "config.json", "not a JSON object");
  const Json* text = nullptr;
  if (auto it = config.find("text_config"); it != config.end() && it->is_object()) text = &*it;
  auto layers_of = [](const Json& level) -> int64_t {
    auto it = level.find("num_hidden_layers");
    return it != level.end() && it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : 0;
  };
  out.num_hidden_layers = layers_of(config);
  if (out.num_hidden_layers == 0 && text != nullptr) out.num_hidden_layers = layers_of(*text);
  if (auto it = config.find("quantization_config"); it != config.end() && !it->is_null()) {
    out.config = &*it;
    out.field = "quantization_config";
  } else if (text != nullptr) {
    if (auto t = text->find("quantization_config"); t != text->end() && !t->is_null()) {
      out.config = &*t;
      out.field = "text_config.quantization_config";
      if (layers_of(*text) > 0) out.num_hidden_layers = layers_of(*text);
    }
  }
  return out;
}

}  // namespace infergate::weights
