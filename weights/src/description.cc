// describe_weights: tensors grouped into quantized linears, each checked against its family's layout,
// the whole checked against the config's rules.
#include "infergate/weights/description.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "quant_config.h"
#include "values.h"

namespace infergate::weights {

using detail::ParsedConfig;
using detail::tensor_error;

namespace {

constexpr std::array<std::string_view, 14> kReasonWords = {reasons::kUnknownQuantMethod,
                                                           reasons::kUnsupportedQuantization,
                                                           reasons::kInvalidQuantizationConfig,
                                                           reasons::kMissingQuantPart,
                                                           reasons::kOrphanQuantPart,
                                                           reasons::kQuantPartDtype,
                                                           reasons::kQuantPartShape,
                                                           reasons::kGroupSizeMismatch,
                                                           reasons::kFormatMismatch,
                                                           reasons::kIgnoreRuleMismatch,
                                                           reasons::kQuantValueInvalid,
                                                           kInvalidSafetensors,
                                                           kUnsupportedPattern,
                                                           "InvalidFormatWord"};

// Every suffix some family gives a quantized linear's parts; a tensor with one of these that its own
// family does not use belongs to another format.
constexpr std::array<std::string_view, 14> kQuantSuffixes = {"weight_scale_inv",
                                                             "weight_scale",
                                                             "weight_packed",
                                                             "weight_shape",
                                                             "weight_zero_point",
                                                             "weight_g_idx",
                                                             "qweight",
                                                             "qzeros",
                                                             "scales",
                                                             "zeros",
                                                             "g_idx",
                                                             "input_scale",
                                                             "weight_global_scale",
                                                             "input_global_scale"};

// The suffixes of one family's parts ("" where it has none).
struct Suffixes {
  std::string_view data, scale, zeros, g_idx, shape;
  bool has(std::string_view s) const {
    return !s.empty() && (s == data || s == scale || s == zeros || s == g_idx || s == shape);
  }
};

Suffixes suffixes_of(const ParsedConfig& pc) {
  switch (pc.scheme.family) {
    case Family::kDense: return {};
    case Family::kInfergateInt8:
    case Family::kInfergateInt4: return {"qweight", "scales", "zeros", "", ""};
    case Family::kFp8Block: return {"weight", pc.fp8_scale_suffix, "", "", ""};
    case Family::kFp8Channel: return {"weight", "weight_scale", "", "", ""};
    case Family::kCtInt4:
      return {"weight_packed", "weight_scale", "weight_zero_point", "weight_g_idx", "weight_shape"};
    case Family::kAwqInt4: return {"qweight", "scales", "qzeros", "", ""};
    case Family::kGptqInt4: return {"qweight", "scales", "qzeros", "g_idx", ""};
  }
  return {};
}

bool is_fp8_family(Family f) { return f == Family::kFp8Block || f == Family::kFp8Channel; }
bool is_fp8_dtype(Dtype d) { return d == Dtype::kF8E4M3 || d == Dtype::kF8E5M2; }

struct Pending {
  const TensorHeader* data = nullptr;
  const TensorHeader* scale = nullptr;
  const TensorHeader* zeros = nullptr;
  const TensorHeader* g_idx = nullptr;
  const TensorHeader* shape = nullptr;
  const TensorHeader* dense_weight = nullptr;  // M.weight when it is not the family's data part
};

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

Status expect_dtype(const TensorHeader* t, std::initializer_list<Dtype> allowed, std::string_view what) {
  for (Dtype d : allowed) {
    if (t->dtype == d) return ok_status();
  }
  std::string names;
  for (Dtype d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  return tensor_error(reasons::kQuantPartDtype, t->name,
                      std::string(what) + " is " + std::string(dtype_name(t->dtype)) + ", expected " + names);
}

Status expect_shape(const TensorHeader* t, const std::vector<uint64_t>& want, std::string_view why) {
  if (t->shape == want) return ok_status();
  return tensor_error(
      reasons::kQuantPartShape, t->name,
      "shape " + shape_text(t->shape) + ", expected " + shape_text(want) + " (" + std::string(why) + ")");
}

Status expect_rank2(const TensorHeader* t, std::string_view what) {
  if (t->shape.size() == 2 && t->shape[0] > 0 && t->shape[1] > 0) return ok_status();
  return tensor_error(reasons::kQuantPartShape, t->name,
                      std::string(what) + " must be a non-empty matrix, not " + shape_text(t->shape));
}

Error missing(std::string_view module, std::string_view suffix, std::string_view why) {
  const std::string name = std::string(module) + "." + std::string(suffix);
  return tensor_error(reasons::kMissingQuantPart, name, "is missing (" + std::string(why) + ")");
}

Error unexpected(const TensorHeader* t, std::string_view why) {
  return tensor_error(reasons::kFormatMismatch, t->name, std::string(why));
}

Status expect_wide_scale(const TensorHeader* t) {
  return expect_dtype(t, {Dtype::kF32, Dtype::kBF16, Dtype::kF16}, "a scale");
}

// ---- per-family checks: each fills rows and cols and checks every part's dtype and shape ----

class UnitChecker {
 public:
  UnitChecker(const ParsedConfig& pc, TensorReader* reader) : pc_(pc), s_(pc.scheme), reader_(reader) {}

  Result<QuantizedLinear> check(std::string_view module, const Pending& p) {
    QuantizedLinear q;
    q.module = std::string(module);
    switch (s_.family) {
      case Family::kFp8Block:
      case Family::kFp8Channel: INFERGATE_RETURN_IF_ERROR(fp8(module, p, &q)); break;
      case Family::kCtInt4: INFERGATE_RETURN_IF_ERROR(ct_int4(module, p, &q)); break;
      case Family::kAwqInt4: INFERGATE_RETURN_IF_ERROR(awq(module, p, &q)); break;
      case Family::kGptqInt4: INFERGATE_RETURN_IF_ERROR(gptq(module, p, &q)); break;
      case Family::kInfergateInt8:
      case Family::kInfergateInt4: INFERGATE_RETURN_IF_ERROR(ours(module, p, &q)); break;
      case Family::kDense: return Error(ErrorCode::kInternal, "a dense release has no quantized linears");
    }
    q.parts.push_back({PartRole::kData, p.data});
    if (p.scale) q.parts.push_back({PartRole::kScale, p.scale});
    if (p.zeros) q.parts.push_back({PartRole::kZeros, p.zeros});
    if (p.g_idx) q.parts.push_back({PartRole::kGIdx, p.g_idx});
    if (p.shape) q.parts.push_back({PartRole::kShape, p.shape});
    if (p.scale) INFERGATE_RETURN_IF_ERROR(one_scale_dtype(p.scale));
    return q;
  }

  std::optional<Dtype> scale_dtype() const { return scale_dtype_; }

 private:
  Status one_scale_dtype(const TensorHeader* t) {
    if (!scale_dtype_) {
      scale_dtype_ = t->dtype;
    } else if (*scale_dtype_ != t->dtype) {
      return tensor_error(reasons::kQuantPartDtype, t->name,
                          "scales are " + std::string(dtype_name(t->dtype)) + " here but " +
                              std::string(dtype_name(*scale_dtype_)) +
                              " in other layers: one scale dtype per release");
    }
    return ok_status();
  }

  Status fp8(std::string_view module, const Pending& p, QuantizedLinear* q) {
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.data, {Dtype::kF8E4M3}, "an fp8 weight"));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.data, "the weight"));
    q->rows = p.data->shape[0];
    q->cols = p.data->shape[1];
    const std::string_view scale_suffix = suffixes_of(pc_).scale;
    if (p.scale == nullptr) return missing(module, scale_suffix, "every F8_E4M3 weight has its scale");
    if (s_.family == Family::kFp8Block) {
      if (scale_suffix == "weight_scale_inv") {
        INFERGATE_RETURN_IF_ERROR(expect_dtype(p.scale, {Dtype::kF32}, "weight_scale_inv"));
      } else {
        INFERGATE_RETURN_IF_ERROR(expect_wide_scale(p.scale));
      }
      const uint64_t br = static_cast<uint64_t>(s_.block[0]), bc = static_cast<uint64_t>(s_.block[1]);
      return expect_shape(p.scale, {ceil_div(q->rows, br), ceil_div(q->cols, bc)},
                          "one scale per " + std::to_string(br) + " x " + std::to_string(bc) +
                              " block of the " + shape_text(p.data->shape) +
                              " weight, partial blocks included");
    }
    INFERGATE_RETURN_IF_ERROR(expect_wide_scale(p.scale));
    return expect_shape(p.scale, {q->rows, 1}, "one scale per output channel");
  }

  // compressed-tensors pack-quantized int4.
  Status ct_int4(std::string_view module, const Pending& p, QuantizedLinear* q) {
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.data, {Dtype::kI32}, "weight_packed"));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.data, "weight_packed"));
    if (p.scale == nullptr) return missing(module, "weight_scale", "every packed weight has its scales");
    if (p.shape == nullptr) return missing(module, "weight_shape", "the packed weight's logical shape");
    INFERGATE_RETURN_IF_ERROR(expect_wide_scale(p.scale));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.scale, "weight_scale"));
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.shape, {Dtype::kI32, Dtype::kI64}, "weight_shape"));
    INFERGATE_RETURN_IF_ERROR(expect_shape(p.shape, {2}, "[rows, columns]"));
    const uint64_t n = p.data->shape[0], words = p.data->shape[1], groups = p.scale->shape[1];
    const uint64_t g = static_cast<uint64_t>(s_.group_size);
    // K: from weight_shape when the values can be read, else from the scales (G divides K).
    std::optional<uint64_t> k;
    if (reader_ != nullptr) {
      INFERGATE_ASSIGN_OR_RETURN(auto logical, detail::read_weight_shape(*reader_, *p.shape));
      if (logical[0] != n) {
        return tensor_error(
            reasons::kQuantPartShape, p.shape->name,
            "says " + std::to_string(logical[0]) + " rows but weight_packed has " + std::to_string(n));
      }
      k = logical[1];
      if (ceil_div(*k, 8) != words) {
        return tensor_error(reasons::kQuantPartShape, p.shape->name,
                            "says K = " + std::to_string(*k) + ", which packs into " +
                                std::to_string(ceil_div(*k, 8)) + " words per row, but weight_packed has " +
                                std::to_string(words));
      }
    } else if (g > 0) {
      k = g * groups;
    } else {
      return Error(
          ErrorCode::kInvalidArgument,
          std::string(module) + ": channel-wise int4 needs weight_shape's values (describe with a reader)");
    }
    if (g > 0 && *k % g != 0) {
      return tensor_error(reasons::kGroupSizeMismatch, p.data->name,
                          "group size " + std::to_string(g) + " does not divide K = " + std::to_string(*k));
    }
    const uint64_t want_groups = g > 0 ? *k / g : 1;
    INFERGATE_RETURN_IF_ERROR(expect_shape(p.scale, {n, want_groups},
                                           g > 0 ? "K / G = " + std::to_string(*k) + " / " + std::to_string(g)
                                                 : std::string("one scale per output channel")));
    if (ceil_div(*k, 8) != words) {
      return tensor_error(reasons::kQuantPartShape, p.data->name,
                          "has " + std::to_string(words) + " words per row; K = " + std::to_string(*k) +
                              " needs " + std::to_string(ceil_div(*k, 8)));
    }
    q->rows = n;
    q->cols = *k;
    if (!s_.symmetric) {
      if (p.zeros == nullptr) return missing(module, "weight_zero_point", "the config says asymmetric");
      INFERGATE_RETURN_IF_ERROR(expect_dtype(p.zeros, {Dtype::kI32}, "weight_zero_point"));
      INFERGATE_RETURN_IF_ERROR(
          expect_shape(p.zeros, {ceil_div(n, 8), want_groups}, "8 zero points per word along N"));
    } else if (p.zeros != nullptr) {
      return unexpected(p.zeros, "the config says symmetric, so there are no zero points");
    }
    if (s_.act_order) {
      if (p.g_idx == nullptr) return missing(module, "weight_g_idx", "the config's actorder is group");
      INFERGATE_RETURN_IF_ERROR(expect_dtype(p.g_idx, {Dtype::kI32}, "weight_g_idx"));
      INFERGATE_RETURN_IF_ERROR(expect_shape(p.g_idx, {*k}, "one group index per input column"));
    } else if (p.g_idx != nullptr) {
      return unexpected(p.g_idx, "the config has no activation order, so there is no g_idx");
    }
    return ok_status();
  }

  Status awq(std::string_view module, const Pending& p, QuantizedLinear* q) {
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.data, {Dtype::kI32}, "qweight"));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.data, "qweight"));
    if (p.scale == nullptr) return missing(module, "scales", "every packed weight has its scales");
    if (p.zeros == nullptr) return missing(module, "qzeros", "AWQ GEMM stores a zero point per group");
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.scale, {Dtype::kF16, Dtype::kBF16}, "scales"));
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.zeros, {Dtype::kI32}, "qzeros"));
    const uint64_t k = p.data->shape[0], words = p.data->shape[1], n = words * 8;
    const uint64_t g = static_cast<uint64_t>(s_.group_size);
    if (g > 0 && k % g != 0) {
      return tensor_error(reasons::kGroupSizeMismatch, p.data->name,
                          "group size " + std::to_string(g) + " does not divide K = " + std::to_string(k));
    }
    const uint64_t groups = g > 0 ? k / g : 1;
    INFERGATE_RETURN_IF_ERROR(
        expect_shape(p.scale, {groups, n}, "[K / G, N] with N = 8 x qweight's columns"));
    INFERGATE_RETURN_IF_ERROR(expect_shape(p.zeros, {groups, words}, "[K / G, N / 8]"));
    q->rows = n;
    q->cols = k;
    return ok_status();
  }

  Status gptq(std::string_view module, const Pending& p, QuantizedLinear* q) {
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.data, {Dtype::kI32}, "qweight"));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.data, "qweight"));
    if (p.scale == nullptr) return missing(module, "scales", "every packed weight has its scales");
    if (p.zeros == nullptr) return missing(module, "qzeros", "GPTQ stores a zero point per group");
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.scale, {Dtype::kF16, Dtype::kBF16}, "scales"));
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.zeros, {Dtype::kI32}, "qzeros"));
    const uint64_t k = p.data->shape[0] * 8, n = p.data->shape[1];
    if (n % 8 != 0) {
      return tensor_error(
          reasons::kQuantPartShape, p.data->name,
          "N = " + std::to_string(n) + " is not a multiple of 8: GPTQ packs 8 zero points per word");
    }
    const uint64_t g = static_cast<uint64_t>(s_.group_size);
    const uint64_t groups = g > 0 ? ceil_div(k, g) : 1;
    if (p.g_idx != nullptr) {
      INFERGATE_RETURN_IF_ERROR(expect_dtype(p.g_idx, {Dtype::kI32}, "g_idx"));
      INFERGATE_RETURN_IF_ERROR(
          expect_shape(p.g_idx, {k}, "one group index per input row: K = 8 x qweight's rows"));
    } else if (s_.act_order) {
      return missing(module, "g_idx", "desc_act is true");
    }
    INFERGATE_RETURN_IF_ERROR(expect_shape(p.scale, {groups, n}, "[ceil(K / G), N]"));
    INFERGATE_RETURN_IF_ERROR(expect_shape(p.zeros, {groups, n / 8}, "[ceil(K / G), N / 8]"));
    q->rows = n;
    q->cols = k;
    return ok_status();
  }

  Status ours(std::string_view module, const Pending& p, QuantizedLinear* q) {
    const bool int8 = s_.family == Family::kInfergateInt8;
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.data, {int8 ? Dtype::kI8 : Dtype::kU8}, "qweight"));
    INFERGATE_RETURN_IF_ERROR(expect_rank2(p.data, "qweight"));
    if (p.scale == nullptr) return missing(module, "scales", "every quantized weight has its scales");
    INFERGATE_RETURN_IF_ERROR(expect_dtype(p.scale, {s_.scale_dtype}, "scales (the config's scale_dtype)"));
    const std::string weight = std::string(module) + ".weight";
    auto listed = pc_.ours_shapes.find(weight);
    if (listed == pc_.ours_shapes.end()) {
      return tensor_error(reasons::kIgnoreRuleMismatch, p.data->name,
                          "is quantized but quantization.json does not list " + weight);
    }
    const uint64_t n = listed->second[0], k = listed->second[1];
    const uint64_t row = int8 ? k : ceil_div(k, 2);
    INFERGATE_RETURN_IF_ERROR(expect_shape(
        p.data, {n, row}, "quantization.json records " + weight + " as " + shape_text(listed->second)));
    if (int8) {
      INFERGATE_RETURN_IF_ERROR(expect_shape(p.scale, {n}, "one scale per output channel"));
      if (p.zeros != nullptr) return unexpected(p.zeros, "int8 has no zero points");
    } else {
      const uint64_t groups = ceil_div(k, static_cast<uint64_t>(s_.group_size));
      INFERGATE_RETURN_IF_ERROR(
          expect_shape(p.scale, {n, groups}, "one scale per group of " + std::to_string(s_.group_size)));
      if (!s_.symmetric) {
        if (p.zeros == nullptr) return missing(module, "zeros", "the config says asymmetric");
        INFERGATE_RETURN_IF_ERROR(expect_dtype(p.zeros, {Dtype::kU8}, "zeros"));
        INFERGATE_RETURN_IF_ERROR(expect_shape(p.zeros, {n, groups}, "one zero point per group"));
      } else if (p.zeros != nullptr) {
        return unexpected(p.zeros, "the config says symmetric, so there are no zero points");
      }
    }
    q->rows = n;
    q->cols = k;
    return ok_status();
  }

  const ParsedConfig& pc_;
  const Scheme& s_;
  TensorReader* reader_;
  std::optional<Dtype> scale_dtype_;
};

