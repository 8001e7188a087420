// Traffic replay (`infergate-runtime bench`): sends a fixed prompt set with fixed sampling parameters
// to a running server at a fixed mean arrival rate (Poisson arrivals from a seed, so two runs send
// the same schedule), streaming every answer, and reports time to first token, time per output
// token and end-to-end latency percentiles, throughput and errors, as JSON and as a table.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/runtime/server/api.h"

namespace infergate::runtime::server {

// One line of a prompt file (JSON Lines): {"name", "kind": "completion"|"chat", "prompt" | "messages",
// "max_tokens"}; optional "temperature", "seed". Lines that are blank or start with '#' are skipped.
struct BenchPrompt {
  std::string name;
  Endpoint endpoint = Endpoint::kCompletions;
  std::string prompt;
  std::vector<ChatMessage> messages;
  int64_t max_tokens = 64;
  double temperature = 0.0;
  std::optional<uint64_t> seed;
};
Result<std::vector<BenchPrompt>> parse_prompts(std::string_view jsonl, std::string_view file_name);
Result<std::vector<BenchPrompt>> load_prompts(const std::filesystem::path& file);
// The bundled default set (long-document summarisation, code completion, multi-turn chat,
// long-context retrieval), compiled into the binary.
std::string_view default_prompts_jsonl();

struct BenchOptions {
  std::string url;         // http://host:port
  std::string model;       // "" asks GET /v1/models
  double rate = 1.0;       // mean requests per second (Poisson); <= 0 is refused
  double duration = 10.0;  // seconds of arrivals
  uint64_t seed = 0;
  int concurrency = 0;  // 0: unbounded (each arrival sent at once); else at most this many in flight
  double request_timeout = 300.0;
  // Overrides of every prompt's max_tokens when > 0.
  int64_t max_tokens = 0;
};

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0, mean = 0;
  size_t count = 0;
};
// Nearest-rank percentiles of `values` (sorted inside).
Percentiles percentiles(std::vector<double> values);

struct BenchReport {
  int64_t sent = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_kind;  // "http_429", "connect", ...
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double wall_seconds = 0;
  double output_tokens_per_second = 0;
  double requests_per_second = 0;
  Percentiles ttft, tpot, e2e;  // seconds
  Json to_json() const;
  std::string to_table() const;
};

// The arrival offsets (seconds from the start) of a Poisson process of `rate` per second over
// `duration` seconds, from `seed`. Deterministic.
std::vector<double> poisson_arrivals(double rate, double duration, uint64_t seed);

Result<BenchReport> run_bench(const BenchOptions& options, const std::vector<BenchPrompt>& prompts);

}  // namespace infergate::runtime::server
