// String tables for the API's enums.
#include "infergate/operator/api/enums.h"

#include <array>
#include <string>
#include <utility>

namespace infergate::op::api {
namespace {

constexpr std::array<std::pair<WeightFormat, std::string_view>, 4> kWeightFormats{{
    {WeightFormat::kFp16, "fp16"},
    {WeightFormat::kBf16, "bf16"},
    {WeightFormat::kInt8, "int8"},
    {WeightFormat::kInt4, "int4"},
}};
constexpr std::array<std::pair<KvCacheDtype, std::string_view>, 5> kKvDtypes{{
    {KvCacheDtype::kFp16, "fp16"},
    {KvCacheDtype::kBf16, "bf16"},
    {KvCacheDtype::kFp8, "fp8"},
    {KvCacheDtype::kInt8, "int8"},
    {KvCacheDtype::kInt4, "int4"},
}};
constexpr std::array<std::pair<EngineKind, std::string_view>, 4> kEngines{{
    {EngineKind::kBundled, "bundled"},
    {EngineKind::kVllm, "vllm"},
    {EngineKind::kSglang, "sglang"},
    {EngineKind::kLlamacpp, "llamacpp"},
}};
constexpr std::array<std::pair<StageName, std::string_view>, 4> kStages{{
    {StageName::kWeights, "weights"},
    {StageName::kKvCache, "kvCache"},
    {StageName::kCapacity, "capacity"},
    {StageName::kArtifact, "artifact"},
}};

// Idle is not here: it is never stored (no status.stage at all).
constexpr std::array<std::pair<StagePhase, std::string_view>, 6> kPhases{{
    {StagePhase::kDeploying, "Deploying"},
    {StagePhase::kVerifying, "Verifying"},
    {StagePhase::kAnalyzing, "Analyzing"},
    {StagePhase::kPromoting, "Promoting"},
    {StagePhase::kRollingBack, "RollingBack"},
    {StagePhase::kFailed, "Failed"},
}};

template <class E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E v) {
  for (const auto& [e, s] : table) {
    if (e == v) return s;
  }
  return "unknown";
}

template <class E, size_t N>
Result<E> parse_of(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view text,
                   std::string_view path) {
  std::string accepted;
  for (const auto& [e, s] : table) {
    if (s == text) return e;
    if (!accepted.empty()) accepted += ", ";
    accepted += s;
  }
  return invalid_argument(std::string(path) + ": unknown value \"" + std::string(text.substr(0, 64)) +
                          "\" (want one of " + accepted + ")")
      .with_reason("InvalidSpec");
}

template <class E, size_t N>
std::vector<std::string_view> names_of(const std::array<std::pair<E, std::string_view>, N>& table) {
  std::vector<std::string_view> out;
  for (const auto& entry : table) out.push_back(entry.second);
  return out;
}

}  // namespace

std::string_view to_string(WeightFormat v) { return name_of(kWeightFormats, v); }
std::string_view to_string(KvCacheDtype v) { return name_of(kKvDtypes, v); }
std::string_view to_string(EngineKind v) { return name_of(kEngines, v); }
std::string_view to_string(StageName v) { return name_of(kStages, v); }
std::string_view to_string(StagePhase v) { return v == StagePhase::kIdle ? "Idle" : name_of(kPhases, v); }

Result<WeightFormat> parse_weight_format(std::string_view text, std::string_view path) {
  return parse_of(kWeightFormats, text, path);
}
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view text, std::string_view path) {
  return parse_of(kKvDtypes, text, path);
}
Result<EngineKind> parse_engine_kind(std::string_view text, std::string_view path) {
  return parse_of(kEngines, text, path);
}
Result<StageName> parse_stage_name(std::string_view text, std::string_view path) {
  return parse_of(kStages, text, path);
}

Result<StagePhase> parse_stage_phase(std::string_view text, std::string_view path) {
  return parse_of(kPhases, text, path);
}

std::vector<std::string_view> weight_format_names() { return names_of(kWeightFormats); }
std::vector<std::string_view> kv_cache_dtype_names() { return names_of(kKvDtypes); }
std::vector<std::string_view> engine_kind_names() { return names_of(kEngines); }
std::vector<std::string_view> stage_names() { return names_of(kStages); }
std::vector<std::string_view> stage_phase_names() { return names_of(kPhases); }

int bits_per_element(KvCacheDtype v) {
  switch (v) {
    case KvCacheDtype::kFp16:
    case KvCacheDtype::kBf16: return 16;
    case KvCacheDtype::kFp8:
    case KvCacheDtype::kInt8: return 8;
    case KvCacheDtype::kInt4: return 4;
  }
  return 16;
}

int bits_per_element(WeightFormat v) {
  switch (v) {
    case WeightFormat::kFp16:
    case WeightFormat::kBf16: return 16;
    case WeightFormat::kInt8: return 8;
    case WeightFormat::kInt4: return 4;
  }
  return 16;
}

}  // namespace infergate::op::api
