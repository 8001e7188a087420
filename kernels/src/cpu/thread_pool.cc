// The CPU ops' worker pool and its process-wide instance.
#include "thread_pool.h"

#include <chrono>
#include <cstdlib>
#include <memory>

#include "infergate/kernels/cpu.h"

namespace infergate::kernels::cpu {
namespace {
thread_local bool tl_inside_pool = false;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain() {
  for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i);
}

namespace {

constexpr int64_t kSpinMicros = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void ThreadPool::worker_loop() {
  tl_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next job first; the clock is read only every 256 pauses.
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int i = 1; g == seen && !stop_.load(std::memory_order_relaxed); ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if ((i & 255) == 0 && std::chrono::steady_clock::now() >= until) break;
      }
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, [&] {
        return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != seen;
      });
      --sleepers_;
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = g;
    drain();
    busy_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty() || tl_inside_pool) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // Every worker has left the previous job (busy_ reached 0), so the job can be rewritten in place;
  // the release increment of generation_ publishes it to the workers that see the new generation.
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  bool wake;
  {
    // Under mu_, so that a worker checking its wait predicate cannot miss the new generation.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) wake_.notify_all();
  tl_inside_pool = true;
  drain();
  tl_inside_pool = false;
  // The workers finish their last items; spinning is brief (one item at most per worker).
  // Yield after a while: on a busy machine a worker may be off its core.
  for (int i = 0; busy_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;  // guarded by g_pool_mu
int g_threads = 0;                   // guarded by g_pool_mu

int default_threads() {
  if (const char* s = std::getenv("INFERGATE_KERNELS_THREADS");
      s != nullptr) {  // NOLINT(concurrency-mt-unsafe)
    const int n = std::atoi(s);
    if (n >= 1 && n <= 1024) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}
}  // namespace

ThreadPool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    if (g_threads == 0) g_threads = default_threads();
    g_pool = std::make_unique<ThreadPool>(g_threads);
  }
  return *g_pool;
}

}  // namespace infergate::kernels::cpu

namespace infergate::kernels {

void set_cpu_threads(int n) {
  if (n < 1) n = 1;
  std::lock_guard<std::mutex> lock(cpu::g_pool_mu);
  if (n == cpu::g_threads && cpu::g_pool) return;
  cpu::g_pool.reset();  // joins the old workers; callers must not be running ops concurrently
  cpu::g_threads = n;
}

int cpu_threads() {
  std::lock_guard<std::mutex> lock(cpu::g_pool_mu);
  if (cpu::g_threads == 0) cpu::g_threads = cpu::default_threads();
  return cpu::g_threads;
}

}  // namespace infergate::kernels
