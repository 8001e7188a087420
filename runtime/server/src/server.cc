// The runtime server: routes, the generation endpoints over the scheduler, loading and draining.
#include "infergate/runtime/server/server.h"

#include <ctime>
#include <random>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"
#include "infergate/common/sha256.h"
#include "infergate/engine/engine.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

http::Response json_response(int status, const Json& body) {
  http::Response r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

http::Response error_response(const ApiError& e) {
  http::Response r;
  r.status = e.status;
  r.body = e.body();
  if (!e.retry_after.empty()) r.headers.emplace_back("Retry-After", e.retry_after);
  return r;
}

ApiError api_error(int status, std::string type, std::string code, std::string message,
                   std::string param = {}) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

std::string finish_reason_word(engine::FinishReason f) {
  switch (f) {
    case engine::FinishReason::kStopToken:
    case engine::FinishReason::kStopString: return "stop";
    case engine::FinishReason::kLength: return "length";
    default: return "stop";
  }
}

}  // namespace

struct Server::Handlers {
  Server* server = nullptr;
  std::shared_ptr<const model::Model> model;
  ChatTemplate chat_template = ChatTemplate::chatml();
  std::string bos_token, eos_token;
  std::string model_name;
  std::atomic<uint64_t> counter{0};
  uint64_t id_salt = 0;

  void handle(const std::shared_ptr<http::Exchange>& ex) {
    const http::Request& req = ex->request();
    const std::string& path = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (path == "/healthz") {
      if (!get) return method_not_allowed(ex, "GET");
      return ex->respond(json_response(200, {{"status", "ok"}}));
    }
    if (path == "/readyz") {
      if (!get) return method_not_allowed(ex, "GET");
      if (server->ready()) return ex->respond(json_response(200, {{"status", "ready"}}));
      return ex->respond(json_response(503, {{"status", server->draining_ ? "draining" : "loading"}}));
    }
    if (path == "/metrics") {
      if (!get) return method_not_allowed(ex, "GET");
      http::Response r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = server->metrics_->render();
      return ex->respond(std::move(r));
    }
    if (path == "/v1/models") {
      if (!get) return method_not_allowed(ex, "GET");
      if (!model) return not_ready(ex);
      Json m = {{"id", model_name},
                {"object", "model"},
                {"created", static_cast<int64_t>(std::time(nullptr))},
                {"owned_by", "infergate"},
                {"max_model_len", server->info_.max_context}};
      return ex->respond(json_response(200, {{"object", "list"}, {"data", Json::array({m})}}));
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      if (req.method != "POST") return method_not_allowed(ex, "POST");
      return generate(ex, path == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletions);
    }
    ex->respond(error_response(
        api_error(404, "invalid_request_error", "not_found", "no route for " + req.method + " " + path)));
  }

  void method_not_allowed(const std::shared_ptr<http::Exchange>& ex, const char* allow) {
    http::Response r = error_response(
        api_error(405, "invalid_request_error", "method_not_allowed",
                  ex->request().method + " is not allowed on " + ex->request().path + "; use " + allow));
    r.headers.emplace_back("Allow", allow);
    ex->respond(std::move(r));
  }

  void not_ready(const std::shared_ptr<http::Exchange>& ex) {
    ApiError e = api_error(503, "server_error", server->draining_ ? "shutting_down" : "not_ready",
                           server->draining_ ? "the server is shutting down" : "the model is still loading");
    e.retry_after = "1";
    refuse(ex, e);
  }

  // Every answered generation request counts in requests_total; refusals also by reason.
  void refuse(const std::shared_ptr<http::Exchange>& ex, const ApiError& e) {
    server->metrics_->request_finished();
    server->metrics_->request_error(e.reason());
    ex->respond(error_response(e));
  }

