// Top-1 agreement and KL divergence between two runs.
#include "infergate/engine/quality.h"

#include <algorithm>
#include <cmath>

#include "infergate/engine/engine.h"

namespace infergate::runtime::engine {
namespace {

size_t argmax(std::span<const float> v) {
  size_t b = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[b]) b = i;
  }
  return b;
}

}  // namespace

double kl_divergence_logits(std::span<const float> p_logits, std::span<const float> q_logits) {
  std::vector<double> lp(p_logits.size()), lq(q_logits.size());
  log_softmax(p_logits, lp);
  log_softmax(q_logits, lq);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

void QualityAccumulator::add_logits(std::span<const float> baseline, std::span<const float> candidate) {
  ++positions_;
  if (argmax(baseline) == argmax(candidate)) ++agree_;
  const double kl = kl_divergence_logits(baseline, candidate);
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
}

void QualityAccumulator::add_top_logprobs(std::span<const TokenLogprob> baseline,
                                          std::span<const TokenLogprob> candidate) {
  ++positions_;
  if (!baseline.empty() && !candidate.empty() && baseline[0].token == candidate[0].token) ++agree_;
  if (baseline.empty()) return;
  float floor_lp = 0;
  for (const auto& c : candidate) floor_lp = std::min(floor_lp, c.logprob);
  if (candidate.empty()) floor_lp = -30.0f;
  // Both restricted to the baseline's tokens and renormalised.
  std::vector<double> p, q;
  for (const auto& b : baseline) {
    p.push_back(b.logprob);
    double lq = floor_lp;
    for (const auto& c : candidate) {
      if (c.token == b.token) lq = c.logprob;
    }
    q.push_back(lq);
  }
  auto normalise = [](std::vector<double>& v) {
    double mx = *std::max_element(v.begin(), v.end()), s = 0;
    for (double x : v) s += std::exp(x - mx);
    for (double& x : v) x = x - mx - std::log(s);
  };
  normalise(p);
  normalise(q);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
  kl = std::max(0.0, kl);
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
}

QualityMetrics QualityAccumulator::result() const {
  QualityMetrics m;
  m.positions = positions_;
  m.top1_agreement = positions_ ? static_cast<double>(agree_) / static_cast<double>(positions_) : 1.0;
  m.mean_kl = positions_ ? kl_sum_ / static_cast<double>(positions_) : 0.0;
  m.max_kl = kl_max_;
  return m;
}

QualityMetrics compare_logits(std::span<const float> baseline, std::span<const float> candidate,
                              int64_t vocab) {
  QualityAccumulator acc;
  const size_t v = static_cast<size_t>(vocab);
  const size_t rows = std::min(baseline.size(), candidate.size()) / v;
  for (size_t r = 0; r < rows; ++r) acc.add_logits(baseline.subspan(r * v, v), candidate.subspan(r * v, v));
  return acc.result();
}

Result<QualityMetrics> compare_engines(Engine& baseline, Engine& candidate,
                                       std::span<const std::vector<int32_t>> prompts, int32_t chunk) {
  if (baseline.vocab() != candidate.vocab()) {
    return invalid_argument("the two engines have different vocabularies (" +
                            std::to_string(baseline.vocab()) + " and " + std::to_string(candidate.vocab()) +
                            ")");
  }
  QualityAccumulator acc;
  const size_t v = static_cast<size_t>(baseline.vocab());
  for (const auto& prompt : prompts) {
    INFERGATE_ASSIGN_OR_RETURN(auto a, baseline.score(prompt, chunk));
    INFERGATE_ASSIGN_OR_RETURN(auto b, candidate.score(prompt, chunk));
    for (size_t r = 0; r < prompt.size(); ++r) {
      acc.add_logits(std::span<const float>(a).subspan(r * v, v),
                     std::span<const float>(b).subspan(r * v, v));
    }
  }
  return acc.result();
}

}  // namespace infergate::runtime::engine
