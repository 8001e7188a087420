// The continuous-batching scheduler over the engine (policy here, mechanisms in runtime/engine).
#include "infergate/runtime/server/scheduler.h"

#include <algorithm>
#include <thread>

#include "infergate/common/log.h"

namespace infergate::runtime::server {

using SteadyClock = std::chrono::steady_clock;

struct Scheduler::Request {
  RequestId id = 0;
  engine::SeqId seq = 0;
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
  EventCallback on_event;
  SteadyClock::time_point arrival;
  bool admitted = false;
  bool has_token = false;
  SteadyClock::time_point last_token;
  int64_t completion_tokens = 0;
};

namespace {
double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

Scheduler::Scheduler(std::unique_ptr<engine::Engine> engine, SchedulerOptions options, Metrics* metrics)
    : engine_(std::move(engine)), options_(options), metrics_(metrics) {
  info_ = engine_->info();
  max_context_ = engine_->max_context();
  vocab_ = engine_->vocab();
  options_.max_concurrency =
      std::max<int32_t>(1, std::min(options_.max_concurrency, engine_->blocks().max_sequences()));
  options_.prefill_chunk = std::max<int32_t>(1, options_.prefill_chunk);
  options_.max_step_tokens = std::max<int32_t>(options_.max_concurrency, options_.max_step_tokens);
  stats_.blocks_total = engine_->blocks().total_blocks();
  update_gauges();
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { stop(); }

Scheduler::Submitted Scheduler::submit(std::vector<int32_t> prompt, engine::SamplingParams params,
                                       EventCallback on_event, SteadyClock::time_point arrival) {
  Submitted out;
  auto refuse = [&](SubmitRefusal::Kind kind, Error e) {
    out.refused = SubmitRefusal{kind, std::move(e)};
    return out;
  };
  if (draining_)
    return refuse(SubmitRefusal::kDraining,
                  unavailable("the server is shutting down").with_reason("Draining"));
  // The engine's own checks, made here so that the caller can answer at once (the engine is only
  // touched by the scheduler thread).
  Status valid = engine::validate_sampling(params);
  if (!valid.ok()) return refuse(SubmitRefusal::kInvalid, valid.error());
  if (prompt.empty())
    return refuse(SubmitRefusal::kInvalid,
                  invalid_argument("the prompt has no tokens").with_reason("EmptyPrompt"));
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_) {
      return refuse(
          SubmitRefusal::kInvalid,
          invalid_argument("prompt token " + std::to_string(i) + " has id " + std::to_string(prompt[i]) +
                           ", outside the vocabulary of " + std::to_string(vocab_))
              .with_reason("TokenOutOfRange"));
    }
  }
  const int64_t need = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (need > max_context_) {
    return refuse(SubmitRefusal::kInvalid,
                  out_of_range("the prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                               std::to_string(params.max_tokens) + ") is longer than the context of " +
                               std::to_string(max_context_) + " tokens")
                      .with_reason("ContextTooLong"));
  }
  auto r = std::make_unique<Request>();
  r->prompt = std::move(prompt);
  r->params = std::move(params);
  r->on_event = std::move(on_event);
  r->arrival = arrival;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_)
      return refuse(SubmitRefusal::kDraining,
                    unavailable("the server is shutting down").with_reason("Draining"));
    if (queued_ >= options_.max_waiting) {
      return refuse(SubmitRefusal::kQueueFull,
                    resource_exhausted("the waiting queue is full (" + std::to_string(options_.max_waiting) +
                                       " requests); retry later")
                        .with_reason("QueueFull"));
    }
    r->id = next_id_++;
    out.id = r->id;
    ++queued_;
    ++in_flight_;
    published_idle_ = false;
    incoming_.push_back(std::move(r));
  }
  cv_.notify_one();
  return out;
}

void Scheduler::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

void Scheduler::drain() { draining_ = true; }

