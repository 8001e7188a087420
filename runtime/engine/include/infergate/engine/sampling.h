// Choosing the next token from a row of logits, on the host: greedy, temperature, top-k, top-p with a
// seeded per-request generator; the chosen token's log-probability and the top-k alternatives.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::runtime::engine {

struct SamplingParams {
  // 0: greedy (argmax; ties go to the smallest id). Otherwise logits are divided by it.
  double temperature = 0.0;
  int32_t top_k = 0;   // 0: no limit
  double top_p = 1.0;  // nucleus: the smallest set of most likely tokens with mass >= top_p
  uint64_t seed = 0;   // the request's generator is seeded with this alone
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS tokens (unless ignore_eos)
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  // Alternatives reported per generated token (0..20); the chosen token's logprob is always reported.
  int32_t top_logprobs = 0;
  // Prompt logprobs (OpenAI's `echo` with `logprobs`): -1 none; 0..20 the logprob of every prompt token
  // after the first under the model given the tokens before it, with this many alternatives. The
  // prefill then returns logits for every prompt position (only when asked: it costs a vocab-wide row
  // per prompt token).
  int32_t prompt_logprobs = -1;
};

// Refuses out-of-range values with InvalidArgument naming the field ("temperature", "top_p", ...):
// temperature < 0 or > 100 or NaN, top_k < 0, top_p outside (0, 1], max_tokens < 0, top_logprobs
// outside 0..20, prompt_logprobs outside -1..20, an empty stop string.
Status validate_sampling(const SamplingParams& p);

// The per-request generator: SplitMix64-seeded xoshiro256** (portable, same stream everywhere).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();

 private:
  uint64_t s_[4];
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // natural log of the probability under the model's (untempered) distribution
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // the top_logprobs most likely tokens, most likely first
};

// Samples one token from logits[vocab] and reports log-probabilities from log_softmax(logits) (the
// model's distribution before temperature, top-k and top-p, as OpenAI reports them). Draws exactly one
// uniform from `rng` when sampling (none when greedy), so a sequence's stream depends only on its seed
// and its own tokens.
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, Rng& rng);

// The log-probability of a given `token` (teacher forcing: a prompt token) under logits[vocab] and the
// `top_logprobs` most likely tokens, exactly as sample_token reports them for a token it chose.
SampledToken score_token(std::span<const float> logits, int32_t token, int32_t top_logprobs);

// log_softmax of a row, in double, into out (same size).
void log_softmax(std::span<const float> logits, std::span<double> out);

}  // namespace infergate::runtime::engine
