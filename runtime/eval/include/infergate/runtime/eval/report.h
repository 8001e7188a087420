// `infergate-runtime report`: every weight format x KV dtype combination of one model, run in this
// process with fixed prompts, greedy decoding and a fixed seed, in the four groups that decide a rollout:
//   capacity     weight bytes, KV bytes per token, max concurrency at the configured context, peak memory
//   performance  TTFT, time per output token, throughput, as ratios to fp16/fp16 measured in the same run
//   quality      top-1 agreement, mean KL, perplexity change, retrieval, format-following vs fp16/fp16,
//                with the noise-floor row
//   security     whether the weights were verified while loading, the release digest, verification time
// rendered as JSON (the data), Markdown (a summary) and HTML with inline SVG charts (memory versus
// context length per KV dtype; quality versus KV bytes per token). The capacity numbers are the
// runtime planner's (weights, KV pages, activation workspace and reserves, as `plan` prints them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/types.h"
#include "infergate/runtime/eval/compare.h"
#include "infergate/runtime/eval/suite.h"

namespace infergate::runtime::eval {

struct ReportOptions {
  std::filesystem::path model_dir;  // the dense (fp16/bf16/fp32) checkpoint: the fp16 baseline
  // Compressed copies to use for int8 / int4; a format not given here is quantized from model_dir into
  // a temporary directory (runtime/model's quantizer: int8 per output channel, int4 group 128
  // asymmetric, the `quantize` defaults) and removed afterwards.
  std::map<engine::WeightFormat, std::filesystem::path> weight_dirs;
  std::vector<engine::WeightFormat> weight_formats = {engine::WeightFormat::kF16, engine::WeightFormat::kInt8,
                                                      engine::WeightFormat::kInt4};
  std::vector<engine::KvCacheDtype> kv_dtypes = {engine::KvCacheDtype::kF16, engine::KvCacheDtype::kFp8,
                                                 engine::KvCacheDtype::kInt8, engine::KvCacheDtype::kInt4};
  Suite suite;               // quality prompts; also the performance prompts
  int64_t max_context = 0;   // the configured context (0: the model's)
  int64_t memory_bytes = 0;  // usable memory of the GPU the capacity group plans for (> 0), or:
  std::string gpu;           // a planner catalogue GPU ("h200"): its usable memory, instead of memory_bytes
  int32_t chart_concurrency = 1;  // sequences in the memory-versus-context chart
  int32_t perf_tokens = 32;       // tokens generated per prompt for the performance group
  int32_t perf_repeats = 3;       // times each prompt is generated (the fastest run counts)
  int threads = 0;
  std::string device = "cpu";   // where every combination runs: cpu, cuda or auto (engine/device.h)
  int32_t tensor_parallel = 1;  // GPUs (cuda only)
  // SHA256SUMS to verify each weight directory with while loading; default: <dir>/SHA256SUMS when it
  // exists (a temporary quantized copy has none and is reported as not verified).
  bool verify = true;
  std::function<void(const std::string& line)> progress;
};

struct ComboResult {
  std::string weight_format;   // "fp16", "int8", "int4"
  std::string kv_dtype;        // "fp16", "fp8", "int8", "int4"
  std::string weights_source;  // the directory, or "quantized from <dir>"
  // capacity: the runtime's planner (runtime/planner: the memory model `infergate-runtime plan`
  // prints) for one GPU of memory_bytes at max_context, in this combination's weight scheme
  int64_t weight_bytes = 0;
  double kv_bytes_per_token = 0;
  int64_t kv_block_bytes = 0;    // one 16-token block, all layers
  int64_t kv_staging_bytes = 0;  // per sequence (int4-kivi only)
  int64_t max_concurrency =
      0;  // sequences of max_context tokens that fit (plan's max_concurrency_at_context)
  int64_t peak_memory_bytes = 0;  // the plan's total at max(1, max_concurrency) sequences: weights, KV,
                                  // activation workspace and reserves
  int64_t workspace_bytes = 0;    // of which the activation workspace of one step
  int64_t reserve_bytes = 0;      // of which CUDA context, CUDA graphs, NCCL and fragmentation reserves
  // performance (measured), and ratios to fp16/fp16
  double ttft_seconds = 0, tpot_seconds = 0, tokens_per_second = 0;
  double ttft_ratio = 1, tpot_ratio = 1, throughput_ratio = 1;
  // quality against fp16/fp16
  bool is_baseline = false;
  PairMetrics quality;
  std::optional<double> perplexity, perplexity_change, retrieval_accuracy, format_following;
  // security
  bool verified = false;
  std::string release_digest;       // "sha256:<hex of SHA256SUMS>", empty when there is none
  double verification_seconds = 0;  // hashing time while loading (overlapping the reads)
  double load_seconds = 0;
};

struct MemoryCurve {
  std::string kv_dtype;
  // (context tokens, the plan's total bytes: fp16 weights, KV, workspace and reserves)
  std::vector<std::pair<int64_t, int64_t>> points;
};

struct Report {
  std::string model;  // the directory
  std::string architecture;
  std::string suite;
  int64_t max_context = 0;
  int64_t memory_bytes = 0;  // the usable memory planned for
  std::string gpu;           // the catalogue GPU it is, or "" for a size given as such
  int32_t chart_concurrency = 1;
  int32_t perf_tokens = 0;
  std::optional<PairMetrics> noise_floor;
  std::vector<ComboResult> rows;  // weight-major, in the order asked
  std::vector<MemoryCurve> memory_curves;
  double seconds = 0;
};

// Runs everything. The fp16/fp16 combination is always run (it is the baseline), even when not asked.
Result<Report> run_report(const ReportOptions& options);

std::string report_json(const Report& report);
std::string report_markdown(const Report& report);
std::string report_html(const Report& report);
// Writes report.json, report.md and report.html into `dir` (created), each atomically.
Status write_report(const Report& report, const std::filesystem::path& dir);

// "1.50 GiB" style.
std::string human_bytes(double bytes);
// Parses "141GB", "80GiB", "512MiB", "1e9" (bytes); refuses anything else (InvalidArgument).
Result<int64_t> parse_bytes(std::string_view text);

}  // namespace infergate::runtime::eval
