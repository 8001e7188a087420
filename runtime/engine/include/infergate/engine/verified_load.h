// Hash while loading: a model::LoadHasher that computes each file's SHA-256 on the very bytes the
// loader reads and compares it with a verified SHA256SUMS, so that what was verified by the init
// container is what is served, with no second read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "infergate/common/manifest.h"
#include "infergate/common/result.h"
#include "infergate/common/sha256.h"
#include "infergate/runtime/model/files.h"

namespace infergate::runtime::engine {

// Guarantees: end_file() refuses a file whose digest differs (DataLoss, reason "DigestMismatch", details
// file / expected / actual) and begin_file() one the manifest does not list ("UnlistedFile"); the
// error names the file. A LoadHasher is used by one load at a time (model/files.h's contract).
class ManifestHasher final : public model::LoadHasher {
 public:
  explicit ManifestHasher(Manifest manifest) : manifest_(std::move(manifest)) {}
  // Reads and parses the manifest file (strict; ManifestMalformed and friends as common/manifest.h).
  static Result<ManifestHasher> from_file(const std::filesystem::path& manifest_path);

  Status begin_file(std::string_view name, uint64_t size) override;
  void update(std::span<const uint8_t> bytes) override;
  Status end_file() override;

  int64_t files_verified() const { return files_verified_; }
  int64_t bytes_hashed() const { return bytes_hashed_; }
  double hash_seconds() const { return hash_seconds_; }
  const Manifest& manifest() const { return manifest_; }

 private:
  Manifest manifest_;
  Sha256 sha_;
  std::string current_;
  int64_t files_verified_ = 0;
  int64_t bytes_hashed_ = 0;
  double hash_seconds_ = 0;
};

}  // namespace infergate::runtime::engine
