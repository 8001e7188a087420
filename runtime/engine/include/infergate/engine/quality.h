// Measuring what compression costs: top-1 agreement and KL divergence between a baseline's and a
// candidate's next-token distributions at the same positions (llama.cpp's perplexity tool reports the
// same two numbers). The engine's quality matrix and `infergate-runtime eval` (issue 10) use these.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/engine/sampling.h"

namespace infergate::runtime::engine {

class Engine;

struct QualityMetrics {
  int64_t positions = 0;
  double top1_agreement = 0;  // fraction of positions where both argmaxes agree (1 when positions == 0)
  double mean_kl = 0;         // mean over positions of KL(baseline || candidate), nats
  double max_kl = 0;
};

// Accumulates positions one at a time.
class QualityAccumulator {
 public:
  // Full distributions: two rows of logits over the same vocabulary.
  void add_logits(std::span<const float> baseline, std::span<const float> candidate);
  // Top-k only (what an OpenAI-style server returns): the baseline's top tokens and logprobs, and the
  // candidate's. KL is computed over the baseline's top-k tokens renormalised, with a candidate token
  // missing from its list given the candidate's smallest listed logprob (a bound, stated in docs).
  // Top-1 compares the first entries.
  void add_top_logprobs(std::span<const TokenLogprob> baseline, std::span<const TokenLogprob> candidate);
  QualityMetrics result() const;

 private:
  int64_t positions_ = 0;
  int64_t agree_ = 0;
  double kl_sum_ = 0;
  double kl_max_ = 0;
};

// KL(p || q) of the softmaxes of two logit rows, in nats, computed in double.
double kl_divergence_logits(std::span<const float> p_logits, std::span<const float> q_logits);

// Teacher-forced comparison of two engines over prompts: each prompt is scored by both
// (Engine::score), and every position's distributions are compared. `chunk` as in score().
Result<QualityMetrics> compare_engines(Engine& baseline, Engine& candidate,
                                       std::span<const std::vector<int32_t>> prompts, int32_t chunk = 0);

// As compare_engines, but on logits already computed: rows [positions, vocab] each.
QualityMetrics compare_logits(std::span<const float> baseline, std::span<const float> candidate,
                              int64_t vocab);

}  // namespace infergate::runtime::engine
