// A small fixed pool of worker threads for the CPU ops. run(n, fn) calls fn(i) for every i in
// [0, n) on the workers and the calling thread (items handed out one at a time from an atomic
// counter, so uneven items balance) and returns when all are done.
//
// Between jobs a worker spins on the job counter for a short while (kSpinMicros) before it sleeps on
// the condition variable: a decode step is hundreds of small ops back to back, and waking a sleeping
// thread through the kernel costs tens of microseconds each time, as much as a small op's whole work.
// A worker idle for longer than the spin window sleeps, so an idle process does not burn a core.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infergate::kernels::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1, the caller included
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Thread-safe: concurrent callers take turns. A call from inside fn runs inline (no deadlock).
  void run(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void drain();

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_;
  // Bumped (under mu_, with release order) for every job; spinning workers read it without the lock.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;  // guarded by mu_: workers waiting on wake_
  // The current job (set under mu_ before generation_ changes).
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> busy_{0};  // workers still inside the current job
};

// The process-wide pool the ops use, sized by set_cpu_threads / INFERGATE_KERNELS_THREADS.
ThreadPool& pool();

}  // namespace infergate::kernels::cpu
