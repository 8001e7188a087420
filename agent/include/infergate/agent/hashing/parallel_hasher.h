// Hashing many files at once: a pool of threads sized to the CPUs this process may use, largest
// files first (one SHA-256 cannot be split, so a big shard should not start last), stopping all
// workers at the first refusal.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "infergate/agent/hashing/file_hasher.h"
#include "infergate/agent/hashing/tree.h"
#include "infergate/common/result.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {

// The CPUs this process may run on: its affinity mask, further limited by a cgroup v2 CPU quota
// (a Kubernetes CPU limit) when one is set. At least 1.
unsigned available_cpus();

struct HashJob {
  FileInfo file;
  // When set, a different digest is refused at once (DigestMismatch, naming the file and both
  // digests) and the other workers stop.
  std::optional<Sha256Digest> expected;
  ByteRange range;  // the whole file unless set (an OMS shard)
};

struct ParallelHashOptions {
  unsigned threads = 0;  // 0: available_cpus(); never more threads than jobs
  std::atomic<uint64_t>* bytes_hashed = nullptr;
  std::function<void(const FileInfo& file, uint64_t hashed)> after_chunk;  // called from workers
};

// The digest of every job, in the order of `jobs`. The first refusal (in time) is returned and the
// remaining work is abandoned; when several files are bad, which one is named is not specified.
Result<std::vector<Sha256Digest>> hash_files(int root_fd, const std::vector<HashJob>& jobs,
                                             const ParallelHashOptions& options = {});

}  // namespace infergate::agent