  void generate(const std::shared_ptr<http::Exchange>& ex, Endpoint endpoint) {
    const auto arrival = SteadyClock::now();
    if (!server->ready() || !model) return not_ready(ex);
    ApiError err;
    auto parsed = parse_generate_request(ex->request().body, endpoint, model_name, &err);
    if (!parsed.ok()) return refuse(ex, err);
    auto req = std::make_shared<GenerateRequest>(std::move(parsed).value());

    // The prompt's tokens.
    std::vector<int32_t> prompt;
    const auto& tok = model->tokenizer();
    if (endpoint == Endpoint::kChat) {
      ChatTemplateContext ctx{req->messages, true, bos_token, eos_token};
      auto text = chat_template.render(ctx);
      if (!text.ok())
        return refuse(ex, bad_request(text.error().message(), "messages", "chat_template_error"));
      model::EncodeOptions eo;
      eo.add_special_tokens = false;  // the template writes BOS itself, as apply_chat_template does
      eo.parse_special = true;
      prompt = tok.encode(*text, eo);
    } else if (req->prompt_text) {
      prompt = tok.encode(*req->prompt_text);
    } else {
      prompt = req->prompt_ids;
      for (int32_t id : prompt) {
        if (id >= server->scheduler_->vocab()) {
          return refuse(ex, bad_request("'prompt' holds token id " + std::to_string(id) +
                                            ", outside the vocabulary of " +
                                            std::to_string(server->scheduler_->vocab()),
                                        "prompt"));
        }
      }
    }
    if (prompt.empty()) return refuse(ex, bad_request("the prompt encodes to no tokens", "prompt"));
    const int64_t ctx = server->info_.max_context;
    const int64_t n_prompt = static_cast<int64_t>(prompt.size());
    // A prompt may fill the context only when nothing is generated (echo with max_tokens 0).
    const bool score_only = req->max_tokens && *req->max_tokens == 0;
    if (n_prompt > ctx || (n_prompt == ctx && !score_only)) {
      return refuse(
          ex, bad_request("the prompt has " + std::to_string(n_prompt) + " tokens; this model's context is " +
                              std::to_string(ctx) + " tokens, which leaves no room to generate",
                          endpoint == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded"));
    }
    int64_t max_tokens = req->max_tokens.value_or(endpoint == Endpoint::kChat ? ctx - n_prompt : 16);
    if (n_prompt + max_tokens > ctx) {
      return refuse(ex,
                    bad_request("the prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                    std::to_string(max_tokens) + ") is longer than this model's context of " +
                                    std::to_string(ctx) + " tokens",
                                "max_tokens", "context_length_exceeded"));
    }

    engine::SamplingParams sp;
    sp.temperature = req->temperature;
    sp.top_k = static_cast<int32_t>(std::min<int64_t>(req->top_k, std::numeric_limits<int32_t>::max()));
    sp.top_p = req->top_p;
    sp.seed = req->seed ? *req->seed : (id_salt ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull));
    sp.max_tokens = static_cast<int32_t>(max_tokens);
    sp.stop_strings = req->stop;
    sp.ignore_eos = req->ignore_eos;
    sp.top_logprobs = std::max(0, req->logprobs);
    sp.prompt_logprobs = req->echo && req->logprobs >= 0 ? req->logprobs : -1;

    auto st = std::make_shared<StreamState>();
    st->ex = ex;
    st->req = req;
    st->tokenizer = &tok;
    st->id = std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + request_id();
    st->created = static_cast<int64_t>(std::time(nullptr));
    st->model = model_name;
    if (req->echo) {
      if (req->prompt_text) {
        st->echo_text = *req->prompt_text;
      } else {
        auto text = tok.decode(prompt);
        if (!text.ok()) return refuse(ex, bad_request(text.error().message(), "prompt"));
        st->echo_text = std::move(text).value();
      }
      if (req->logprobs >= 0) st->echo_prompt_logprobs(prompt);
    }
    if (req->stream) ex->start_stream(200, "text/event-stream");

    auto submitted = server->scheduler_->submit(
        std::move(prompt), sp, [st](const RequestEvent& ev) { st->on_event(ev); }, arrival);
    if (submitted.refused) {
      const SubmitRefusal& r = *submitted.refused;
      ApiError e;
      if (r.kind == SubmitRefusal::kQueueFull) {
        e = api_error(429, "rate_limit_error", "queue_full", r.error.message());
        e.retry_after = "1";
      } else if (r.kind == SubmitRefusal::kDraining) {
        e = api_error(503, "server_error", "shutting_down", r.error.message());
        e.retry_after = "1";
      } else {
        e = bad_request(r.error.message(), r.error.reason() == "ContextTooLong" ? "max_tokens" : "",
                        r.error.reason() == "ContextTooLong" ? "context_length_exceeded" : "invalid_value");
      }
      if (req->stream) {
        // The stream has started (200): the error travels as an event, as OpenAI streams do.
        server->metrics_->request_finished();
        server->metrics_->request_error(e.reason());
        ex->write(sse_event(Json::parse(e.body())) + sse_done());
        ex->finish();
        return;
      }
      return refuse(ex, e);
    }
    Scheduler* sched = server->scheduler_.get();
    ex->on_disconnect([sched, id = submitted.id] { sched->cancel(id); });
  }