bool Scheduler::wait_idle(SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return in_flight_ == 0 && published_idle_; });
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  draining_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Scheduler::run() {
  for (;;) {
    std::deque<std::unique_ptr<Request>> incoming;
    std::vector<RequestId> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !cancels_.empty() || !running_.empty() || !waiting_.empty();
      });
      if (stop_) break;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
    }
    for (auto& r : incoming) {
      auto seq = engine_->add_sequence(r->prompt, r->params);
      if (!seq.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          --queued_;
        }
        finish_request(*r, std::move(seq).error());
        continue;
      }
      r->seq = *seq;
      waiting_.push_back(r->id);
      requests_.emplace(r->id, std::move(r));
    }
    for (RequestId id : cancels) {
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      Request& r = *it->second;
      (void)engine_->cancel(r.seq);  // frees its blocks now
      auto w = std::find(waiting_.begin(), waiting_.end(), id);
      if (w != waiting_.end()) {
        waiting_.erase(w);
        std::lock_guard<std::mutex> lock(mu_);
        --queued_;
      }
      ++cancelled_;
      finish_request(r, std::nullopt);
    }
    admit_and_step();
    update_gauges();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.running = static_cast<int64_t>(running_.size());
      stats_.waiting = queued_;
      stats_.blocks_used = engine_->blocks().used_blocks();
      stats_.blocks_total = engine_->blocks().total_blocks();
      stats_.preemptions = preemptions_;
      stats_.steps = steps_;
      stats_.finished = finished_;
      stats_.cancelled = cancelled_;
      stats_.max_running_seen = max_running_seen_;
      if (in_flight_ == 0) {
        published_idle_ = true;
        idle_cv_.notify_all();
      }
    }
  }
  // Stopping: whatever is left ends with an error event.
  std::deque<std::unique_ptr<Request>> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
  }
  for (auto& r : incoming)
    finish_request(*r, unavailable("the server shut down before the request ran").with_reason("Draining"));
  std::vector<RequestId> left;
  for (auto& [id, r] : requests_) left.push_back(id);
  std::sort(left.begin(), left.end());
  for (RequestId id : left) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    (void)engine_->cancel(it->second->seq);
    finish_request(*it->second,
                   unavailable("the server shut down before the request finished").with_reason("Draining"));
  }
  update_gauges();
  std::lock_guard<std::mutex> lock(mu_);
  queued_ = 0;
  stats_.running = 0;
  stats_.waiting = 0;
  stats_.blocks_used = engine_->blocks().used_blocks();
  published_idle_ = true;
  idle_cv_.notify_all();
}

void Scheduler::preempt_youngest() {
  if (running_.empty()) return;
  RequestId id = running_.back();
  running_.pop_back();
  Request& r = *requests_.at(id);
  Status s = engine_->preempt(r.seq);
  if (!s.ok()) log::warn("preempt failed", {{"error", s.error().to_string()}});
  waiting_.push_front(id);  // older than everything waiting: FIFO order is kept
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_;
  }
  ++preemptions_;
  if (metrics_) metrics_->add_preemptions(1);
  log::debug("preempted a sequence for lack of KV blocks",
             {{"request", static_cast<unsigned long long>(id)}});
}

void Scheduler::admit_and_step() {
  using engine::StepRequest;
  if (running_.empty() && waiting_.empty()) return;
  const auto& blocks = engine_->blocks();

  std::vector<StepRequest> plan;
  auto plan_blocks = [&] {
    int64_t n = 0;
    for (const auto& p : plan) n += engine_->blocks_needed(p.id, p.max_tokens);
    return n;
  };
  auto pending_of = [&](const Request& r) {
    const engine::SequenceState* st = engine_->sequence(r.seq);
    return st ? st->total_tokens() - st->computed : 0;
  };

  for (;;) {
    plan.clear();
    int64_t budget = options_.max_step_tokens;
    // Running sequences: decode tokens first (one each), then prefill chunks, oldest first.
    for (RequestId id : running_) {
      const Request& r = *requests_.at(id);
      if (pending_of(r) == 1) {
        plan.push_back({r.seq, 1});
        --budget;
      }
    }
    for (RequestId id : running_) {
      const Request& r = *requests_.at(id);
      const int64_t pending = pending_of(r);
      if (pending <= 1 || budget <= 0) continue;
      const int64_t chunk = std::min<int64_t>({pending, options_.prefill_chunk, budget});
      plan.push_back({r.seq, static_cast<int32_t>(chunk)});
      budget -= chunk;
    }
    // The running batch must fit; otherwise the youngest gives its blocks back.
    if (plan_blocks() > blocks.free_blocks() && !running_.empty()) {
      preempt_youngest();
      continue;
    }
    break;
  }

  // Admission, in arrival order: a slot under --max-concurrency, the blocks for the whole pending
  // prompt on top of what this step already needs, and some of the step's token budget.
  int64_t budget = options_.max_step_tokens;
  for (const auto& p : plan) budget -= p.max_tokens;
  int64_t needed = plan_blocks();
  const auto now = SteadyClock::now();
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.max_concurrency &&
         budget > 0) {
    Request& r = *requests_.at(waiting_.front());
    const int64_t all = engine_->blocks_needed(r.seq, 0);
    if (needed + all > blocks.free_blocks()) break;  // FIFO: nobody overtakes the head
    const int64_t pending = pending_of(r);
    const int64_t chunk = std::min<int64_t>({pending, options_.prefill_chunk, budget});
    plan.push_back({r.seq, static_cast<int32_t>(chunk)});
    needed += engine_->blocks_needed(r.seq, static_cast<int32_t>(chunk));
    budget -= chunk;
    running_.push_back(r.id);
    waiting_.pop_front();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --queued_;
    }
    if (!r.admitted) {
      r.admitted = true;
      if (metrics_) {
        metrics_->observe_queue_time(seconds(now - r.arrival));
        metrics_->add_prompt_tokens(static_cast<double>(r.prompt.size()));
      }
    }
  }
  if (plan.empty()) return;
  max_running_seen_ = std::max<int64_t>(max_running_seen_, static_cast<int64_t>(running_.size()));

  auto result = engine_->step(plan);
  ++steps_;
  if (!result.ok()) {
    const Error& e = result.error();
    if (e.code() == ErrorCode::kResourceExhausted && running_.size() > 1) {
      preempt_youngest();  // the next iteration re-plans
      return;
    }
    // The engine refused the step for a reason preemption cannot fix: fail the sequences in it.
    log::error("engine step failed", {{"error", e.to_string()}});
    std::vector<RequestId> failed;
    for (const auto& p : plan) {
      for (RequestId id : running_) {
        if (requests_.at(id)->seq == p.id) failed.push_back(id);
      }
    }
    for (RequestId id : failed) {
      Request& r = *requests_.at(id);
      (void)engine_->cancel(r.seq);
      finish_request(r, Error(e).context("engine step"));
    }
    return;
  }
  if (options_.debug_token_delay.count() > 0) {
    const bool produced = std::any_of(result->updates.begin(), result->updates.end(),
                                      [](const engine::SequenceUpdate& u) { return u.token.has_value(); });
    if (produced) std::this_thread::sleep_for(options_.debug_token_delay);  // a slowed server, on purpose
  }
  std::unordered_map<engine::SeqId, RequestId> by_seq;
  for (RequestId id : running_) by_seq[requests_.at(id)->seq] = id;
  for (const auto& u : result->updates) {
    auto it = by_seq.find(u.id);
    if (it == by_seq.end()) continue;
    deliver(*requests_.at(it->second), u);
  }
}

