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
};

// Parses and validates a body. `served_model` is the name clients must use ("" accepts any).
Result<GenerateRequest> parse_generate_request(std::string_view body, Endpoint endpoint,
                                               std::string_view served_model, ApiError* error);

// One generated token as the responses report it.
struct TokenLogprob {
  std::string token;  // its text (bytes; may be a partial UTF-8 sequence)
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // alternatives, most likely first
};

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