// The dtype holding the most bytes among `tensors`, or nullopt.
std::optional<Dtype> dominant_dtype(const std::vector<const TensorHeader*>& tensors) {
  std::map<Dtype, uint64_t> bytes;
  for (const TensorHeader* t : tensors) bytes[t->dtype] += t->bytes;
  if (bytes.empty()) return std::nullopt;
  return std::max_element(bytes.begin(), bytes.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

bool is_mtp_layer(std::string_view module, int64_t num_hidden_layers) {
  const int64_t layer = layer_index(module);
  return num_hidden_layers > 0 && layer >= num_hidden_layers;
}

// Each linear module against the config's rules.
Status check_rules(const ParsedConfig& pc, const WeightDescription& d) {
  for (const QuantizedLinear& q : d.quantized) {
    if (is_mtp_layer(q.module, pc.num_hidden_layers)) continue;
    const bool linear = !is_embedding_module(q.module) && !is_router_module(q.module);
    INFERGATE_ASSIGN_OR_RETURN(auto v, pc.rules.verdict(q.module, linear));
    if (!v.quantized) {
      return tensor_error(
          reasons::kIgnoreRuleMismatch, q.module,
          "is quantized (" + q.parts[0].tensor->name + ") but the config leaves it unquantized: " + v.why);
    }
  }
  for (const DenseTensor& t : d.dense) {
    if (!t.linear) continue;
    const std::string_view module = split_tensor_name(t.tensor->name).first;
    if (is_mtp_layer(module, pc.num_hidden_layers)) continue;
    INFERGATE_ASSIGN_OR_RETURN(auto v, pc.rules.verdict(module, true));
    if (v.quantized) {
      return tensor_error(reasons::kIgnoreRuleMismatch, t.tensor->name,
                          "is " + std::string(dtype_name(t.tensor->dtype)) + " but the config quantizes " +
                              std::string(module) + ": " + v.why);
    }
  }
  return ok_status();
}

}  // namespace

std::span<const std::string_view> description_reasons() { return kReasonWords; }

std::string_view part_role_name(PartRole r) {
  switch (r) {
    case PartRole::kData: return "data";
    case PartRole::kScale: return "scale";
    case PartRole::kZeros: return "zeros";
    case PartRole::kGIdx: return "g_idx";
    case PartRole::kShape: return "shape";
  }
  return "?";
}

const Part* QuantizedLinear::part(PartRole r) const {
  for (const Part& p : parts) {
    if (p.role == r) return &p;
  }
  return nullptr;
}

uint64_t QuantizedLinear::stored_bytes() const {
  uint64_t b = 0;
  for (const Part& p : parts) b += p.tensor->bytes;
  return b;
}

const QuantizedLinear* WeightDescription::find(std::string_view module) const {
  auto it = std::lower_bound(quantized.begin(), quantized.end(), module,
                             [](const QuantizedLinear& q, std::string_view m) { return q.module < m; });
  return it != quantized.end() && it->module == module ? &*it : nullptr;
}

std::pair<std::string_view, std::string_view> split_tensor_name(std::string_view tensor) {
  const size_t dot = tensor.rfind('.');
  if (dot == std::string_view::npos) return {std::string_view(), tensor};
  return {tensor.substr(0, dot), tensor.substr(dot + 1)};
}

bool is_embedding_module(std::string_view m) {
  for (std::string_view s : {"embed_tokens", "wte", "word_embeddings"}) {
    if (m == s || (m.ends_with(s) && m.size() > s.size() && m[m.size() - s.size() - 1] == '.')) return true;
  }
  return false;
}

bool is_router_module(std::string_view m) { return m == "mlp.gate" || m.ends_with(".mlp.gate"); }

int64_t layer_index(std::string_view m) {
  for (size_t pos = m.find("layers."); pos != std::string_view::npos; pos = m.find("layers.", pos + 1)) {
    if (pos > 0 && m[pos - 1] != '.') continue;
    size_t i = pos + 7;
    int64_t v = 0;
    size_t digits = 0;
    while (i < m.size() && m[i] >= '0' && m[i] <= '9' && digits < 9) v = v * 10 + (m[i++] - '0'), ++digits;
    if (digits > 0 && (i == m.size() || m[i] == '.')) return v;
  }
  return -1;
}

Result<WeightDescription> describe_weights(const ReleaseMetadata& release, const DescribeOptions& options) {
  std::optional<Json> config;
  if (release.config_json) {
    auto j = parse_json(*release.config_json, "config.json");
    if (!j.ok() || !j->is_object()) {
      return detail::field_error(reasons::kInvalidQuantizationConfig, "config.json", "not a JSON object");
    }
    config = std::move(*j);
  }
  INFERGATE_ASSIGN_OR_RETURN(
      ParsedConfig pc,
      detail::parse_quantization(config ? &*config : nullptr,
                                 release.quantization_json ? &*release.quantization_json : nullptr));
  const Family family = pc.scheme.family;
  const Suffixes sfx = suffixes_of(pc);

  // Group the tensors: parts of quantized linears by module, the rest dense.
  std::unordered_map<std::string_view, const TensorHeader*> by_name;
  std::map<std::string_view, Pending> pending;
  std::vector<const TensorHeader*> dense;
  for (const TensorHeader& t : release.tensors) {
    auto [it, fresh] = by_name.emplace(t.name, &t);
    if (!fresh) {
      return tensor_error(kInvalidSafetensors, t.name, "is in both " + it->second->file + " and " + t.file);
    }
    const auto [module, suffix] = split_tensor_name(t.name);
    const bool fp8_data = is_fp8_family(family) && suffix == "weight";
    if (sfx.has(suffix) && !(fp8_data && !is_fp8_dtype(t.dtype))) {
      Pending& p = pending[module];
      const TensorHeader** slot = suffix == sfx.data    ? &p.data
                                  : suffix == sfx.scale ? &p.scale
                                  : suffix == sfx.zeros ? &p.zeros
                                  : suffix == sfx.g_idx ? &p.g_idx
                                                        : &p.shape;
      *slot = &t;
      continue;
    }
    if (std::find(kQuantSuffixes.begin(), kQuantSuffixes.end(), suffix) != kQuantSuffixes.end()) {
      return unexpected(&t, is_quantized(family)
                                ? "a ." + std::string(suffix) +
                                      " part belongs to another format than the config's " +
                                      std::string(family_name(family))
                                : "a quantized part, but config.json has no quantization_config");
    }
    if (is_fp8_dtype(t.dtype) && !fp8_data) {
      return unexpected(
          &t, "is " + std::string(dtype_name(t.dtype)) + " but " +
                  (is_quantized(family) ? "the config's format is " + std::string(family_name(family))
                                        : std::string("config.json has no quantization_config")));
    }
    // An unquantized weight in an fp8 release (or an fp8 data part of the wrong dtype, if a scale shows up).
    if (fp8_data) pending[module].dense_weight = &t;
    dense.push_back(&t);
  }

  WeightDescription d;
  d.quant_method = pc.quant_method;
  d.config_field = pc.field;
  UnitChecker checker(pc, options.reader);
  for (auto& [module, p] : pending) {
    if (p.data == nullptr) {
      const TensorHeader* part = p.scale ? p.scale : p.zeros ? p.zeros : p.g_idx ? p.g_idx : p.shape;
      if (part == nullptr) continue;  // only a dense weight was noted
      if (p.dense_weight != nullptr && is_fp8_family(family)) {
        return tensor_error(reasons::kQuantPartDtype, p.dense_weight->name,
                            "is " + std::string(dtype_name(p.dense_weight->dtype)) + " but has a " +
                                std::string(split_tensor_name(part->name).second) +
                                ": an fp8 weight is F8_E4M3");
      }
      return tensor_error(reasons::kOrphanQuantPart, part->name,
                          "has no " + std::string(module) + "." + std::string(sfx.data) + " to belong to");
    }
    if (!is_fp8_family(family)) {
      const std::string weight = std::string(module) + ".weight";
      if (by_name.count(weight)) {
        return tensor_error(reasons::kFormatMismatch, weight,
                            "is stored both unquantized and as " + p.data->name);
      }
    }
    INFERGATE_ASSIGN_OR_RETURN(QuantizedLinear q, checker.check(module, p));
    d.quantized_bytes += q.stored_bytes();
    d.quantized.push_back(std::move(q));
  }
  // pending is ordered by module, so d.quantized is sorted.
  std::vector<const TensorHeader*> dense_linear, dense_float;
  for (const TensorHeader* t : dense) {
    const auto [module, suffix] = split_tensor_name(t->name);
    const bool linear = suffix == "weight" && t->shape.size() == 2 && !is_embedding_module(module) &&
                        !is_router_module(module);
    d.dense.push_back({t, linear});
    d.dense_bytes += t->bytes;
    if (linear) dense_linear.push_back(t);
    if (is_wide_float(t->dtype)) dense_float.push_back(t);
  }
  for (const TensorHeader* t : dense_linear) {
    if (!is_wide_float(t->dtype)) {
      return unexpected(t, "a linear weight of dtype " + std::string(dtype_name(t->dtype)) + " is not " +
                               (is_quantized(family)
                                    ? "part of the config's " + std::string(family_name(family)) + " format"
                                    : std::string("a float, and config.json has no quantization_config")));
    }
  }
  if (is_quantized(family) && d.quantized.empty()) {
    return detail::field_error(
        reasons::kFormatMismatch, pc.field,
        "names " + std::string(family_name(family)) + " but no tensor is stored that way");
  }
  INFERGATE_RETURN_IF_ERROR(check_rules(pc, d));

  Scheme& s = pc.scheme;
  if (auto dt = dominant_dtype(dense_linear.empty() ? dense_float : dense_linear)) {
    s.dense_dtype = *dt;
  } else if (!is_quantized(family)) {
    auto any = dominant_dtype(dense);
    return detail::refuse(
        reasons::kUnsupportedQuantization,
        any ? "the release's tensors are " + std::string(dtype_name(*any)) + ", which names no weight format"
            : std::string("the release has no tensors"));
  }
  if (auto sd = checker.scale_dtype()) s.scale_dtype = *sd;
  if (options.reader != nullptr) INFERGATE_RETURN_IF_ERROR(detail::check_values(*options.reader, s, d));
  d.scheme = s;
  INFERGATE_ASSIGN_OR_RETURN(d.word, format_word(s));
  return d;
}

}  // namespace infergate::weights
