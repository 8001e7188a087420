// Host-side sampling: greedy, temperature, top-k, top-p, with log-probabilities.
#include "infergate/engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace infergate::runtime::engine {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

Error bad(std::string field, std::string what) {
  return invalid_argument(field + " " + what)
      .with_reason("InvalidSamplingParameter")
      .with_detail("field", field);
}

// The k most likely tokens of a log-softmax row, most likely first (ties: the smaller id).
std::vector<TokenLogprob> top_of(const std::vector<double>& lp, int32_t top_logprobs) {
  std::vector<TokenLogprob> out;
  if (top_logprobs <= 0) return out;
  const size_t n = lp.size();
  const size_t k = std::min(n, static_cast<size_t>(top_logprobs));
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) {
                      return lp[static_cast<size_t>(a)] != lp[static_cast<size_t>(b)]
                                 ? lp[static_cast<size_t>(a)] > lp[static_cast<size_t>(b)]
                                 : a < b;
                    });
  for (size_t i = 0; i < k; ++i) out.push_back({idx[i], static_cast<float>(lp[static_cast<size_t>(idx[i])])});
  return out;
}

}  // namespace

Status validate_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0 && p.temperature <= 100.0)) {
    return bad("temperature", "must be in [0, 100], got " + std::to_string(p.temperature));
  }
  if (p.top_k < 0) return bad("top_k", "must not be negative, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0 && p.top_p <= 1.0))
    return bad("top_p", "must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.max_tokens < 0) return bad("max_tokens", "must not be negative, got " + std::to_string(p.max_tokens));
  if (p.top_logprobs < 0 || p.top_logprobs > 20) {
    return bad("top_logprobs", "must be in 0..20, got " + std::to_string(p.top_logprobs));
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > 20) {
    return bad("prompt_logprobs", "must be -1 (none) or in 0..20, got " + std::to_string(p.prompt_logprobs));
  }
  for (const auto& s : p.stop_strings) {
    if (s.empty()) return bad("stop", "strings must not be empty");
  }
  return ok_status();
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void log_softmax(std::span<const float> logits, std::span<double> out) {
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  const size_t n = logits.size();
  std::vector<double> lp(n);
  log_softmax(logits, lp);
  SampledToken out;
  // Greedy: the first maximum.
  int32_t chosen = 0;
  if (p.temperature <= 0.0) {
    for (size_t i = 1; i < n; ++i) {
      if (logits[i] > logits[static_cast<size_t>(chosen)]) chosen = static_cast<int32_t>(i);
    }
  } else {
    // Candidates sorted by logit (ties by id), cut by top-k, tempered, cut by top-p, then one draw.
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    size_t k = (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) ? static_cast<size_t>(p.top_k) : n;
    auto cmp = [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] != logits[static_cast<size_t>(b)]
                 ? logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]
                 : a < b;
    };
    if (k < n) {
      std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), cmp);
      idx.resize(k);
    } else {
      std::sort(idx.begin(), idx.end(), cmp);
    }
    const double inv_t = 1.0 / p.temperature;
    const double mx = static_cast<double>(logits[static_cast<size_t>(idx[0])]) * inv_t;
    std::vector<double> w(idx.size());
    double total = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      w[i] = std::exp(static_cast<double>(logits[static_cast<size_t>(idx[i])]) * inv_t - mx);
      total += w[i];
    }
    size_t keep = idx.size();
    if (p.top_p < 1.0) {
      double acc = 0;
      for (size_t i = 0; i < idx.size(); ++i) {
        acc += w[i];
        if (acc >= p.top_p * total) {
          keep = i + 1;
          break;
        }
      }
      total = 0;
      for (size_t i = 0; i < keep; ++i) total += w[i];
    }
    const double u = rng.uniform() * total;
    double acc = 0;
    chosen = idx[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      acc += w[i];
      if (u < acc) {
        chosen = idx[i];
        break;
      }
    }
  }
  out.token = chosen;
  out.logprob = static_cast<float>(lp[static_cast<size_t>(chosen)]);
  out.top = top_of(lp, p.top_logprobs);
  return out;
}

SampledToken score_token(std::span<const float> logits, int32_t token, int32_t top_logprobs) {
  std::vector<double> lp(logits.size());
  log_softmax(logits, lp);
  SampledToken out;
  out.token = token;
  out.logprob = token >= 0 && static_cast<size_t>(token) < lp.size()
                    ? static_cast<float>(lp[static_cast<size_t>(token)])
                    : -INFINITY;
  out.top = top_of(lp, top_logprobs);
  return out;
}

}  // namespace infergate::runtime::engine
