// The terminal progress line.
#include "infergate/agent/verify/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace infergate::agent {

Progress::Progress(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}

Progress::~Progress() { stop(); }

std::string Progress::format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

void Progress::start(uint64_t total_bytes) {
  if (!enabled_ || thread_.joinable()) return;
  total_ = total_bytes;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {
    // No progress line is no loss.
  }
}

void Progress::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Progress::run() {
  using namespace std::chrono_literals;
  auto begin = std::chrono::steady_clock::now();
  auto print = [&](const char* end) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    double done = static_cast<double>(bytes_.load(std::memory_order_relaxed));
    double pct = total_ > 0 ? 100.0 * done / static_cast<double>(total_) : 100.0;
    std::string line = "\r" + label_ + " " + format_bytes(done) + " / " +
                       format_bytes(static_cast<double>(total_)) + "  " +
                       std::to_string(static_cast<int>(pct)) + "%  " + format_bytes(done / secs) + "/s" + end;
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  };
  std::unique_lock lock(mu_);
  // Short runs print nothing at all.
  if (cv_.wait_for(lock, 1s, [this] { return stopping_; })) return;
  for (;;) {
    print("   ");
    if (cv_.wait_for(lock, 500ms, [this] { return stopping_; })) break;
  }
  print("   \n");  // the final count, and the line is left for the log that follows
}

}  // namespace infergate::agent