void Scheduler::deliver(Request& r, const engine::SequenceUpdate& u) {
  const auto now = SteadyClock::now();
  RequestEvent ev;
  if (u.token) {
    ++r.completion_tokens;
    if (metrics_) {
      metrics_->add_generation_tokens(1);
      if (!r.has_token)
        metrics_->observe_ttft(seconds(now - r.arrival));
      else
        metrics_->observe_tpot(seconds(now - r.last_token));
    }
    r.has_token = true;
    r.last_token = now;
    ev.tokens.push_back(*u.token);
  }
  ev.text = u.text;
  ev.prompt_logprobs = u.prompt_logprobs;
  ev.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  ev.completion_tokens = r.completion_tokens;
  if (u.finish != engine::FinishReason::kNone) {
    ev.final = true;
    ev.finish = u.finish;
    if (metrics_) {
      metrics_->observe_e2e(seconds(now - r.arrival));
      metrics_->request_finished();
    }
    ++finished_;
    EventCallback cb = std::move(r.on_event);
    const RequestId id = r.id;
    const engine::SeqId seq = r.seq;
    running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
    engine_->release(seq);
    requests_.erase(id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    if (cb) cb(ev);
    return;
  }
  if ((!ev.tokens.empty() || !ev.text.empty() || !ev.prompt_logprobs.empty()) && r.on_event) r.on_event(ev);
}

// Ends a request that did not finish by itself: cancelled (no error) or failed.
void Scheduler::finish_request(Request& r, std::optional<Error> error) {
  RequestEvent ev;
  ev.final = true;
  ev.finish = engine::FinishReason::kCancelled;
  ev.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  ev.completion_tokens = r.completion_tokens;
  ev.error = std::move(error);
  if (metrics_) {
    metrics_->request_finished();
    metrics_->request_error(ev.error ? (ev.error->reason().empty() ? "engine_error" : ev.error->reason())
                                     : "cancelled");
  }
  EventCallback cb = std::move(r.on_event);
  const RequestId id = r.id;
  if (r.seq != 0 && requests_.count(id)) {
    running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
    engine_->release(r.seq);
    requests_.erase(id);  // r is gone from here on
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
  }
  if (cb) cb(ev);
}

void Scheduler::update_gauges() {
  if (!metrics_) return;
  int64_t queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = queued_;
  }
  metrics_->set_running(static_cast<double>(running_.size()));
  metrics_->set_waiting(static_cast<double>(queued));
  metrics_->set_kv_blocks(static_cast<double>(engine_->blocks().used_blocks()),
                          static_cast<double>(engine_->blocks().total_blocks()));
}

}  // namespace infergate::runtime::server
