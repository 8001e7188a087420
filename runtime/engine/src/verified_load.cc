// Hash while loading: SHA-256 of the bytes the loader reads, compared with the verified manifest.
#include "infergate/engine/verified_load.h"

#include <chrono>

#include "infergate/common/fs.h"

namespace infergate::runtime::engine {

Result<ManifestHasher> ManifestHasher::from_file(const std::filesystem::path& path) {
  INFERGATE_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxManifestBytes + 1));
  if (text.size() > kMaxManifestBytes) {
    return invalid_argument("manifest " + path.string() + " is larger than the cap")
        .with_reason("ManifestTooLarge");
  }
  auto m = Manifest::parse(text);
  if (!m.ok()) return std::move(m).error().context("verified manifest " + path.string());
  if (m->empty()) {
    return invalid_argument("verified manifest " + path.string() + " lists no files")
        .with_reason("ManifestMalformed");
  }
  return ManifestHasher(std::move(*m));
}

std::unique_ptr<model::LoadHasher> ManifestHasher::concurrent() {
  return std::unique_ptr<model::LoadHasher>(new ManifestHasher(shared_));
}

int64_t ManifestHasher::files_verified() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->files_verified;
}

int64_t ManifestHasher::bytes_hashed() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->bytes_hashed;
}

double ManifestHasher::hash_seconds() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->hash_seconds;
}

Status ManifestHasher::begin_file(std::string_view name, uint64_t /*size*/) {
  if (shared_->manifest.find(name) == nullptr) {
    return data_loss("file " + std::string(name) +
                     " is not listed in the verified manifest; refusing to load it")
        .with_reason("UnlistedFile")
        .with_detail("file", std::string(name));
  }
  current_ = std::string(name);
  sha_.reset();
  file_bytes_ = 0;
  file_seconds_ = 0;
  return ok_status();
}

void ManifestHasher::update(std::span<const uint8_t> bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  sha_.update(bytes.data(), bytes.size());
  file_bytes_ += static_cast<int64_t>(bytes.size());
  file_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Status ManifestHasher::end_file() {
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest got, sha_.finish());
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->bytes_hashed += file_bytes_;
    shared_->hash_seconds += file_seconds_;
  }
  const ManifestEntry* e = shared_->manifest.find(current_);
  if (e == nullptr) return internal_error("end_file without begin_file");
  if (!(e->digest == got)) {
    return data_loss("file " + current_ + " does not match the verified manifest (expected sha256 " +
                     e->digest.hex() + ", read " + got.hex() + "); refusing to serve")
        .with_reason("DigestMismatch")
        .with_detail("file", current_)
        .with_detail("expected", e->digest.hex())
        .with_detail("actual", got.hex());
  }
  std::lock_guard<std::mutex> lock(shared_->mu);
  ++shared_->files_verified;
  return ok_status();
}

}  // namespace infergate::runtime::engine
