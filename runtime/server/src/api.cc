// Request validation and response shapes of the OpenAI-compatible API.
#include "infergate/runtime/server/api.h"

#include <cmath>
#include <limits>

#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::server {
namespace {

constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxStop = 4;
constexpr size_t kMaxStopBytes = 256;

std::string type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

ApiError wrong_type(std::string_view param, std::string_view want, const Json& got) {
  return bad_request("'" + std::string(param) + "' must be " + std::string(want) + ", got " + type_name(got),
                     std::string(param), "invalid_type");
}

bool is_integer(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  // 3.0 is accepted as an integer (JSON encoders in some languages write numbers that way).
  if (v.is_number_float()) {
    double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
  }
  return false;
}

int64_t as_int(const Json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return static_cast<int64_t>(v.get<double>());
}

// The field's value, or nullptr when absent or null.
const Json* field(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool parse_token_ids(const Json& arr, std::vector<int32_t>* out, std::string_view param, ApiError* error) {
  for (const auto& v : arr) {
    if (!is_integer(v)) {
      *error = wrong_type(param, "an array of token ids (integers)", v);
      return false;
    }
    int64_t id = as_int(v);
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      *error = bad_request(
          "'" + std::string(param) + "' holds token id " + std::to_string(id) + ", outside the vocabulary",
          std::string(param));
      return false;
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return true;
}

bool parse_content(const Json& v, std::string* out, std::string_view param, ApiError* error) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (v.is_array()) {  // content parts: only text parts are served by a text model
    for (const auto& part : v) {
      if (!part.is_object()) {
        *error = wrong_type(param, "a string or an array of content parts", part);
        return false;
      }
      const Json* type = field(part, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "text") {
        *error = bad_request("'" + std::string(param) + "': only content parts of type 'text' are supported",
                             std::string(param), "unsupported_content");
        return false;
      }
      const Json* text = field(part, "text");
      if (!text || !text->is_string()) {
        *error = wrong_type(std::string(param) + ".text", "a string", text ? *text : Json());
        return false;
      }
      *out += text->get<std::string>();
    }
    return true;
  }
  *error = wrong_type(param, "a string or an array of content parts", v);
  return false;
}

}  // namespace

std::string ApiError::body() const {
  Json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? Json(nullptr) : Json(param);
  e["code"] = code.empty() ? Json(nullptr) : Json(code);
  return dump_json(Json{{"error", e}});
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

Result<GenerateRequest> parse_generate_request(std::string_view body, Endpoint endpoint,
                                               std::string_view served_model, ApiError* error) {
  auto fail = [&](ApiError e) -> Result<GenerateRequest> {
    *error = e;
    return invalid_argument(e.message);
  };
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(bad_request("the request body is not valid JSON", "", "invalid_json"));
  if (!j.is_object()) return fail(wrong_type("body", "a JSON object", j));

  GenerateRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChat;

  if (const Json* v = field(j, "model")) {
    if (!v->is_string()) return fail(wrong_type("model", "a string", *v));
    r.model = v->get<std::string>();
    if (!served_model.empty() && r.model != served_model) {
      ApiError e;
      e.status = 404;
      e.message = "the model '" + r.model + "' does not exist; this server serves '" +
                  std::string(served_model) + "'";
      e.param = "model";
      e.code = "model_not_found";
      return fail(e);
    }
  }
  if (r.model.empty()) r.model = std::string(served_model);

  if (chat) {
    const Json* m = field(j, "messages");
    if (!m) return fail(bad_request("'messages' is required", "messages", "missing_required_parameter"));
    if (!m->is_array()) return fail(wrong_type("messages", "an array", *m));
    if (m->empty()) return fail(bad_request("'messages' must not be empty", "messages"));
    for (size_t i = 0; i < m->size(); ++i) {
      const std::string p = "messages[" + std::to_string(i) + "]";
      const Json& msg = (*m)[i];
      if (!msg.is_object()) return fail(wrong_type(p, "an object", msg));
      const Json* role = field(msg, "role");
      if (!role)
        return fail(bad_request("'" + p + ".role' is required", p + ".role", "missing_required_parameter"));
      if (!role->is_string()) return fail(wrong_type(p + ".role", "a string", *role));
      ChatMessage cm;
      cm.role = role->get<std::string>();
      if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool" &&
          cm.role != "developer") {
        return fail(bad_request(
            "'" + p + ".role' must be one of system, developer, user, assistant, tool; got '" + cm.role + "'",
            p + ".role"));
      }
      const Json* content = field(msg, "content");
      if (!content) {
        if (cm.role != "assistant") {
          return fail(
              bad_request("'" + p + ".content' is required", p + ".content", "missing_required_parameter"));
        }
      } else {
        ApiError e;
        if (!parse_content(*content, &cm.content, p + ".content", &e)) return fail(e);
      }
      r.messages.push_back(std::move(cm));
    }
  } else {
    const Json* p = field(j, "prompt");
    if (!p) return fail(bad_request("'prompt' is required", "prompt", "missing_required_parameter"));
    const Json* one = p;
    if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
      if (p->size() != 1) {
        return fail(bad_request("'prompt' holds " + std::to_string(p->size()) +
                                    " prompts; this server takes one prompt per request",
                                "prompt", "unsupported_value"));
      }
      one = &p->front();
    }
    if (one->is_string()) {
      r.prompt_text = one->get<std::string>();
      if (r.prompt_text->empty()) return fail(bad_request("'prompt' must not be empty", "prompt"));
    } else if (one->is_array()) {
      ApiError e;
      if (!parse_token_ids(*one, &r.prompt_ids, "prompt", &e)) return fail(e);
      if (r.prompt_ids.empty()) return fail(bad_request("'prompt' must not be empty", "prompt"));
    } else {
      return fail(wrong_type("prompt", "a string or an array of token ids", *one));
    }
  }

