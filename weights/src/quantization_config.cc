// Writers of published quantization_config objects.
#include "infergate/weights/quantization_config.h"

namespace infergate::weights {
namespace {

// compressed-tensors' QuantizationArgs as it serialises them (every field, nulls included).
Json ct_args(int bits, const char* type, const char* strategy, const Json& group_size, bool symmetric,
             const Json& actorder, bool dynamic, const Json& observer) {
  return {{"actorder", actorder},
          {"block_structure", nullptr},
          {"dynamic", dynamic},
          {"group_size", group_size},
          {"num_bits", bits},
          {"observer", observer},
          {"observer_kwargs", Json::object()},
          {"strategy", strategy},
          {"symmetric", symmetric},
          {"type", type}};
}

Json ct_config(const char* format, Json group, const std::vector<std::string>& ignore) {
  return {{"config_groups", {{"group_0", std::move(group)}}},
          {"format", format},
          {"global_compression_ratio", nullptr},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
}

}  // namespace

Result<Json> quantization_config_json(const Scheme& s, const std::vector<std::string>& exclusions) {
  switch (s.family) {
    case Family::kFp8Block: {
      Json j = {{"activation_scheme", "dynamic"},
                {"fmt", "e4m3"},
                {"quant_method", "fp8"},
                {"weight_block_size", {s.block[0], s.block[1]}}};
      if (s.scale_ue8m0) j["scale_fmt"] = "ue8m0";
      if (!exclusions.empty()) j["modules_to_not_convert"] = exclusions;
      return j;
    }
    case Family::kFp8Channel: {
      Json group = {
          {"input_activations", ct_args(8, "float", "token", nullptr, true, nullptr, true, nullptr)},
          {"output_activations", nullptr},
          {"targets", {"Linear"}},
          {"weights", ct_args(8, "float", "channel", nullptr, true, nullptr, false, "minmax")}};
      return ct_config("float-quantized", std::move(group), exclusions);
    }
    case Family::kCtInt4: {
      const Json group_size = s.group_size > 0 ? Json(s.group_size) : Json(nullptr);
      Json group = {
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"targets", {"Linear"}},
          {"weights", ct_args(4, "int", s.group_size > 0 ? "group" : "channel", group_size, s.symmetric,
                              s.act_order ? Json("group") : Json(nullptr), false, "minmax")}};
      return ct_config("pack-quantized", std::move(group), exclusions);
    }
    case Family::kAwqInt4:
      return Json{{"bits", 4},
                  {"group_size", s.group_size > 0 ? s.group_size : -1},
                  {"modules_to_not_convert", exclusions.empty() ? Json(nullptr) : Json(exclusions)},
                  {"quant_method", "awq"},
                  {"version", "gemm"},
                  {"zero_point", true}};
    case Family::kGptqInt4: {
      Json j = {{"bits", 4},
                {"checkpoint_format", s.gptq_v2 ? "gptq_v2" : "gptq"},
                {"damp_percent", 0.01},
                {"desc_act", s.act_order},
                {"group_size", s.group_size > 0 ? s.group_size : -1},
                {"quant_method", "gptq"},
                {"static_groups", false},
                {"sym", s.symmetric},
                {"true_sequential", true}};
      if (!exclusions.empty()) j["modules_to_not_convert"] = exclusions;
      return j;
    }
    case Family::kDense:
    case Family::kInfergateInt8:
    case Family::kInfergateInt4: break;
  }
  return Error(ErrorCode::kInvalidArgument,
               "no published quantization_config for " + std::string(family_name(s.family)),
               "UnsupportedQuantization");
}

}  // namespace infergate::weights
