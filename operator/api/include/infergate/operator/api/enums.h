// The closed vocabularies of the InferenceModel API: weight formats, KV-cache dtypes, engines and
// rollout stages. The CRD's enums are checked against these lists by a test, so the two never drift.
#pragma once

#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::op::api {

enum class WeightFormat { kFp16, kBf16, kInt8, kInt4 };
enum class KvCacheDtype { kFp16, kBf16, kFp8, kInt8, kInt4 };
enum class EngineKind { kBundled, kVllm, kSglang, kLlamacpp };
// One stage changes one thing (DESIGN.md "Rollout semantics"): the weight format (with its artifact),
// the KV-cache dtype, the capacity limits, or a new artifact release with the same formats.
enum class StageName { kWeights, kKvCache, kCapacity, kArtifact };
// Where a stage is (docs/rollout.md, "The state machine"). kIdle means no stage runs: it is never
// written (status.stage is absent then), so its spelling is not an accepted status value.
enum class StagePhase { kIdle, kDeploying, kVerifying, kAnalyzing, kPromoting, kRollingBack, kFailed };

std::string_view to_string(WeightFormat v);
std::string_view to_string(KvCacheDtype v);
std::string_view to_string(EngineKind v);
std::string_view to_string(StageName v);
std::string_view to_string(StagePhase v);

// Parse the API spelling ("int8", "kvCache", "llamacpp"). `path` names the field in the error, which
// lists the accepted values and carries the reason word "InvalidSpec".
Result<WeightFormat> parse_weight_format(std::string_view text, std::string_view path);
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view text, std::string_view path);
Result<EngineKind> parse_engine_kind(std::string_view text, std::string_view path);
Result<StageName> parse_stage_name(std::string_view text, std::string_view path);
// Every phase but Idle (the spellings status.stage.phase may hold).
Result<StagePhase> parse_stage_phase(std::string_view text, std::string_view path);

// Every accepted spelling, in declaration order (the CRD's enum lists must equal these).
std::vector<std::string_view> weight_format_names();
std::vector<std::string_view> kv_cache_dtype_names();
std::vector<std::string_view> engine_kind_names();
std::vector<std::string_view> stage_names();
std::vector<std::string_view> stage_phase_names();  // without Idle: the CRD's enum

// Bits per stored element (16, 8 or 4): what a capacity planner multiplies by.
int bits_per_element(KvCacheDtype v);
int bits_per_element(WeightFormat v);

}  // namespace infergate::op::api