  std::string request_id() {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(id_salt),
                  static_cast<unsigned long long>(counter.fetch_add(1)));
    return buf;
  }

  // One request's response state; used only from the scheduler thread.
  struct StreamState {
    std::shared_ptr<http::Exchange> ex;
    std::shared_ptr<GenerateRequest> req;
    const model::Tokenizer* tokenizer = nullptr;
    std::string id;
    int64_t created = 0;
    std::string model;
    std::string text;  // everything sent (or, non-streaming, collected) so far
    std::vector<TokenLogprob> logprobs;
    size_t logprobs_sent = 0;
    bool first = true;
    // echo: the prompt's text, and (with logprobs) its tokens, the first with a null logprob.
    std::string echo_text;
    std::vector<TokenLogprob> prompt_logprobs;
    size_t echo_cursor = 0;  // bytes of echo_text matched by prompt tokens so far (for text_offset)

    // How many bytes of the echoed text a prompt token stands for: its bytes where they continue the
    // text, 0 for a special token the tokenizer added (BOS), which the text does not contain.
    int64_t echo_bytes(int32_t token) {
      const std::string_view b = tokenizer->token_bytes(token);
      if (std::string_view(echo_text).substr(echo_cursor).starts_with(b)) {
        echo_cursor += b.size();
        return static_cast<int64_t>(b.size());
      }
      return tokenizer->is_special(token) ? 0 : static_cast<int64_t>(b.size());
    }

    void echo_prompt_logprobs(const std::vector<int32_t>& prompt) {
      TokenLogprob first_token;
      first_token.token = std::string(tokenizer->token_bytes(prompt.front()));
      first_token.no_logprob = true;
      first_token.text_bytes = echo_bytes(prompt.front());
      prompt_logprobs.push_back(std::move(first_token));
    }

    TokenLogprob to_logprob(const engine::GeneratedToken& t) const {
      TokenLogprob out;
      out.token = std::string(tokenizer->token_bytes(t.token));
      out.logprob = t.logprob;
      for (const auto& a : t.top)
        out.top.emplace_back(std::string(tokenizer->token_bytes(a.token)), a.logprob);
      return out;
    }

    void on_event(const RequestEvent& ev) {
      if (req->logprobs >= 0) {
        for (const auto& t : ev.tokens) logprobs.push_back(to_logprob(t));
        if (req->echo) {
          for (const auto& t : ev.prompt_logprobs) {
            prompt_logprobs.push_back(to_logprob(t));
            prompt_logprobs.back().text_bytes = echo_bytes(t.token);
          }
        }
      }
      if (ev.final && ev.finish == engine::FinishReason::kCancelled && !ev.error) {
        ex->finish();  // the client is gone
        return;
      }
      if (ev.error) {
        ApiError e = api_error(ev.error->reason() == "Draining" ? 503 : 500, "server_error",
                               ev.error->reason() == "Draining" ? "shutting_down" : "engine_error",
                               ev.error->message());
        if (req->stream) {
          ex->write(sse_event(Json::parse(e.body())) + sse_done());
          ex->finish();
        } else {
          ex->respond(error_response(e));
        }
        return;
      }
      Usage usage{ev.prompt_tokens, ev.completion_tokens};
      if (!req->stream) {
        text += ev.text;
        if (ev.final) {
          if (req->echo) {
            text = echo_text + text;
            prompt_logprobs.insert(prompt_logprobs.end(), logprobs.begin(), logprobs.end());
            logprobs = std::move(prompt_logprobs);
          }
          Json body = completion_response(*req, id, created, model, text, finish_reason_word(ev.finish),
                                          req->logprobs >= 0 ? &logprobs : nullptr, usage);
          ex->respond(json_response(200, body));
        }
        return;
      }
      std::string out;
      std::vector<TokenLogprob> fresh(logprobs.begin() + static_cast<std::ptrdiff_t>(logprobs_sent),
                                      logprobs.end());
      if (!ev.text.empty() || !fresh.empty() || (first && req->endpoint == Endpoint::kChat)) {
        out += sse_event(stream_chunk(*req, id, created, model, ev.text,
                                      req->logprobs >= 0 ? &fresh : nullptr, text.size(), "", first));
        first = false;
        logprobs_sent = logprobs.size();
        text += ev.text;
      }
      if (ev.final) {
        out += sse_event(stream_chunk(*req, id, created, model, "", nullptr, text.size(),
                                      finish_reason_word(ev.finish), false));
        if (req->include_usage) out += sse_event(usage_chunk(*req, id, created, model, usage));
        out += sse_done();
      }
      if (!out.empty()) ex->write(std::move(out));
      if (ev.final) ex->finish();
    }
  };
};

