// What the operator knows about each engine, as data: one EngineProfile per engine kind and version
// range. A profile says which flag spellings the engine's own argument parser accepts for the knobs
// the operator derives from the spec (so engine.args cannot override one under another spelling),
// which flags would make the engine read something the agent did not verify, the KV-cache dtypes and
// weight formats it runs and how they are spelled on its command line, the environment its process
// needs in a non-root pod with a read-only root filesystem, and the Prometheus series the rollout's
// performance gate reads from it. The adapters in engine.cc and the gates in rollout/ read these
// tables; engine_profile.cc cites the source file and version each row was read from.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/operator/api/enums.h"

namespace infergate::op::api {

// A Prometheus series as a gate selects it: a metric name and, per label, the values it may have
// (empty: any series of that name).
struct SeriesSelector {
  std::string name;
  std::map<std::string, std::vector<std::string>> labels;
  bool empty() const { return name.empty(); }
};

// The series behind the performance gate's three measurements. Each list holds the spellings of one
// quantity in order of preference (the current name first, then the names older releases used): the
// first one a server exports is the one read. An empty list: the engine has no such series, and a
// threshold on that quantity cannot be measured on it.
struct EngineMetrics {
  std::vector<SeriesSelector> ttft;      // histogram: time to first token, seconds
  std::vector<SeriesSelector> tpot;      // histogram: time between output tokens, seconds
  std::vector<SeriesSelector> requests;  // counter: requests served (the error rate's denominator)
  std::vector<SeriesSelector> errors;    // counter: requests that failed
  // Whether the engine counts a request that fails as served too (errors / requests), or not
  // (errors / (requests + errors)).
  bool errors_in_requests = true;
};

// How an engine's argument parser matches a user's token to one of its options.
struct ArgGrammar {
  bool equals_form = true;              // `--flag=value` is the flag
  bool underscores_are_dashes = false;  // `--max_model_len` is `--max-model-len` (vLLM)
  bool abbreviations = false;           // a unique prefix is the flag (Python argparse's allow_abbrev)
  bool attached_short_values = false;   // `-tp8` is `-tp 8` (argparse's short options)
};

// A knob the operator owns, with every spelling the engine's parser accepts for it.
struct OwnedFlag {
  std::string field;                   // what sets it: "spec.serving.maxContextLength", "the operator"
  std::vector<std::string> spellings;  // "--max-model-len", ...
};

// One semantic version, or a llama.cpp build number as {0, build, 0}.
struct EngineVersion {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const EngineVersion&) const = default;
  std::string to_string() const;
};

struct EngineProfile {
  EngineKind kind = EngineKind::kBundled;
  std::string_view name;     // "vLLM"
  std::string_view release;  // the versions this row covers, in words: "v0.10.0 and later"
  EngineVersion since;       // the first version this row describes (inclusive)
  // The serving command. Empty for the bundled runtime's arguments-only form is never the case: the
  // operator names the binary, so the agent can wrap it (`infergate-agent exec -- <command>`).
  std::vector<std::string> command;
  ArgGrammar grammar;
  std::vector<OwnedFlag> owned;
  // Flags that make the engine load weights, adapters, configuration or code from somewhere the
  // agent did not verify (another directory, a URL, a hub): refused in engine.args whatever the value.
  std::vector<OwnedFlag> unverified_inputs;
  // Environment variables the engine reads as flags (llama.cpp's LLAMA_ARG_*): refused in
  // spec.podTemplate.env, since they would bypass the engine.args check.
  std::vector<std::string> env_flag_prefixes;
  std::map<KvCacheDtype, std::string> kv_cache_dtype;  // spec value -> the engine's spelling
  // Per quantized weight format, the checkpoint methods the engine reads (engine.quantization), and
  // which of them the operator passes explicitly (the others the engine detects from config.json and
  // then picks its fastest kernel for, e.g. vLLM's awq_marlin for an AWQ checkpoint).
  std::map<WeightFormat, std::vector<std::string>> quantization_methods;
  std::vector<std::string> quantization_passed;
  std::map<std::string, std::string> env;  // the process environment the adapter sets
  EngineMetrics metrics;
  std::string_view metrics_flag;  // the flag that turns /metrics on ("" when always on)
};

// The profile for an engine at a version (nullopt: the newest row, used for an image whose tag says
// no version: "latest", a digest). The bundled runtime has one row.
const EngineProfile& engine_profile(EngineKind kind, std::optional<EngineVersion> version = std::nullopt);
// Every row, oldest first per engine (for tests and docs).
const std::vector<EngineProfile>& engine_profiles();

// The engine version an image reference names in its tag: vLLM's and SGLang's "v0.10.1" (a suffix
// such as "-cu126" ignored), llama.cpp's "server-b6500" / "server-cuda-b6500" / "b6500" build tags.
// nullopt for a tag without a version ("latest", "server-cuda") or a digest-only reference.
std::optional<EngineVersion> image_engine_version(EngineKind kind, std::string_view image);

// The first of `args` that sets an owned flag or an unverified input of `profile`, under any
// spelling its parser accepts; nullopt when none does. Refusal text names the flag and why.
struct ArgConflict {
  std::string arg;    // the user's token
  std::string flag;   // the canonical spelling it matches
  std::string field;  // who owns it
  bool unverified = false;
};
std::optional<ArgConflict> find_arg_conflict(const EngineProfile& profile,
                                             const std::vector<std::string>& args);

}  // namespace infergate::op::api
