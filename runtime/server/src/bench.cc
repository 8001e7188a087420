// Traffic replay: Poisson arrivals, streamed requests, latency percentiles.
#include "infergate/runtime/server/bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/http/client.h"

namespace infergate::runtime::server {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

}  // namespace

Result<std::vector<BenchPrompt>> parse_prompts(std::string_view jsonl, std::string_view file_name) {
  std::vector<BenchPrompt> out;
  size_t line_no = 0, start = 0;
  while (start <= jsonl.size()) {
    size_t nl = jsonl.find('\n', start);
    std::string_view line =
        jsonl.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? jsonl.size() + 1 : nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = std::string(file_name) + ":" + std::to_string(line_no);
    auto bad = [&](const std::string& msg) {
      return Error(ErrorCode::kInvalidArgument, where + ": " + msg, "InvalidPrompts")
          .with_detail("line", std::to_string(line_no));
    };
    INFERGATE_ASSIGN_OR_RETURN(Json j, parse_json(line, where));
    if (!j.is_object()) return bad("each line must be a JSON object");
    BenchPrompt p;
    INFERGATE_ASSIGN_OR_RETURN(p.name,
                               json_string_or(j, "name", "prompt-" + std::to_string(out.size()), where));
    INFERGATE_ASSIGN_OR_RETURN(std::string kind, json_string_or(j, "kind", "completion", where));
    if (kind == "completion") {
      p.endpoint = Endpoint::kCompletions;
      INFERGATE_ASSIGN_OR_RETURN(p.prompt, json_string(j, "prompt", where));
      if (p.prompt.empty()) return bad("'prompt' is empty");
    } else if (kind == "chat") {
      p.endpoint = Endpoint::kChat;
      INFERGATE_ASSIGN_OR_RETURN(const Json* msgs, json_array(j, "messages", where));
      if (msgs->empty()) return bad("'messages' is empty");
      for (size_t i = 0; i < msgs->size(); ++i) {
        const std::string mp = where + ".messages[" + std::to_string(i) + "]";
        ChatMessage m;
        INFERGATE_ASSIGN_OR_RETURN(m.role, json_string((*msgs)[i], "role", mp));
        INFERGATE_ASSIGN_OR_RETURN(m.content, json_string((*msgs)[i], "content", mp));
        p.messages.push_back(std::move(m));
      }
    } else {
      return bad("'kind' must be \"completion\" or \"chat\", got \"" + kind + "\"");
    }
    INFERGATE_ASSIGN_OR_RETURN(p.max_tokens, json_int_or(j, "max_tokens", 64, where));
    if (p.max_tokens < 1) return bad("'max_tokens' must be at least 1");
    INFERGATE_ASSIGN_OR_RETURN(p.temperature, json_number_or(j, "temperature", 0.0, where));
    if (j.contains("seed")) {
      INFERGATE_ASSIGN_OR_RETURN(int64_t seed, json_int(j, "seed", where));
      p.seed = static_cast<uint64_t>(seed);
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) {
    return Error(ErrorCode::kInvalidArgument, std::string(file_name) + ": no prompts", "InvalidPrompts");
  }
  return out;
}

Result<std::vector<BenchPrompt>> load_prompts(const std::filesystem::path& file) {
  INFERGATE_ASSIGN_OR_RETURN(std::string text, read_file(file, 64u << 20));
  return parse_prompts(text, file.string());
}

std::vector<double> poisson_arrivals(double rate, double duration, uint64_t seed) {
  std::vector<double> out;
  if (!(rate > 0) || !(duration > 0)) return out;
  uint64_t state = seed;
  double t = 0;
  for (;;) {
    // u in (0, 1]: -ln(u) / rate is an exponential gap (inverse CDF; no library distribution, so the
    // schedule is the same with every standard library).
    const double u = (static_cast<double>(splitmix64(state) >> 11) + 1.0) / 9007199254740992.0;
    t += -std::log(u) / rate;
    if (t >= duration) break;
    out.push_back(t);
  }
  return out;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, r == 0 ? 0 : r - 1)];
  };
  p.p50 = rank(0.50);
  p.p95 = rank(0.95);
  p.p99 = rank(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

Json BenchReport::to_json() const {
  auto pj = [](const Percentiles& p) {
    return Json{{"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"mean", p.mean}, {"count", p.count}};
  };
  Json errs = Json::object();
  for (const auto& [k, v] : errors_by_kind) errs[k] = v;
  return Json{{"sent", sent},
              {"ok", ok},
              {"errors", errors},
              {"errors_by_kind", errs},
              {"prompt_tokens", prompt_tokens},
              {"output_tokens", output_tokens},
              {"wall_seconds", wall_seconds},
              {"output_tokens_per_second", output_tokens_per_second},
              {"requests_per_second", requests_per_second},
              {"ttft_seconds", pj(ttft)},
              {"tpot_seconds", pj(tpot)},
              {"e2e_seconds", pj(e2e)}};
}

std::string BenchReport::to_table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %10s %10s %10s %10s %8s\n", "latency (ms)", "p50", "p95", "p99",
                "mean", "n");
  out += line;
  auto row = [&](const char* name, const Percentiles& p) {
    std::snprintf(line, sizeof line, "%-16s %10.2f %10.2f %10.2f %10.2f %8zu\n", name, p.p50 * 1e3,
                  p.p95 * 1e3, p.p99 * 1e3, p.mean * 1e3, p.count);
    out += line;
  };
  row("ttft", ttft);
  row("tpot", tpot);
  row("e2e", e2e);
  std::snprintf(line, sizeof line,
                "requests: %lld sent, %lld ok, %lld errors; %.2f req/s; %.1f output tokens/s over %.2f s\n",
                static_cast<long long>(sent), static_cast<long long>(ok), static_cast<long long>(errors),
                requests_per_second, output_tokens_per_second, wall_seconds);
  out += line;
  for (const auto& [k, v] : errors_by_kind) {
    std::snprintf(line, sizeof line, "  error %s: %lld\n", k.c_str(), static_cast<long long>(v));
    out += line;
  }
  return out;
}

Result<BenchReport> run_bench(const BenchOptions& o, const std::vector<BenchPrompt>& prompts) {
  if (!(o.rate > 0) || !std::isfinite(o.rate)) {
    return Error(ErrorCode::kInvalidArgument, "--rate must be a positive number of requests per second",
                 "BadFlag");
  }
  if (!(o.duration > 0) || !std::isfinite(o.duration)) {
    return Error(ErrorCode::kInvalidArgument, "--duration must be a positive number of seconds", "BadFlag");
  }
  if (o.concurrency < 0) return Error(ErrorCode::kInvalidArgument, "--concurrency must be >= 0", "BadFlag");
  if (prompts.empty()) return Error(ErrorCode::kInvalidArgument, "no prompts", "BadFlag");
  http::ClientOptions co;
  co.base_url = o.url;
  co.user_agent = "infergate-runtime-bench";
  INFERGATE_ASSIGN_OR_RETURN(std::unique_ptr<http::Client> client, http::Client::create(co));
  std::string model = o.model;
  if (model.empty()) {
    http::ClientRequest req;
    req.target = "/v1/models";
    req.timeout = std::chrono::milliseconds(10'000);
    INFERGATE_ASSIGN_OR_RETURN(http::ClientResponse resp, client->call(req));
    auto j = parse_json(resp.body, "GET /v1/models");
    if (resp.status != 200 || !j.ok() || !j->contains("data") || !(*j)["data"].is_array() ||
        (*j)["data"].empty() || !(*j)["data"][0].contains("id") || !(*j)["data"][0]["id"].is_string()) {
      return Error(ErrorCode::kUnavailable, "GET /v1/models on " + o.url + " did not name a model",
                   "HttpClient");
    }
    model = (*j)["data"][0]["id"].get<std::string>();
  }

  const std::vector<double> arrivals = poisson_arrivals(o.rate, o.duration, o.seed);
  struct Sample {
    bool ok = false;
    std::string error;
    double ttft = -1, e2e = 0, tpot = -1;
    int64_t prompt_tokens = 0, output_tokens = 0;
  };
  std::vector<Sample> samples(arrivals.size());

  auto one = [&](size_t i) {
    const BenchPrompt& p = prompts[i % prompts.size()];
    Json body = {{"model", model},
                 {"max_tokens", o.max_tokens > 0 ? o.max_tokens : p.max_tokens},
                 {"temperature", p.temperature},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (p.seed) body["seed"] = *p.seed;
    http::ClientRequest req;
    req.method = "POST";
    req.content_type = "application/json";
    if (p.endpoint == Endpoint::kChat) {
      req.target = "/v1/chat/completions";
      Json msgs = Json::array();
      for (const auto& m : p.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
      body["messages"] = msgs;
    } else {
      req.target = "/v1/completions";
      body["prompt"] = p.prompt;
    }
    req.body = dump_json(body);
    req.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout * 1000));
    Sample& s = samples[i];
    const auto t0 = Clock::now();
    Clock::time_point first{}, last{};
    bool done = false;
    std::string stream_error;
    std::string error_body;
    http::SseParser sse([&](std::string_view data) {
      if (data == "[DONE]") {
        done = true;
        return;
      }
      Json j = Json::parse(data, nullptr, false);
      if (j.is_discarded()) {
        stream_error = "bad_event";
        return;
      }
      if (j.contains("error")) {
        stream_error = "stream_error";
        return;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        s.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
        s.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const Json& c = j["choices"][0];
        bool has_token =
            (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) ||
            (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string() &&
             !c["delta"]["content"].get<std::string>().empty()) ||
            (c.contains("logprobs") && !c["logprobs"].is_null());
        if (has_token) {
          const auto now = Clock::now();
          if (first == Clock::time_point{}) first = now;
          last = now;
        }
      }
    });
    auto stream = client->open(req);
    if (!stream.ok()) {
      s.error = "transport";
      return;
    }
    const int status = (*stream)->status();
    for (;;) {
      auto piece = (*stream)->read();
      if (!piece.ok()) {
        s.error = "transport";
        return;
      }
      if (!*piece) break;
      if (status == 200)
        sse.feed(**piece);
      else
        error_body.append(**piece);
    }
    const auto end = Clock::now();
    if (status != 200) {
      s.error = "http_" + std::to_string(status);
      return;
    }
    if (!stream_error.empty()) {
      s.error = stream_error;
      return;
    }
    if (!done) {
      s.error = "incomplete_stream";
      return;
    }
    s.ok = true;
    s.e2e = seconds_since(t0, end);
    if (first != Clock::time_point{}) s.ttft = seconds_since(t0, first);
    if (s.output_tokens > 1 && first != Clock::time_point{}) {
      s.tpot = seconds_since(first, last) / static_cast<double>(s.output_tokens - 1);
    }
  };

  // Workers take requests off a queue; the dispatcher releases each at its arrival time.
  const size_t workers = o.concurrency > 0 ? static_cast<size_t>(o.concurrency)
                                           : std::min<size_t>(std::max<size_t>(arrivals.size(), 1), 256);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> queue;
  bool closed = false;
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return closed || !queue.empty(); });
          if (queue.empty()) return;
          i = queue.front();
          queue.pop_front();
        }
        one(i);
      }
    });
  }
  const auto start = Clock::now();
  for (size_t i = 0; i < arrivals.size(); ++i) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  const double wall = seconds_since(start, Clock::now());

  BenchReport r;
  r.sent = static_cast<int64_t>(samples.size());
  r.wall_seconds = wall;
  std::vector<double> ttft, tpot, e2e;
  for (const auto& s : samples) {
    if (!s.ok) {
      ++r.errors;
      ++r.errors_by_kind[s.error];
      continue;
    }
    ++r.ok;
    r.prompt_tokens += s.prompt_tokens;
    r.output_tokens += s.output_tokens;
    e2e.push_back(s.e2e);
    if (s.ttft >= 0) ttft.push_back(s.ttft);
    if (s.tpot >= 0) tpot.push_back(s.tpot);
  }
  r.ttft = percentiles(ttft);
  r.tpot = percentiles(tpot);
  r.e2e = percentiles(e2e);
  r.output_tokens_per_second = wall > 0 ? static_cast<double>(r.output_tokens) / wall : 0;
  r.requests_per_second = wall > 0 ? static_cast<double>(r.ok) / wall : 0;
  return r;
}

}  // namespace infergate::runtime::server
