// SHA-256 over OpenSSL EVP: an incremental hasher (used by the agent and by the runtime's
// hash-while-load) and the digest type that SHA256SUMS manifests and release statements carry.
#pragma once

#include <openssl/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate {

struct Sha256Digest {
  std::array<uint8_t, 32> bytes{};

  // 64 lowercase hex digits, as sha256sum prints them.
  std::string hex() const;
  // Exactly 64 hex digits (either case); anything else is an InvalidArgument error.
  static Result<Sha256Digest> from_hex(std::string_view text);

  friend bool operator==(const Sha256Digest&, const Sha256Digest&) = default;
};

// An incremental SHA-256. Feed bytes with update() in any split; finish() returns the digest and
// leaves the hasher ready for a new message.
//
// Guarantees: the EVP_MD is fetched once per process (an implicit fetch per message costs about
// 1 us); update() never allocates. A failure inside OpenSSL (which does not happen for SHA-256 in
// practice, but is reported rather than assumed away) is sticky and returned by finish().
// Thread-safety: one instance per thread; different instances may be used concurrently.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& o) noexcept;
  Sha256& operator=(Sha256&& o) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // The number of bytes fed since construction or the last finish()/reset().
  uint64_t size() const { return size_; }

  Result<Sha256Digest> finish();
  void reset();

 private:
  EVP_MD_CTX* ctx_ = nullptr;
  uint64_t size_ = 0;
  bool failed_ = false;
};

// The digest of one buffer.
Result<Sha256Digest> sha256(std::string_view data);

}  // namespace infergate
