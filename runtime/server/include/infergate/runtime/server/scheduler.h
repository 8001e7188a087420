// The continuous-batching scheduler: one thread drives the Engine step by step. At every step requests
// join (admitted in arrival order while a sequence slot under --max-concurrency and the KV blocks for
// their whole pending prompt are free) and leave (finished, cancelled); each running sequence decodes
// one token, and prompts are prefilled in chunks within a per-step token budget. When the blocks for a
// step run out, the youngest running sequence is preempted (its KV freed, its tokens kept) and goes
// back to the head of the queue, to be recomputed later with identical output; nothing is dropped.
//
// Guarantees: FIFO admission (a request never overtakes an earlier one); cancel() frees the sequence's
// blocks before the next step; every submitted request gets exactly one final event (finished, error
// or cancelled). Thread-safety: submit(), cancel(), drain() and the accessors may be called from any
// thread; event callbacks run on the scheduler thread and must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "infergate/engine/engine.h"
#include "infergate/runtime/server/metrics.h"

namespace infergate::runtime::server {

using RequestId = uint64_t;

struct SchedulerOptions {
  int32_t max_concurrency = 8;     // running sequences (at most the engine's slots)
  int32_t max_waiting = 256;       // queued requests beyond which submit() is refused (429)
  int32_t prefill_chunk = 512;     // prompt tokens of one sequence computed in one step
  int32_t max_step_tokens = 2048;  // tokens computed in one step, all sequences together
  // TESTING AID (serve --debug-token-delay-ms): each step that produces tokens is held this long
  // before its tokens are delivered, so every running sequence's time per output token grows by it.
  // Zero (the default) in production.
  std::chrono::milliseconds debug_token_delay{0};
};

// What a request hears back. Exactly one event has final = true.
struct RequestEvent {
  std::vector<engine::GeneratedToken> tokens;  // sampled since the last event
  // Prompt logprobs (SamplingParams::prompt_logprobs) computed since the last event, for prompt tokens
  // 1, 2, ... in order; they all arrive before the first sampled token.
  std::vector<engine::GeneratedToken> prompt_logprobs;
  std::string text;  // newly final text since the last event
  bool final = false;
  engine::FinishReason finish = engine::FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // A failure after submission (the engine refused a step, or the server is shutting down).
  std::optional<Error> error;
};
using EventCallback = std::function<void(const RequestEvent&)>;

struct SubmitRefusal {
  enum Kind { kQueueFull, kDraining, kInvalid } kind;
  Error error;
};

// Counters the tests and the benchmark read.
struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t blocks_used = 0;
  int64_t blocks_total = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t max_running_seen = 0;  // the most sequences running in one step since start
};

class Scheduler {
 public:
  // Starts the scheduler thread. The engine is owned and used only by that thread from now on.
  Scheduler(std::unique_ptr<engine::Engine> engine, SchedulerOptions options, Metrics* metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Refused at once (no event follows) when the waiting queue is full, when
  // draining, or when the engine would refuse it (too long for the context, a token outside the
  // vocabulary, bad sampling parameters).
  struct Submitted {
    RequestId id = 0;
    std::optional<SubmitRefusal> refused;
  };
  Submitted submit(std::vector<int32_t> prompt, engine::SamplingParams params, EventCallback on_event,
                   std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now());
  // Cancels a request (a client that went away): its blocks are freed before the next step and its
  // final event has finish kCancelled. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // Stops admitting new submissions; running and queued requests go on.
  void drain();
  // Waits until no request is queued or running and stats() says so, or the deadline passes; true when
  // idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Cancels everything still queued or running (final events carry an error) and stops the thread.
  void stop();

  SchedulerStats stats() const;
  int64_t max_context() const { return max_context_; }
  int64_t vocab() const { return vocab_; }
  const engine::EngineInfo& engine_info() const { return info_; }
  bool draining() const { return draining_.load(); }

 private:
  struct Request;
  void run();
  void take_incoming();
  void admit_and_step();
  void deliver(Request& r, const engine::SequenceUpdate& u);
  void finish_request(Request& r, std::optional<Error> error);
  void preempt_youngest();
  void update_gauges();

  std::unique_ptr<engine::Engine> engine_;
  SchedulerOptions options_;
  Metrics* metrics_;
  engine::EngineInfo info_;
  int64_t max_context_ = 0;
  int64_t vocab_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::unique_ptr<Request>> incoming_;  // submitted, not yet seen by the thread
  std::vector<RequestId> cancels_;
  int64_t queued_ = 0;          // incoming + waiting (guarded by mu_)
  int64_t in_flight_ = 0;       // submitted and not yet finished (guarded by mu_)
  bool published_idle_ = true;  // stats_ were published with nothing in flight (guarded by mu_)
  bool stop_ = false;
  std::atomic<bool> draining_{false};
  RequestId next_id_ = 1;
  SchedulerStats stats_;  // guarded by mu_ (a copy published after each step)

  // Scheduler-thread state.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<RequestId> waiting_;   // arrival order (preempted ones go back to the front)
  std::vector<RequestId> running_;  // admission order: the back is the youngest
  int64_t preemptions_ = 0;
  int64_t steps_ = 0;
  int64_t finished_ = 0;
  int64_t cancelled_ = 0;
  int64_t max_running_seen_ = 0;

  std::thread thread_;
};

}  // namespace infergate::runtime::server
