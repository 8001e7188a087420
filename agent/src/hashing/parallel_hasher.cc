// The hashing pool: workers take jobs from a shared index over a largest-first order.
#include "infergate/agent/hashing/parallel_hasher.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>

namespace infergate::agent {

unsigned available_cpus() {
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) n = std::max(1, CPU_COUNT(&set));
  // cgroup v2: "max 100000" (no limit) or "<quota> <period>".
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (in >> quota >> period && quota != "max" && period > 0) {
    try {
      double cpus = std::stod(quota) / static_cast<double>(period);
      if (cpus > 0) n = std::min(n, std::max(1u, static_cast<unsigned>(std::ceil(cpus))));
    } catch (const std::exception&) {
      // An unreadable quota leaves the affinity count in place.
    }
  }
  return n;
}

Result<std::vector<Sha256Digest>> hash_files(int root_fd, const std::vector<HashJob>& jobs,
                                             const ParallelHashOptions& options) {
  std::vector<Sha256Digest> digests(jobs.size());
  if (jobs.empty()) return digests;
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  auto bytes = [&](size_t i) {
    return jobs[i].range.length.value_or(jobs[i].file.size - jobs[i].range.offset);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes(a) > bytes(b); });

  unsigned threads = options.threads == 0 ? available_cpus() : options.threads;
  threads = static_cast<unsigned>(std::min<size_t>(threads, jobs.size()));

  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::optional<Error> first_error;
  HashOptions hash_options;
  hash_options.bytes_hashed = options.bytes_hashed;
  hash_options.cancel = &stop;
  hash_options.after_chunk = options.after_chunk;

  auto fail = [&](Error e) {
    std::lock_guard lock(mu);
    if (!first_error) first_error = std::move(e);
    stop.store(true);
  };
  auto worker = [&] {
    for (;;) {
      if (stop.load()) return;
      size_t i = next.fetch_add(1);
      if (i >= order.size()) return;
      const HashJob& job = jobs[order[i]];
      auto d = hash_file(root_fd, job.file, hash_options, job.range);
      if (!d.ok()) {
        if (d.error().code() != ErrorCode::kCancelled) fail(std::move(d).error());
        return;
      }
      if (job.expected && *d != *job.expected) {
        std::string what = job.file.path;
        if (job.range.length) {
          what += " (bytes " + std::to_string(job.range.offset) + " to " +
                  std::to_string(job.range.offset + *job.range.length) + ")";
        }
        fail(refusal(Reason::kDigestMismatch,
                     what + ": SHA-256 " + d->hex() + " differs from the signed " + job.expected->hex())
                 .with_detail("file", job.file.path)
                 .with_detail("expected", job.expected->hex())
                 .with_detail("actual", d->hex()));
        return;
      }
      digests[order[i]] = *d;
    }
  };
  // The calling thread is one of the workers. A thread that cannot be created (std::system_error) only
  // means fewer workers: the others take its share.
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (first_error) return std::move(*first_error);
  return digests;
}

}  // namespace infergate::agent
