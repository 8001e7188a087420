// HttpTarget: a running OpenAI-compatible server asked through POST /v1/completions, over the
// project's HTTP client (infergate_http_client), whose transport errors become Target reasons here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/http/client.h"
#include "infergate/runtime/eval/target.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::eval {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr size_t kMaxResponseBytes = 64u << 20;

Error bad_response(std::string message) {
  return Error(ErrorCode::kDataLoss, "unexpected response: " + message, "TargetBadResponse");
}

struct Response {
  int status = 0;
  std::string body;
};

// The server's error message from an OpenAI-style {"error": {"message": ...}} body, else the body.
std::string error_message(const std::string& body) {
  auto j = parse_json(body, "error body");
  if (j.ok() && j->is_object() && j->contains("error")) {
    const Json& e = (*j)["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 300);
}

// Logprob values: numbers, or null (the first prompt token of an echo).
std::optional<double> number_or_null(const Json& v) {
  if (v.is_number()) return v.get<double>();
  return std::nullopt;
}

}  // namespace

struct HttpTarget::Impl {
  std::string url;
  std::unique_ptr<http::Client> client;
  int retries = 2;

  Result<Response> send_once(const std::string& method, const std::string& path, const std::string& body) {
    http::ClientRequest req;
    req.method = method;
    req.target = path;
    req.headers = {{"Accept", "application/json"}};
    if (!body.empty()) {
      req.body = body;
      req.content_type = "application/json";
    }
    req.max_body = kMaxResponseBytes;
    auto resp = client->call(req);
    if (!resp.ok()) {
      const Error& e = resp.error();
      if (e.reason() == "BodyTooLarge") return bad_response("a body over 64 MiB");
      if (e.code() == ErrorCode::kDeadlineExceeded) {
        return Error(ErrorCode::kDeadlineExceeded, method + " " + url + path + ": timed out",
                     "TargetTimeout");
      }
      return Error(ErrorCode::kUnavailable, method + " " + url + path + ": " + e.message(),
                   "TargetUnreachable");
    }
    return Response{resp->status, std::move(resp->body)};
  }

  // Sends with retries of transport errors, 429 and 5xx (1 s, 2 s, ...); returns the 2xx body or the error.
  Result<std::string> call(const std::string& method, const std::string& path, const std::string& body) {
    for (int attempt = 0;; ++attempt) {
      auto r = send_once(method, path, body);
      std::optional<Error> err;
      if (!r.ok()) {
        err = std::move(r).error();
      } else if (r->status >= 200 && r->status < 300) {
        return std::move(r->body);
      } else {
        err = Error(r->status == 429 || r->status >= 500 ? ErrorCode::kUnavailable
                                                         : ErrorCode::kInvalidArgument,
                    method + " " + url + path + ": HTTP " + std::to_string(r->status) + ": " +
                        error_message(r->body),
                    "TargetHttpError")
                  .with_detail("status", std::to_string(r->status));
      }
      const bool transient = err->code() == ErrorCode::kUnavailable;
      if (!transient || attempt >= retries) return std::move(*err);
      log::warn("retrying a request to the eval target", {{"error", err->to_string()}});
      std::this_thread::sleep_for(std::chrono::seconds(1 << attempt));
    }
  }
};

HttpTarget::HttpTarget(std::unique_ptr<Impl> impl, std::string model)
    : impl_(std::move(impl)), model_(std::move(model)) {}
HttpTarget::~HttpTarget() = default;

Result<std::unique_ptr<HttpTarget>> HttpTarget::connect(const HttpTargetOptions& options) {
  if (!is_url(options.url)) {
    return invalid_argument("\"" + options.url + "\" is not an http:// or https:// URL")
        .with_reason("BadTarget");
  }
  auto impl = std::make_unique<Impl>();
  impl->url = options.url;
  while (!impl->url.empty() && impl->url.back() == '/') impl->url.pop_back();
  impl->retries = std::max(0, options.retries);
  http::ClientOptions co;
  co.base_url = impl->url;
  co.timeout = options.timeout;
  co.user_agent = "infergate-runtime-eval";
  auto client = http::Client::create(co);
  if (!client.ok()) {
    return invalid_argument("URL \"" + options.url + "\": " + client.error().message())
        .with_reason("BadTarget");
  }
  impl->client = std::move(*client);
  std::string model = options.model;
  if (model.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(std::string body, impl->call("GET", "/v1/models", ""));
    auto j = parse_json(body, "GET /v1/models");
    if (!j.ok() || !j->is_object() || !j->contains("data") || !(*j)["data"].is_array() ||
        (*j)["data"].empty() || !(*j)["data"][0].is_object() || !(*j)["data"][0].contains("id") ||
        !(*j)["data"][0]["id"].is_string()) {
      return bad_response(impl->url + "/v1/models lists no model id");
    }
    model = (*j)["data"][0]["id"].get<std::string>();
  }
  return std::unique_ptr<HttpTarget>(new HttpTarget(std::move(impl), std::move(model)));
}

std::string HttpTarget::describe() const { return impl_->url + " (model " + model_ + ")"; }

void canonicalize_alternatives(GeneratedToken& g) {
  std::vector<TopToken> merged;
  auto add = [&](std::string text, double logprob) {
    text = model::unicode::replace_invalid_utf8(text);
    for (auto& m : merged) {
      if (m.text == text) {
        m.logprob = std::max(m.logprob, logprob);
        return;
      }
    }
    merged.push_back({std::move(text), logprob});
  };
  for (auto& t : g.top) add(std::move(t.text), t.logprob);
  g.text = model::unicode::replace_invalid_utf8(g.text);
  add(g.text, g.logprob);
  std::sort(merged.begin(), merged.end(), [](const TopToken& a, const TopToken& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.text < b.text;
  });
  g.top = std::move(merged);
}

Result<Completion> parse_completion_response(std::string_view body, int32_t k) {
  INFERGATE_ASSIGN_OR_RETURN(Json j, parse_json(body, "completion response"));
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    return bad_response("no choices");
  }
  const Json& c = j["choices"][0];
  if (!c.is_object() || !c.contains("text") || !c["text"].is_string())
    return bad_response("choices[0].text missing");
  Completion out;
  out.text = c["text"].get<std::string>();
  if (!c.contains("logprobs") || !c["logprobs"].is_object())
    return bad_response("choices[0].logprobs missing");
  const Json& lp = c["logprobs"];
  if (!lp.contains("tokens") || !lp["tokens"].is_array() || !lp.contains("token_logprobs") ||
      !lp["token_logprobs"].is_array() || lp["tokens"].size() != lp["token_logprobs"].size()) {
    return bad_response("choices[0].logprobs.tokens / token_logprobs missing or of different lengths");
  }
  const Json* tops = nullptr;
  if (k > 0) {
    if (!lp.contains("top_logprobs") || !lp["top_logprobs"].is_array() ||
        lp["top_logprobs"].size() != lp["tokens"].size()) {
      return bad_response("choices[0].logprobs.top_logprobs missing or of a different length");
    }
    tops = &lp["top_logprobs"];
  }
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const Json& t = lp["tokens"][i];
    auto l = number_or_null(lp["token_logprobs"][i]);
    if (!t.is_string() || !l) return bad_response("logprobs.tokens[" + std::to_string(i) + "] malformed");
    GeneratedToken g;
    g.text = t.get<std::string>();
    g.logprob = *l;
    if (tops) {
      const Json& alts = (*tops)[i];
      if (!alts.is_object())
        return bad_response("logprobs.top_logprobs[" + std::to_string(i) + "] is not an object");
      for (const auto& [text, v] : alts.items()) {
        if (!v.is_number())
          return bad_response("logprobs.top_logprobs[" + std::to_string(i) + "] value not a number");
        g.top.push_back({text, v.get<double>()});
      }
      // A JSON object has no order, and a server may omit the chosen token or (an older server) repeat
      // a key: into the key space both kinds of target share.
      canonicalize_alternatives(g);
    }
    out.tokens.push_back(std::move(g));
  }
  return out;
}

