// The comparison `infergate-runtime eval` runs: a candidate against a baseline on a suite, with greedy
// decoding, giving top-1 agreement, mean KL of the top logprobs, perplexity change, retrieval accuracy
// and format-following rate, a noise-floor row, and a verdict against thresholds.
//
// Positions are compared in lockstep: both sides complete the same prompt; positions are compared while
// their tokens agree (identical contexts); at the first disagreement that position is counted and both
// sides are re-synchronised on the baseline's text so far (the context becomes prompt + the baseline's
// tokens up to and including it, and both complete again). Every compared position therefore has the
// same context on both sides, and a candidate that disagrees costs one more round per disagreement.
// Exact definitions (and the top-k truncation of KL) are in docs/eval-and-report.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/eval/suite.h"
#include "infergate/runtime/eval/target.h"

namespace infergate::runtime::eval {

// One task's outcome.
struct TaskResult {
  std::string id;
  TaskKind kind = TaskKind::kText;
  int64_t positions = 0;
  double top1_agreement = 1;
  double mean_kl = 0;
  int32_t resyncs = 0;
  std::string baseline_text;  // each side's free-running completion of the prompt
  std::string candidate_text;
  // needle: the answer contains the needle's value; json: the output is a JSON object with the keys.
  bool baseline_correct = false;
  bool candidate_correct = false;
  // needle / json: the candidate is correct, or answers exactly as the baseline does (not worse).
  bool passed = true;
};

struct PairMetrics {
  int64_t positions = 0;
  double top1_agreement = 1;
  double mean_kl = 0;
  double max_kl = 0;
};

struct EvalMetrics {
  PairMetrics pair;
  std::optional<double> baseline_perplexity, candidate_perplexity;
  std::optional<double> perplexity_change;   // (candidate - baseline) / baseline; nullopt: not measurable
  std::string perplexity_note;               // why it is missing
  std::optional<double> retrieval_accuracy;  // nullopt: the suite has no needle task
  std::optional<double> format_following;    // nullopt: the suite has no json task
};

// Thresholds; an unset one is not checked.
struct Thresholds {
  std::optional<double> min_top1_agreement;
  std::optional<double> max_mean_kl;
  std::optional<double> max_perplexity_change;
  std::optional<double> min_retrieval_accuracy;
  std::optional<double> min_format_following;
};
// Refuses NaN, negative values, and agreement / accuracy / rate thresholds above 1 (InvalidArgument
// naming the flag).
Status validate_thresholds(const Thresholds& t);

struct Failure {
  std::string metric;  // "mean_kl", ...
  double value = 0;
  double threshold = 0;
  std::string op;  // "<=" or ">=": what the value had to satisfy
};

struct EvalResult {
  std::string suite;
  std::string baseline, candidate;  // Target::describe()
  EvalMetrics metrics;
  std::optional<PairMetrics> noise_floor;
  std::vector<TaskResult> tasks;
  std::vector<Failure> failed;
  // Metrics a threshold was given for that could not be measured (the verdict is then inconclusive).
  std::vector<std::string> unmeasured;
  bool passed = false;
  double seconds = 0;
};

struct EvalOptions {
  int32_t top_logprobs = 0;  // 0: the suite's
  bool noise_floor = true;
  // The noise floor: the baseline against itself through a second path (for a model directory, the
  // prompt prefilled in chunks of this many tokens; a server simply gets the same requests again).
  int32_t noise_floor_prefill_chunk = 16;
  std::function<void(const std::string& line)> progress;  // one line per task
};

// Runs the suite on both targets (and the noise floor on the baseline). Errors from either target end
// the run (the caller reports it as inconclusive), except a target that cannot score the perplexity
// text, which leaves perplexity_change unmeasured with the reason in perplexity_note.
Result<EvalResult> run_eval(const Suite& suite, Target& baseline, Target& candidate,
                            const EvalOptions& options);

// Fills failed / unmeasured / passed from the metrics.
void apply_thresholds(EvalResult& result, const Thresholds& thresholds);

// Whether a json task's output (after the prompt's trailing '{', which is put back) contains a JSON
// object with every required key: the text from its first '{' up to some '}' parses as one.
bool follows_json_format(std::string_view prompt, std::string_view output,
                         const std::vector<std::string>& keys);

// The JSON the quality gate reads (docs/eval-and-report.md): {"suite","passed","metrics":{...},
// "noise_floor":{...},"failed":[...]}; unmeasured metrics are null. Never longer than kMaxResultJsonBytes.
inline constexpr size_t kMaxResultJsonBytes = 4096;
// The "suite" field is the suite as the caller named it (`eval --suite`: a bundled name or a file's
// path), cut at the InferenceModel's own limit for spec.rollout.gates.quality.suite.
inline constexpr size_t kMaxSuiteChars = 253;
std::string result_json(const EvalResult& result);
// The same shape for a run that could not complete: {"suite","passed":false,"inconclusive":true,
// "error":{"reason","message"}}; also at most kMaxResultJsonBytes.
std::string error_json(std::string_view suite, const Error& error);

// A plain-text table: the metrics, the noise-floor row, thresholds and verdict, then one row per task.
std::string result_table(const EvalResult& result, const Thresholds& thresholds);

}  // namespace infergate::runtime::eval