Result<std::unique_ptr<Server>> Server::start(const ServeOptions& o,
                                              const std::function<void(const Server&)>& on_listening) {
  std::unique_ptr<Server> s(new Server());
  s->options_ = o;
  s->metrics_ = std::make_unique<Metrics>();
  s->handlers_ = std::make_shared<Handlers>();
  s->handlers_->server = s.get();
  s->handlers_->id_salt =
      std::random_device{}() * 0x100000001B3ull ^ static_cast<uint64_t>(std::time(nullptr));

  if (o.max_concurrency < 1)
    return invalid_argument("--max-concurrency must be at least 1").with_reason("BadFlag");
  if (o.max_context_length < 0)
    return invalid_argument("--max-context-length must not be negative").with_reason("BadFlag");
  if (o.kv_cache_bytes < 0)
    return invalid_argument("--kv-cache-bytes must not be negative").with_reason("BadFlag");
  if (o.max_waiting < 0) return invalid_argument("--max-waiting must not be negative").with_reason("BadFlag");
  INFERGATE_ASSIGN_OR_RETURN(engine::WeightFormat wf, engine::parse_weight_format(o.weight_format));
  INFERGATE_ASSIGN_OR_RETURN(engine::KvCacheDtype kv, engine::parse_kv_cache_dtype(o.kv_cache_dtype));

  http::ServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.io_threads = o.io_threads;
  ho.max_body_bytes = o.max_body_bytes;
  ho.request_timeout = o.request_timeout;
  ho.write_timeout = o.write_timeout;
  ho.server_name = "infergate-runtime";
  ho.error_body = [](int status, std::string_view message, std::string_view code) {
    return api_error(status, status >= 500 ? "server_error" : "invalid_request_error", std::string(code),
                     std::string(message))
        .body();
  };
  std::weak_ptr<Handlers> weak = s->handlers_;
  INFERGATE_ASSIGN_OR_RETURN(s->http_, http::Server::start(ho, [weak](std::shared_ptr<http::Exchange> ex) {
                               if (auto h = weak.lock()) h->handle(ex);
                             }));
  if (on_listening) on_listening(*s);

  engine::EngineConfig ec;
  ec.model_dir = o.model_dir;
  ec.weight_format = wf;
  ec.kv_dtype = kv;
  ec.max_context = o.max_context_length;
  ec.max_sequences = o.max_concurrency;
  ec.kv_budget_bytes = o.kv_cache_bytes;
  ec.verified_manifest = o.verified_manifest;
  ec.device = o.device;
  ec.tensor_parallel = o.tensor_parallel;
  ec.cuda_graphs = o.cuda_graphs;
  ec.threads = o.engine_threads;
  auto loaded = engine::load_engine(ec);
  if (!loaded.ok()) {
    s->http_->stop();
    return std::move(loaded).error().context("loading " + o.model_dir.string());
  }
  engine::LoadedEngine le = std::move(loaded).value();
  ServerInfo& info = s->info_;
  info.model_name = o.served_model_name.empty() ? o.model_dir.filename().string() : o.served_model_name;
  if (info.model_name.empty()) info.model_name = o.model_dir.parent_path().filename().string();
  info.weight_format = std::string(engine::weight_format_name(le.engine->info().weight_format));
  info.kv_cache_dtype = std::string(engine::kv_cache_dtype_name(le.engine->info().kv_dtype));
  info.max_context = le.engine->max_context();
  info.kv_blocks = le.engine->blocks().total_blocks();
  info.weight_bytes = le.engine->info().weight_bytes;
  info.verified = le.report.verified;
  info.load_seconds = le.report.load_seconds;
  if (o.verified_manifest && le.report.verified) {
    // The release digest is the SHA-256 of the manifest: the signed statement's subject.
    INFERGATE_ASSIGN_OR_RETURN(std::string manifest, read_file(*o.verified_manifest, 64u << 20));
    INFERGATE_ASSIGN_OR_RETURN(Sha256Digest d, sha256(manifest));
    info.release_digest = "sha256:" + d.hex();
  }

  Handlers& h = *s->handlers_;
  h.model = le.engine->shared_model();
  h.model_name = info.model_name;
  const auto& tc = h.model->tokenizer_config();
  h.bos_token = tc.bos_token.value_or("");
  h.eos_token = tc.eos_token.value_or("");
  if (!tc.chat_template.empty()) {
    auto t = ChatTemplate::compile(tc.chat_template);
    if (t.ok()) {
      h.chat_template = std::move(t).value();
    } else {
      log::warn("the model's chat template is not supported; using ChatML",
                {{"reason", t.error().to_string()}});
    }
  } else {
    log::warn("the model has no chat template; using ChatML");
  }
  info.chat_template_fallback = h.chat_template.is_fallback();

  s->metrics_->set_model_info(
      {info.model_name, info.weight_format, info.kv_cache_dtype, info.release_digest, info.verified});
  s->metrics_->set_weight_bytes(static_cast<double>(info.weight_bytes));
  SchedulerOptions so;
  so.max_concurrency = o.max_concurrency;
  so.max_waiting = o.max_waiting;
  so.prefill_chunk = o.prefill_chunk;
  so.max_step_tokens = o.max_step_tokens;
  so.debug_token_delay = o.debug_token_delay;
  s->scheduler_ = std::make_unique<Scheduler>(std::move(le.engine), so, s->metrics_.get());
  s->ready_.store(true);
  return s;
}

Server::~Server() { stop(); }

int Server::port() const { return http_->port(); }
std::string Server::url() const {
  const std::string& host = http_->host();
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port());
}

void Server::begin_drain() {
  draining_ = true;
  ready_ = false;
  if (scheduler_) scheduler_->drain();
}

bool Server::finish_drain(std::chrono::steady_clock::time_point deadline) {
  begin_drain();
  bool ok = scheduler_ ? scheduler_->wait_idle(deadline) : true;
  if (scheduler_) scheduler_->stop();  // cancels whatever is left, with error events
  // Let the last responses reach their clients (a little past the deadline at most).
  if (http_)
    ok = http_->wait_idle(std::max(deadline, SteadyClock::now() + std::chrono::milliseconds(500))) && ok;
  return ok;
}

void Server::stop() {
  ready_ = false;
  draining_ = true;
  if (scheduler_) scheduler_->stop();
  if (http_) http_->stop();
  handlers_.reset();
}

}  // namespace infergate::runtime::server
