// Hash while loading: a model::LoadHasher that computes each file's SHA-256 on the very bytes the
// loader reads and compares it with a verified SHA256SUMS, so that what was verified by the init
// container is what is served, with no second read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "infergate/common/manifest.h"
#include "infergate/common/result.h"
#include "infergate/common/sha256.h"
#include "infergate/runtime/model/files.h"

namespace infergate::runtime::engine {

// Guarantees: end_file() refuses a file whose digest differs (DataLoss, reason "DigestMismatch", details
// file / expected / actual) and begin_file() one the manifest does not list ("UnlistedFile"); the
// error names the file. A LoadHasher is used by one load at a time (model/files.h's contract); its
// concurrent() hashers, one per loading thread, share its manifest and counters.
class ManifestHasher final : public model::LoadHasher {
 public:
  explicit ManifestHasher(Manifest manifest) : shared_(std::make_shared<Shared>(std::move(manifest))) {}
  // Reads and parses the manifest file (strict; ManifestMalformed and friends as common/manifest.h).
  static Result<ManifestHasher> from_file(const std::filesystem::path& manifest_path);

  Status begin_file(std::string_view name, uint64_t size) override;
  void update(std::span<const uint8_t> bytes) override;
  Status end_file() override;
  std::unique_ptr<model::LoadHasher> concurrent() override;

  // Over this hasher and its concurrent ones: files that matched, bytes hashed, and seconds spent
  // hashing (summed over the threads, so more than the wall-clock time when shards load together).
  int64_t files_verified() const;
  int64_t bytes_hashed() const;
  double hash_seconds() const;
  const Manifest& manifest() const { return shared_->manifest; }

 private:
  struct Shared {
    explicit Shared(Manifest m) : manifest(std::move(m)) {}
    const Manifest manifest;
    mutable std::mutex mu;
    int64_t files_verified = 0;  // guarded by mu, like the two below
    int64_t bytes_hashed = 0;
    double hash_seconds = 0;
  };
  explicit ManifestHasher(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  std::shared_ptr<Shared> shared_;
  Sha256 sha_;
  std::string current_;
  int64_t file_bytes_ = 0;  // the current file's, added to the shared counters at end_file
  double file_seconds_ = 0;
};

}  // namespace infergate::runtime::engine
