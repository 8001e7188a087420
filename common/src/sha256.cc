// SHA-256 over OpenSSL EVP with the algorithm fetched once per process.
#include "infergate/common/sha256.h"

#include <openssl/evp.h>

#include "infergate/common/encoding.h"

namespace infergate {
namespace {

// Fetched on first use and kept for the life of the process (thread-safe static initialisation).
const EVP_MD* sha256_md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

}  // namespace

std::string Sha256Digest::hex() const { return hex_encode(std::span<const uint8_t>(bytes)); }

Result<Sha256Digest> Sha256Digest::from_hex(std::string_view text) {
  if (text.size() != 64) {
    return invalid_argument("a SHA-256 digest is 64 hex digits, got " + std::to_string(text.size()) +
                            " characters");
  }
  auto raw = hex_decode(text);
  if (!raw.ok()) return std::move(raw).error().context("SHA-256 digest");
  Sha256Digest d;
  for (size_t i = 0; i < d.bytes.size(); ++i) d.bytes[i] = static_cast<uint8_t>((*raw)[i]);
  return d;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { reset(); }

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(Sha256&& o) noexcept : ctx_(o.ctx_), size_(o.size_), failed_(o.failed_) {
  o.ctx_ = nullptr;
  o.failed_ = true;
}

Sha256& Sha256::operator=(Sha256&& o) noexcept {
  if (this != &o) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = o.ctx_;
    size_ = o.size_;
    failed_ = o.failed_;
    o.ctx_ = nullptr;
    o.failed_ = true;
  }
  return *this;
}

void Sha256::reset() {
  size_ = 0;
  failed_ = ctx_ == nullptr || sha256_md() == nullptr || EVP_DigestInit_ex2(ctx_, sha256_md(), nullptr) != 1;
}

void Sha256::update(const void* data, size_t size) {
  if (failed_) return;
  if (size > 0 && EVP_DigestUpdate(ctx_, data, size) != 1) {
    failed_ = true;
    return;
  }
  size_ += size;
}

Result<Sha256Digest> Sha256::finish() {
  Sha256Digest d;
  unsigned int len = 0;
  bool ok = !failed_ && EVP_DigestFinal_ex(ctx_, d.bytes.data(), &len) == 1 && len == d.bytes.size();
  reset();
  if (!ok) return internal_error("OpenSSL SHA-256 failed");
  return d;
}

Result<Sha256Digest> sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

}  // namespace infergate
