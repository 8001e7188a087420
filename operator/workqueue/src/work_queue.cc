// The rate-limited work queue.
#include "infergate/operator/workqueue/work_queue.h"

#include <algorithm>

#include "infergate/operator/workqueue/stop_signal.h"

namespace infergate::op::workqueue {

std::chrono::nanoseconds ExponentialRateLimiter::when(const std::string& key) {
  std::lock_guard lock(mu_);
  int n = failures_[key]++;
  auto d = base_;
  for (int i = 0; i < n && d < max_; ++i) d *= 2;
  return std::min(d, max_);
}

void ExponentialRateLimiter::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  failures_.erase(key);
}

int ExponentialRateLimiter::retries(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

WorkQueue::WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter, QueueObserver* observer)
    : clock_(clock), limiter_(std::move(limiter)), observer_(observer), real_time_(is_real_clock(clock)) {}

void WorkQueue::add_locked(const std::string& key) {
  if (shutdown_ || dirty_.count(key)) return;
  dirty_.insert(key);
  added_at_.emplace(key, clock_.mono_now());
  if (observer_) observer_->on_add();
  if (processing_.count(key)) return;  // re-queued by done()
  queue_.push_back(key);
  if (observer_) observer_->on_depth(queue_.size());
  cv_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mu_);
  add_locked(key);
}

void WorkQueue::add_after(const std::string& key, std::chrono::nanoseconds delay) {
  std::lock_guard lock(mu_);
  if (shutdown_) return;
  if (delay <= std::chrono::nanoseconds::zero()) {
    add_locked(key);
    return;
  }
  MonoTime at = clock_.mono_now() + std::chrono::duration_cast<MonoTime::duration>(delay);
  auto it = delayed_until_.find(key);
  if (it != delayed_until_.end()) {
    if (it->second <= at) return;  // already due earlier
    for (auto d = delayed_.lower_bound(it->second); d != delayed_.end() && d->first == it->second; ++d) {
      if (d->second == key) {
        delayed_.erase(d);
        break;
      }
    }
  }
  delayed_until_[key] = at;
  delayed_.emplace(at, key);
  cv_.notify_one();  // the earliest deadline may have moved
}

void WorkQueue::add_rate_limited(const std::string& key) {
  if (observer_) observer_->on_retry();
  add_after(key, limiter_->when(key));
}

void WorkQueue::forget(const std::string& key) { limiter_->forget(key); }
int WorkQueue::retries(const std::string& key) { return limiter_->retries(key); }

void WorkQueue::pump_locked(MonoTime now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_until_.erase(key);
    add_locked(key);
  }
}

std::optional<std::string> WorkQueue::pop_locked() {
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  dirty_.erase(key);
  processing_.insert(key);
  MonoTime now = clock_.mono_now();
  if (auto it = added_at_.find(key); it != added_at_.end()) {
    if (observer_) observer_->on_wait(now - it->second);
    added_at_.erase(it);
  }
  started_at_[key] = now;
  if (observer_) observer_->on_depth(queue_.size());
  return key;
}

std::optional<std::string> WorkQueue::try_get() {
  std::lock_guard lock(mu_);
  pump_locked(clock_.mono_now());
  return pop_locked();
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock lock(mu_);
  for (;;) {
    pump_locked(clock_.mono_now());
    if (auto key = pop_locked()) return key;
    if (shutdown_) return std::nullopt;
    ++blocked_;
    if (delayed_.empty()) {
      cv_.wait(lock);
    } else if (real_time_) {
      cv_.wait_for(lock, delayed_.begin()->first - clock_.mono_now());
    } else {
      cv_.wait_for(lock, std::chrono::milliseconds(1));  // a fake clock moves without telling us
    }
    --blocked_;
  }
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard lock(mu_);
  processing_.erase(key);
  if (auto it = started_at_.find(key); it != started_at_.end()) {
    if (observer_) observer_->on_work(clock_.mono_now() - it->second);
    started_at_.erase(it);
  }
  if (dirty_.count(key)) {
    queue_.push_back(key);
    if (observer_) observer_->on_depth(queue_.size());
    cv_.notify_one();
  }
}

void WorkQueue::shutdown() {
  std::lock_guard lock(mu_);
  shutdown_ = true;
  delayed_.clear();
  delayed_until_.clear();
  cv_.notify_all();
}

bool WorkQueue::shutting_down() const {
  std::lock_guard lock(mu_);
  return shutdown_;
}

size_t WorkQueue::len() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t WorkQueue::waiting() const {
  std::lock_guard lock(mu_);
  return delayed_.size();
}

size_t WorkQueue::blocked() const {
  std::lock_guard lock(mu_);
  return blocked_;
}

size_t WorkQueue::processing() const {
  std::lock_guard lock(mu_);
  return processing_.size();
}

}  // namespace infergate::op::workqueue