  if (const Json* v = field(j, "echo")) {
    if (!v->is_boolean()) return fail(wrong_type("echo", "a boolean", *v));
    if (v->get<bool>() && chat) {
      return fail(bad_request("'echo' is only supported on /v1/completions", "echo", "unsupported_value"));
    }
    r.echo = v->get<bool>();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const Json* v = field(j, key)) {
      if (!is_integer(*v)) return fail(wrong_type(key, "an integer", *v));
      int64_t n = as_int(*v);
      // 0 only with echo: the prompt is scored and nothing is generated.
      if (n < (r.echo ? 0 : 1)) {
        return fail(bad_request("'" + std::string(key) + "' must be at least " + (r.echo ? "0" : "1") +
                                    (r.echo ? "" : " (0 only with 'echo': true)") + ", got " +
                                    std::to_string(n),
                                key));
      }
      r.max_tokens = n;
    }
  }
  if (const Json* v = field(j, "temperature")) {
    if (!v->is_number()) return fail(wrong_type("temperature", "a number", *v));
    r.temperature = v->get<double>();
    if (!(r.temperature >= 0.0 && r.temperature <= 2.0)) {
      return fail(bad_request("'temperature' must be between 0 and 2, got " + dump_json(*v), "temperature"));
    }
  }
  if (const Json* v = field(j, "top_p")) {
    if (!v->is_number()) return fail(wrong_type("top_p", "a number", *v));
    r.top_p = v->get<double>();
    if (!(r.top_p > 0.0 && r.top_p <= 1.0)) {
      return fail(bad_request("'top_p' must be in (0, 1], got " + dump_json(*v), "top_p"));
    }
  }
  if (const Json* v = field(j, "top_k")) {
    if (!is_integer(*v)) return fail(wrong_type("top_k", "an integer", *v));
    int64_t k = as_int(*v);
    if (k < -1)
      return fail(
          bad_request("'top_k' must be -1 or 0 (off) or positive, got " + std::to_string(k), "top_k"));
    r.top_k = k < 0 ? 0 : k;
  }
  if (const Json* v = field(j, "seed")) {
    if (!is_integer(*v)) return fail(wrong_type("seed", "an integer", *v));
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(as_int(*v));
  }
  if (const Json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const auto& s : *v) {
        if (!s.is_string()) return fail(wrong_type("stop", "a string or an array of strings", s));
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return fail(wrong_type("stop", "a string or an array of strings", *v));
    }
    if (r.stop.size() > kMaxStop) {
      return fail(
          bad_request("'stop' holds " + std::to_string(r.stop.size()) + " sequences; at most 4", "stop"));
    }
    for (const auto& s : r.stop) {
      if (s.empty()) return fail(bad_request("'stop' sequences must not be empty", "stop"));
      if (s.size() > kMaxStopBytes)
        return fail(bad_request("'stop' sequences are limited to 256 bytes", "stop"));
    }
  }
  if (chat) {
    bool want = false;
    if (const Json* v = field(j, "logprobs")) {
      if (!v->is_boolean()) return fail(wrong_type("logprobs", "a boolean", *v));
      want = v->get<bool>();
    }
    if (const Json* v = field(j, "top_logprobs")) {
      if (!is_integer(*v)) return fail(wrong_type("top_logprobs", "an integer", *v));
      int64_t k = as_int(*v);
      if (k < 0 || k > kMaxLogprobs) {
        return fail(
            bad_request("'top_logprobs' must be between 0 and 20, got " + std::to_string(k), "top_logprobs"));
      }
      if (!want) return fail(bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs"));
      r.logprobs = static_cast<int>(k);
    } else if (want) {
      r.logprobs = 0;
    }
  } else if (const Json* v = field(j, "logprobs")) {
    if (!is_integer(*v)) return fail(wrong_type("logprobs", "an integer", *v));
    int64_t k = as_int(*v);
    if (k < 0 || k > kMaxLogprobs) {
      return fail(bad_request("'logprobs' must be between 0 and 20, got " + std::to_string(k), "logprobs"));
    }
    r.logprobs = static_cast<int>(k);
  }
  if (const Json* v = field(j, "n")) {
    if (!is_integer(*v)) return fail(wrong_type("n", "an integer", *v));
    if (as_int(*v) != 1)
      return fail(bad_request("only 'n': 1 is supported, got " + dump_json(*v), "n", "unsupported_value"));
  }
  if (const Json* v = field(j, "best_of")) {
    if (!is_integer(*v)) return fail(wrong_type("best_of", "an integer", *v));
    if (as_int(*v) != 1)
      return fail(bad_request("only 'best_of': 1 is supported", "best_of", "unsupported_value"));
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (const Json* v = field(j, key)) {
      if (!v->is_number()) return fail(wrong_type(key, "a number", *v));
      double d = v->get<double>();
      if (!(d >= -2.0 && d <= 2.0))
        return fail(bad_request("'" + std::string(key) + "' must be between -2 and 2", key));
      if (d != 0.0)
        return fail(
            bad_request("'" + std::string(key) + "' is not supported (only 0)", key, "unsupported_value"));
    }
  }
  if (const Json* v = field(j, "logit_bias")) {
    if (!v->is_object()) return fail(wrong_type("logit_bias", "an object", *v));
    if (!v->empty())
      return fail(bad_request("'logit_bias' is not supported", "logit_bias", "unsupported_value"));
  }
  if (const Json* v = field(j, "stream")) {
    if (!v->is_boolean()) return fail(wrong_type("stream", "a boolean", *v));
    r.stream = v->get<bool>();
  }
  if (const Json* v = field(j, "stream_options")) {
    if (!v->is_object()) return fail(wrong_type("stream_options", "an object", *v));
    if (!r.stream)
      return fail(bad_request("'stream_options' is only allowed with 'stream': true", "stream_options"));
    if (const Json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) return fail(wrong_type("stream_options.include_usage", "a boolean", *u));
      r.include_usage = u->get<bool>();
    }
  }
  if (r.echo && r.stream) {
    // Not in this server yet: the prompt would have to lead the first chunk, with its logprobs.
    return fail(bad_request("'echo' with 'stream': true is not supported; use a non-streaming request",
                            "echo", "unsupported_value"));
  }
  if (const Json* v = field(j, "ignore_eos")) {
    if (!v->is_boolean()) return fail(wrong_type("ignore_eos", "a boolean", *v));
    r.ignore_eos = v->get<bool>();
  }
  return r;
}