Result<TextScore> parse_echo_response(std::string_view body) {
  INFERGATE_ASSIGN_OR_RETURN(Json j, parse_json(body, "echo response"));
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
      !j["choices"][0].is_object()) {
    return bad_response("no choices");
  }
  const Json& c = j["choices"][0];
  if (!c.contains("logprobs") || !c["logprobs"].is_object() || !c["logprobs"].contains("token_logprobs") ||
      !c["logprobs"]["token_logprobs"].is_array()) {
    return bad_response("choices[0].logprobs.token_logprobs missing");
  }
  if (!j.contains("usage") || !j["usage"].is_object() || !j["usage"].contains("prompt_tokens") ||
      !j["usage"]["prompt_tokens"].is_number_integer()) {
    return bad_response("usage.prompt_tokens missing");
  }
  const Json& lps = c["logprobs"]["token_logprobs"];
  const int64_t prompt_tokens = j["usage"]["prompt_tokens"].get<int64_t>();
  if (prompt_tokens < 2 || static_cast<size_t>(prompt_tokens) > lps.size()) {
    return bad_response("usage.prompt_tokens " + std::to_string(prompt_tokens) + " does not fit the " +
                        std::to_string(lps.size()) + " logprobs returned");
  }
  TextScore s;
  s.tokens = prompt_tokens;
  for (int64_t i = 1; i < prompt_tokens; ++i) {
    auto l = number_or_null(lps[static_cast<size_t>(i)]);
    if (!l) return bad_response("token_logprobs[" + std::to_string(i) + "] is not a number");
    s.sum_logprob += *l;
    ++s.scored;
  }
  return s;
}

