// BlockingHandlers: a pool that grows on demand for handlers that may block, so that I/O threads never do.
#include <algorithm>

#include "infergate/common/log.h"
#include "infergate/http/server.h"

namespace infergate::http {

BlockingHandlers::BlockingHandlers(size_t max_threads) : max_threads_(std::max<size_t>(1, max_threads)) {}

BlockingHandlers::~BlockingHandlers() { stop(); }

Handler BlockingHandlers::wrap(Handler blocking) {
  auto shared = std::make_shared<Handler>(std::move(blocking));
  return [this, shared](std::shared_ptr<Exchange> ex) {
    std::unique_lock lock(mu_);
    const bool can_run = !stopping_ && (idle_ > queue_.size() || threads_.size() < max_threads_);
    if (!can_run) {
      lock.unlock();
      ex->respond(Response{503,
                           "application/json",
                           {{"Retry-After", "1"}},
                           "{\"error\":{\"message\":\"every request handler is busy\",\"code\":\"busy\"}}"});
      return;
    }
    queue_.push_back([shared, ex] { (*shared)(ex); });
    if (idle_ < queue_.size()) threads_.emplace_back([this] { run_worker(); });
    lock.unlock();
    cv_.notify_one();
  };
}

void BlockingHandlers::run_worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left to run
    auto job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      // The exchange is released with the job: an unanswered request gets a 500, an unfinished
      // response is cut (Exchange's contract), and this thread serves the next one.
      log::error("exception escaped a blocking HTTP handler", {{"what", e.what()}});
    }
    job = nullptr;
    lock.lock();
  }
}

void BlockingHandlers::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
}

}  // namespace infergate::http
