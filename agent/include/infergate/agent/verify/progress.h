// Progress for long runs, on a terminal only: bytes hashed, percentage and rate on one rewritten
// stderr line, twice a second, starting after the first second. Silent when stderr is not a tty.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace infergate::agent {

class Progress {
 public:
  // `enabled` false makes every call a no-op (the binary passes isatty(STDERR_FILENO)).
  Progress(std::string label, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The counter the hasher increments.
  std::atomic<uint64_t>* counter() { return &bytes_; }
  // Starts the printer once the total is known.
  void start(uint64_t total_bytes);
  // Stops the printer and ends its line (if it printed one).
  void stop();

  // "1.5 GiB", "12.0 MiB", "512 B".
  static std::string format_bytes(double bytes);

 private:
  void run();
  std::string label_;
  bool enabled_;
  std::atomic<uint64_t> bytes_{0};
  uint64_t total_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace infergate::agent
