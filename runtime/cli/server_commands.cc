// `serve` and `bench`: flag parsing over runtime/server (server.h, bench.h). Exit codes: serve 0 after a
// clean shutdown (SIGTERM/SIGINT, drained), 1 when the model cannot be loaded or verified or the address
// cannot be bound, 2 for bad flags; bench 0 when every request succeeded, 1 when any failed, 2 for bad
// flags or an unreadable prompt file, 3 when the server could not be reached.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/command.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/runtime/server/bench.h"
#include "infergate/runtime/server/server.h"

namespace infergate::runtime::cli {
namespace {
namespace srv = infergate::runtime::server;

const bool kServe = register_command(
    {"serve", "serve a model over an OpenAI-compatible HTTP API with /healthz, /readyz and /metrics",
     [](CLI::App& app) {
       auto o = std::make_shared<srv::ServeOptions>();
       auto manifest = std::make_shared<std::string>();
       auto drain_seconds = std::make_shared<double>(30.0);
       auto request_timeout = std::make_shared<double>(30.0);
       auto write_timeout = std::make_shared<double>(30.0);
       auto token_delay_ms = std::make_shared<int64_t>(0);
       app.add_option("--model", o->model_dir, "model directory (Hugging Face layout)")->required();
       app.add_option("--weight-format", o->weight_format,
                      "fp16, bf16, int8 or int4 (as the directory holds)")
           ->capture_default_str();
       app.add_option("--kv-cache-dtype", o->kv_cache_dtype, "fp16, bf16, fp8, int8, int4 or int4-kivi")
           ->capture_default_str();
       app.add_option("--max-context-length", o->max_context_length, "tokens per sequence (0: the model's)")
           ->capture_default_str();
       app.add_option("--max-concurrency", o->max_concurrency, "sequences running at once")
           ->capture_default_str();
       app.add_option("--verified-manifest", *manifest,
                      "SHA256SUMS of the model directory: every file is hashed while loading and must match");
       app.add_option("--served-model-name", o->served_model_name,
                      "the model name clients use (default: the directory name)");
       app.add_option("--host", o->host, "address to listen on")->capture_default_str();
       app.add_option("--port", o->port, "port (0: any free port; the log line 'listening on' names it)")
           ->capture_default_str()
           ->check(CLI::Range(0, 65535));
       app.add_option("--device", o->device, "cpu, cuda, or auto (CUDA when a GPU is present)")
           ->capture_default_str();
       app.add_option("--tensor-parallel", o->tensor_parallel, "GPUs to split the model over (--device cuda)")
           ->capture_default_str()
           ->check(CLI::Range(1, 64));
       auto graphs = std::make_shared<std::string>("on");
       app.add_option("--cuda-graphs", *graphs,
                      "on or off: decode steps replay captured CUDA graphs (--device cuda); off launches "
                      "every kernel each step")
           ->capture_default_str()
           ->check(CLI::IsMember({"on", "off"}));
       app.add_option("--kv-cache-bytes", o->kv_cache_bytes,
                      "KV-cache memory budget in bytes (0: max-concurrency sequences at the full context)")
           ->capture_default_str();
       app.add_option("--max-waiting", o->max_waiting, "queued requests beyond which new ones get 429")
           ->capture_default_str();
       app.add_option("--prefill-chunk", o->prefill_chunk, "prompt tokens per sequence per step")
           ->capture_default_str();
       app.add_option("--max-step-tokens", o->max_step_tokens, "tokens per step, all sequences together")
           ->capture_default_str();
       app.add_option("--max-body-bytes", o->max_body_bytes, "request bodies above this get 413")
           ->capture_default_str();
       app.add_option(
              "--request-timeout", *request_timeout,
              "seconds a connection has to deliver a whole request (idle and slow clients are closed)")
           ->capture_default_str();
       app.add_option("--write-timeout", *write_timeout, "seconds a stalled response write may take")
           ->capture_default_str();
       app.add_option("--drain-timeout", *drain_seconds,
                      "seconds in-flight requests get to finish after SIGTERM")
           ->capture_default_str();
       app.add_option("--io-threads", o->io_threads, "HTTP I/O threads")->capture_default_str();
       app.add_option("--threads", o->engine_threads, "engine compute threads (0: the engine's default)")
           ->capture_default_str();
       app.add_option("--debug-token-delay-ms", *token_delay_ms,
                      "TESTING AID, off by default: hold every step that produces tokens this many "
                      "milliseconds (a deliberately slow server, for rollout performance-gate tests)")
           ->capture_default_str();
       return [o, manifest, drain_seconds, request_timeout, write_timeout, token_delay_ms, graphs]() -> int {
         if (!manifest->empty()) o->verified_manifest = *manifest;
         o->cuda_graphs = *graphs == "on";
         auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
         if (*request_timeout <= 0 || *write_timeout <= 0 || *drain_seconds < 0) {
           std::cerr << "infergate-runtime serve: timeouts must be positive\n";
           return 2;
         }
         if (*token_delay_ms < 0) {
           std::cerr << "infergate-runtime serve: --debug-token-delay-ms must be 0 or more (got "
                     << *token_delay_ms << ")\n";
           return 2;
         }
         if (*token_delay_ms > 0) {
           o->debug_token_delay = std::chrono::milliseconds(*token_delay_ms);
           log::warn("--debug-token-delay-ms is a testing aid: every step is slowed on purpose",
                     {{"delay_ms", static_cast<long long>(*token_delay_ms)}});
         }
         o->request_timeout = ms(*request_timeout);
         o->write_timeout = ms(*write_timeout);
         // SIGTERM and SIGINT are taken by sigwait below: block them before any thread starts.
         sigset_t set;
         sigemptyset(&set);
         sigaddset(&set, SIGTERM);
         sigaddset(&set, SIGINT);
         pthread_sigmask(SIG_BLOCK, &set, nullptr);
         signal(SIGPIPE, SIG_IGN);
         auto server = srv::Server::start(*o, [](const srv::Server& s) {
           log::info("listening on " + s.url(), {{"port", s.port()}});
         });
         if (!server.ok()) {
           const Error& e = server.error();
           log::error("serve: cannot start", {{"error", e.to_string()}, {"reason", e.reason()}});
           std::cerr << "infergate-runtime serve: " << e.to_string() << "\n";
           return e.reason() == "BadFlag" || e.reason() == "UnknownWeightFormat" ||
                          e.reason() == "UnknownKvCacheDtype"
                      ? 2
                      : 1;
         }
         const auto& info = (*server)->info();
         log::info("ready", {{"model", info.model_name},
                             {"weight_format", info.weight_format},
                             {"kv_cache_dtype", info.kv_cache_dtype},
                             {"max_context", static_cast<long long>(info.max_context)},
                             {"kv_blocks", static_cast<long long>(info.kv_blocks)},
                             {"verified", info.verified},
                             {"release_digest", info.release_digest},
                             {"load_seconds", info.load_seconds}});
         int sig = 0;
         sigwait(&set, &sig);
         log::info("draining",
                   {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"deadline_seconds", *drain_seconds}});
         const bool clean = (*server)->finish_drain(std::chrono::steady_clock::now() + ms(*drain_seconds));
         (*server)->stop();
         log::info("stopped", {{"drained", clean}});
         return 0;
       };
     }});

const bool kBench = register_command(
    {"bench", "replay a prompt set against a running server at a fixed Poisson arrival rate",
     [](CLI::App& app) {
       auto o = std::make_shared<srv::BenchOptions>();
       auto prompts = std::make_shared<std::string>();
       auto json_only = std::make_shared<bool>(false);
       app.add_option("--url", o->url, "server URL, e.g. http://127.0.0.1:8000")->required();
       app.add_option("--prompts", *prompts, "prompt file (JSON Lines); default: the bundled set");
       app.add_option("--rate", o->rate, "mean requests per second (Poisson arrivals)")->required();
       app.add_option("--duration", o->duration, "seconds of arrivals")->required();
       app.add_option("--seed", o->seed, "seed of the arrival schedule")->capture_default_str();
       app.add_option("--concurrency", o->concurrency, "at most this many requests in flight (0: unbounded)")
           ->capture_default_str();
       app.add_option("--model", o->model, "model name (default: the first of GET /v1/models)");
       app.add_option("--max-tokens", o->max_tokens, "override every prompt's max_tokens");
       app.add_option("--request-timeout", o->request_timeout, "seconds per request")->capture_default_str();
       app.add_flag("--json", *json_only, "print only the JSON report");
       return [o, prompts, json_only]() -> int {
         auto set = prompts->empty() ? srv::parse_prompts(srv::default_prompts_jsonl(), "default prompts")
                                     : srv::load_prompts(*prompts);
         if (!set.ok()) {
           std::cerr << "infergate-runtime bench: " << set.error().to_string() << "\n";
           return 2;
         }
         auto report = srv::run_bench(*o, *set);
         if (!report.ok()) {
           std::cerr << "infergate-runtime bench: " << report.error().to_string() << "\n";
           return report.error().reason() == "BadFlag" || report.error().reason() == "BadUrl" ? 2 : 3;
         }
         Json j = report->to_json();
         j["url"] = o->url;
         j["rate"] = o->rate;
         j["duration"] = o->duration;
         j["seed"] = o->seed;
         j["concurrency"] = o->concurrency;
         if (!*json_only) std::cout << report->to_table();
         std::cout << dump_json(j) << "\n";
         return report->errors == 0 ? 0 : 1;
       };
     }});

}  // namespace
}  // namespace infergate::runtime::cli