Result<Completion> HttpTarget::complete(const CompletionRequest& request) {
  Json body = {{"model", model_},   {"prompt", request.prompt},         {"max_tokens", request.max_tokens},
               {"temperature", 0},  {"logprobs", request.top_logprobs}, {"seed", request.seed},
               {"ignore_eos", true}};
  const auto t0 = Clock::now();
  INFERGATE_ASSIGN_OR_RETURN(std::string resp, impl_->call("POST", "/v1/completions", dump_json(body)));
  const double seconds = since(t0);
  auto c = parse_completion_response(resp, request.top_logprobs);
  if (!c.ok()) return std::move(c).error().context(impl_->url + "/v1/completions");
  // A non-streaming response has no first-token time; the whole exchange stands for both.
  c->first_token_seconds = seconds;
  c->seconds = seconds;
  return c;
}

Result<TextScore> HttpTarget::score_text(std::string_view text) {
  // max_tokens 0: the prompt is scored and nothing generated, so a text may fill the whole context.
  Json body = {{"model", model_}, {"prompt", std::string(text)},
               {"max_tokens", 0}, {"temperature", 0},
               {"logprobs", 1},   {"echo", true}};
  auto resp = impl_->call("POST", "/v1/completions", dump_json(body));
  if (!resp.ok() && resp.error().reason() == "TargetHttpError" &&
      resp.error().code() == ErrorCode::kInvalidArgument) {
    body["max_tokens"] = 1;  // servers that want at least one generated token (lm-eval-harness asks so)
    resp = impl_->call("POST", "/v1/completions", dump_json(body));
  }
  if (!resp.ok()) {
    Error e = std::move(resp).error();
    if (e.reason() == "TargetHttpError" && e.code() == ErrorCode::kInvalidArgument) {
      return Error(ErrorCode::kUnimplemented,
                   "the server cannot score a text (prompt logprobs with \"echo\": true): " + e.message(),
                   "ScoringUnsupported");
    }
    return e;
  }
  auto s = parse_echo_response(*resp);
  if (!s.ok()) return std::move(s).error().context(impl_->url + "/v1/completions (echo)");
  return s;
}

}  // namespace infergate::runtime::eval