namespace {

std::string shown(const std::string& bytes) { return model::unicode::replace_invalid_utf8(bytes); }

Json chat_token_json(const std::string& token, double logprob) {
  Json bytes = Json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return Json{{"token", shown(token)}, {"logprob", logprob}, {"bytes", bytes}};
}

Json logprobs_json(const GenerateRequest& req, const std::vector<TokenLogprob>& lps, size_t text_offset) {
  if (req.endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const auto& t : lps) {
      Json item = chat_token_json(t.token, t.logprob);
      Json top = Json::array();
      for (const auto& [tok, lp] : t.top) top.push_back(chat_token_json(tok, lp));
      item["top_logprobs"] = top;
      content.push_back(item);
    }
    return Json{{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  size_t offset = text_offset;
  for (const auto& t : lps) {
    tokens.push_back(shown(t.token));
    token_logprobs.push_back(t.no_logprob ? Json(nullptr) : Json(t.logprob));
    top.push_back(t.no_logprob ? Json(nullptr) : merged_top_logprobs(t.top));
    offsets.push_back(offset);
    offset += t.text_bytes >= 0 ? static_cast<size_t>(t.text_bytes) : t.token.size();
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

Json merged_top_logprobs(const std::vector<std::pair<std::string, double>>& top) {
  Json alt = Json::object();
  for (const auto& [tok, lp] : top) {
    std::string key = shown(tok);
    auto it = alt.find(key);
    if (it == alt.end() || lp > it->get<double>()) alt[key] = lp;
  }
  return alt;
}

Json completion_response(const GenerateRequest& req, std::string_view id, int64_t created,
                         std::string_view model, std::string_view text, std::string_view finish_reason,
                         const std::vector<TokenLogprob>* logprobs, const Usage& usage) {
  const bool chat = req.endpoint == Endpoint::kChat;
  Json choice = {{"index", 0}, {"finish_reason", std::string(finish_reason)}};
  // The text as valid UTF-8 (a generation cut by max_tokens inside a character ends in U+FFFD).
  const std::string shown_text = model::unicode::replace_invalid_utf8(text);
  if (chat) {
    choice["message"] = Json{{"role", "assistant"}, {"content", shown_text}};
  } else {
    choice["text"] = shown_text;
  }
  choice["logprobs"] = logprobs ? logprobs_json(req, *logprobs, 0) : Json(nullptr);
  return Json{{"id", std::string(id)},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", std::string(model)},
              {"choices", Json::array({choice})},
              {"usage", usage_json(usage)}};
}

Json stream_chunk(const GenerateRequest& req, std::string_view id, int64_t created, std::string_view model,
                  std::string_view text, const std::vector<TokenLogprob>* logprobs, size_t text_offset,
                  std::string_view finish_reason, bool first) {
  const bool chat = req.endpoint == Endpoint::kChat;
  Json choice = {{"index", 0}};
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] =
      logprobs && !logprobs->empty() ? logprobs_json(req, *logprobs, text_offset) : Json(nullptr);
  choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(std::string(finish_reason));
  return Json{{"id", std::string(id)},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", std::string(model)},
              {"choices", Json::array({choice})}};
}

Json usage_chunk(const GenerateRequest& req, std::string_view id, int64_t created, std::string_view model,
                 const Usage& usage) {
  const bool chat = req.endpoint == Endpoint::kChat;
  return Json{{"id", std::string(id)},    {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},       {"model", std::string(model)},
              {"choices", Json::array()}, {"usage", usage_json(usage)}};
}

std::string sse_event(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_done() { return "data: [DONE]\n\n"; }

size_t complete_utf8_prefix(std::string_view b) {
  // Look back at most 3 bytes for the lead byte of an unfinished sequence.
  const size_t n = b.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(b[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    size_t need = (c & 0x80) == 0      ? 1
                  : (c & 0xE0) == 0xC0 ? 2
                  : (c & 0xF0) == 0xE0 ? 3
                  : (c & 0xF8) == 0xF0 ? 4
                                       : 1;
    return back < need ? n - back : n;
  }
  return n;
}

size_t stop_safe_prefix(std::string_view text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const auto& s : stop) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k) {
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return text.size() - hold;
}

}  // namespace infergate::runtime::server
