// The OpenAI-compatible request and response shapes: parsing and validating request bodies into typed
// requests (every refusal an ApiError naming the parameter), OpenAI-style error bodies, and the JSON
// of responses and server-sent-event chunks for /v1/completions and /v1/chat/completions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::runtime::server {

// An error as the API reports it: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;        // empty: null
  std::string code;         // empty: null
  std::string retry_after;  // 429/503: seconds, sent as Retry-After

  std::string body() const;
  // The reason label of infergate_request_errors_total (the code, or the type when there is none).
  std::string reason() const { return code.empty() ? type : code; }
};
ApiError bad_request(std::string message, std::string param = {}, std::string code = "invalid_value");

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

enum class Endpoint { kCompletions, kChat };

// A validated request; sampling values are already range-checked.
struct GenerateRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::optional<std::string> prompt_text;  // completions: a text prompt
  std::vector<int32_t> prompt_ids;         // completions: a prompt given as token ids
  std::vector<ChatMessage> messages;       // chat
  std::optional<int64_t> max_tokens;       // absent: 16 for completions, the rest of the context for chat
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0: off
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int logprobs = -1;  // -1: none; else top-K alternatives per token (0..20) and the chosen token's
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;
  // completions: the response's text (and, with logprobs, its token lists) starts with the prompt, each
  // prompt token with its logprob given the tokens before it (the first one's is null), as OpenAI's
  // legacy API and lm-eval-harness use it. max_tokens may then be 0 (score the prompt only).
  bool echo = false;
};

// Parses and validates a body. `served_model` is the name clients must use ("" accepts any).
Result<GenerateRequest> parse_generate_request(std::string_view body, Endpoint endpoint,
                                               std::string_view served_model, ApiError* error);

// One token as the responses report it (generated, or a prompt token of an echo).
//
// Token texts: a token's bytes need not be valid UTF-8 (byte-level BPE splits characters), and JSON
// strings must be. The text a response shows is the bytes with every ill-formed subpart replaced by
// U+FFFD (model::unicode::replace_invalid_utf8, as OpenAI and vLLM do); chat's `bytes` keeps the raw
// bytes. In the legacy `top_logprobs` object, alternatives whose shown texts are equal become one key
// holding the LARGEST of their logprobs: the key's value is then a logprob some single token has (the
// greedy choice's entry equals its `token_logprobs` value), never a sum over tokens. eval keys tokens
// by the same shown text on both sides (docs/eval-and-report.md).
struct TokenLogprob {
  std::string token;  // its bytes (may be a partial UTF-8 sequence)
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // alternatives (bytes), most likely first
  bool no_logprob = false;  // the first prompt token of an echo: logprob and top_logprobs are null
  int64_t text_bytes = -1;  // bytes it adds to the response text for text_offset (-1: token.size())
};

// The legacy `top_logprobs` object of one token: shown texts as keys, equal texts merged keeping the
// largest logprob.
Json merged_top_logprobs(const std::vector<std::pair<std::string, double>>& top);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// The whole non-streaming response.
Json completion_response(const GenerateRequest& req, std::string_view id, int64_t created,
                         std::string_view model, std::string_view text, std::string_view finish_reason,
                         const std::vector<TokenLogprob>* logprobs, const Usage& usage);

// Server-sent-event chunks. `text` is the newly decodable text; `finish_reason` is empty until the
// last chunk. The first chat chunk carries the assistant role.
Json stream_chunk(const GenerateRequest& req, std::string_view id, int64_t created, std::string_view model,
                  std::string_view text, const std::vector<TokenLogprob>* logprobs, size_t text_offset,
                  std::string_view finish_reason, bool first);
Json usage_chunk(const GenerateRequest& req, std::string_view id, int64_t created, std::string_view model,
                 const Usage& usage);
// "data: {json}\n\n"; sse_done() is "data: [DONE]\n\n".
std::string sse_event(const Json& j);
std::string sse_done();

// The valid UTF-8 prefix of `bytes` that can be sent now: a multi-byte character cut at the end is
// held back until its remaining bytes arrive (returns the length to send).
size_t complete_utf8_prefix(std::string_view bytes);

// Of `text`, the length that can be sent without risking the start of a stop string: any suffix that
// is a proper prefix of a stop string is held back.
size_t stop_safe_prefix(std::string_view text, const std::vector<std::string>& stop);

}  // namespace infergate::runtime::server
