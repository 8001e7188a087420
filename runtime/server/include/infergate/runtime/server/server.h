// The runtime server (`infergate-runtime serve`): loads the engine (hashing while loading when a
// verified manifest is given), runs the scheduler, and serves the OpenAI-compatible API, /healthz,
// /readyz and /metrics over HTTP. /healthz answers as soon as the listener is up; /readyz only once the
// model is loaded (and its bytes matched the manifest), and no longer once draining has begun.
//
// Shutdown (SIGTERM in the CLI): begin_drain() turns /readyz false and refuses new generation requests
// with 503; finish_drain() lets queued and running requests finish until the deadline, then cancels
// what is left; stop() closes every connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "infergate/common/result.h"
#include "infergate/http/server.h"
#include "infergate/runtime/server/chat_template.h"
#include "infergate/runtime/server/metrics.h"
#include "infergate/runtime/server/scheduler.h"

namespace infergate::runtime::server {

struct ServeOptions {
  std::filesystem::path model_dir;
  std::string weight_format = "fp16";
  std::string kv_cache_dtype = "fp16";
  int64_t max_context_length = 0;  // 0: the model's
  int32_t max_concurrency = 8;
  std::optional<std::filesystem::path> verified_manifest;
  std::string served_model_name;  // "": the model directory's name
  std::string host = "127.0.0.1";
  int port = 8000;
  // KV-cache memory budget in bytes; 0: enough for max_concurrency sequences at the full context.
  int64_t kv_cache_bytes = 0;
  int32_t max_waiting = 256;
  int32_t prefill_chunk = 512;
  int32_t max_step_tokens = 2048;
  uint64_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds request_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};
  int io_threads = 2;
  int engine_threads = 0;       // 0: the engine's default
  std::string device = "cpu";   // cpu, cuda or auto (engine/device.h)
  int32_t tensor_parallel = 1;  // GPUs the model is split over (cuda only)
  bool cuda_graphs = true;      // cuda only: decode steps replay captured CUDA graphs
  // TESTING AID: see SchedulerOptions::debug_token_delay (serve --debug-token-delay-ms). 0 = off.
  std::chrono::milliseconds debug_token_delay{0};
};

// What the serve command logs and the tests check after loading.
struct ServerInfo {
  std::string model_name;
  std::string weight_format;
  std::string kv_cache_dtype;
  int64_t max_context = 0;
  int64_t kv_blocks = 0;
  int64_t weight_bytes = 0;
  bool verified = false;
  std::string release_digest;
  double load_seconds = 0;
  bool chat_template_fallback = false;
};

class Server {
 public:
  // Listens (so /healthz answers), then loads; returns once ready. A load or verification failure is
  // returned as the error (the listener is closed again).
  static Result<std::unique_ptr<Server>> start(const ServeOptions& options,
                                               const std::function<void(const Server&)>& on_listening = {});
  ~Server();

  int port() const;
  std::string url() const;  // http://host:port
  bool ready() const { return ready_.load(); }
  const ServerInfo& info() const { return info_; }
  Metrics& metrics() { return *metrics_; }
  Scheduler& scheduler() { return *scheduler_; }
  http::Server& http() { return *http_; }

  void begin_drain();
  // Waits for queued and running requests until the deadline (then cancels the rest) and for their
  // responses to be written; true when everything finished in time.
  bool finish_drain(std::chrono::steady_clock::time_point deadline);
  void stop();

  struct Handlers;

 private:
  Server() = default;
  ServeOptions options_;
  ServerInfo info_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<http::Server> http_;
  std::shared_ptr<Handlers> handlers_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
};

}  // namespace infergate::runtime::server
