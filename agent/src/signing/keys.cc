// Key generation, PEM I/O, signing and verification over OpenSSL 3's EVP_PKEY.
#include "infergate/agent/signing/keys.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <system_error>

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxKeyFileBytes = 64u << 10;

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* p) { return std::shared_ptr<EVP_PKEY>(p, EVP_PKEY_free); }

Error key_invalid(std::string_view source, std::string_view why) {
  return refusal(Reason::kKeyInvalid, std::string(source) + ": " + std::string(why));
}

// Refuses to prompt for a passphrase: encrypted keys fail to load instead of reading the terminal.
int no_passphrase(char*, int, int, void*) { return -1; }

Result<KeyType> type_of(EVP_PKEY* p, std::string_view source) {
  if (EVP_PKEY_is_a(p, "ED25519")) return KeyType::kEd25519;
  if (EVP_PKEY_is_a(p, "EC")) {
    char group[64] = {0};
    size_t len = 0;
    if (EVP_PKEY_get_group_name(p, group, sizeof group, &len) == 1) {
      std::string_view g(group);
      if (g == "prime256v1" || g == "P-256") return KeyType::kEcdsaP256;
      if (g == "secp384r1" || g == "P-384") return KeyType::kEcdsaP384;
      if (g == "secp521r1" || g == "P-521") return KeyType::kEcdsaP521;
    }
    ERR_clear_error();
    return key_invalid(source, "an EC key on a curve other than P-256, P-384 or P-521");
  }
  return key_invalid(source, "not an Ed25519 or ECDSA key");
}

Result<std::string> der_of(EVP_PKEY* p) {
  unsigned char* der = nullptr;
  int len = i2d_PUBKEY(p, &der);
  if (len <= 0) return internal_error("encoding a public key: " + openssl_error_text());
  std::string out(reinterpret_cast<char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  return out;
}

// The digest ECDSA signs with on each curve (as Sigstore's key details pair them); Ed25519 has none.
const char* digest_name(KeyType t) {
  switch (t) {
    case KeyType::kEd25519: return nullptr;
    case KeyType::kEcdsaP256: return "SHA256";
    case KeyType::kEcdsaP384: return "SHA384";
    case KeyType::kEcdsaP521: return "SHA512";
  }
  return nullptr;
}

std::string pem_of(EVP_PKEY* p) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return {};
  std::string out;
  if (PEM_write_bio_PUBKEY(bio, p) == 1) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  ERR_clear_error();
  return out;
}

}  // namespace

std::string openssl_error_text() {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown OpenSSL error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

std::string_view key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kEd25519: return "ed25519";
    case KeyType::kEcdsaP256: return "ecdsa-p256";
    case KeyType::kEcdsaP384: return "ecdsa-p384";
    case KeyType::kEcdsaP521: return "ecdsa-p521";
  }
  return "unknown";
}

Result<KeyType> parse_key_type(std::string_view name) {
  for (KeyType t : {KeyType::kEd25519, KeyType::kEcdsaP256, KeyType::kEcdsaP384, KeyType::kEcdsaP521}) {
    if (name == key_type_name(t)) return t;
  }
  return refusal(Reason::kUsageError, "unknown key type \"" + std::string(name) +
                                          "\" (ed25519, ecdsa-p256, ecdsa-p384 or ecdsa-p521)");
}

Result<PublicKey> PublicKey::from_pkey(std::shared_ptr<EVP_PKEY> pkey, std::string_view source) {
  PublicKey k;
  k.pkey_ = std::move(pkey);
  INFERGATE_ASSIGN_OR_RETURN(k.type_, type_of(k.pkey_.get(), source));
  INFERGATE_ASSIGN_OR_RETURN(k.der_, der_of(k.pkey_.get()));
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest id, sha256(k.der_));
  k.key_id_ = id.hex();
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest hint, sha256(pem_of(k.pkey_.get())));
  k.pem_hint_ = hint.hex();
  k.source_ = std::string(source);
  return k;
}

Result<PublicKey> PublicKey::from_pem(std::string_view pem, std::string_view source) {
  if (pem.size() > kMaxKeyFileBytes) return key_invalid(source, "too large for a key");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return internal_error("BIO_new_mem_buf failed");
  EVP_PKEY* raw = PEM_read_bio_PUBKEY(bio, nullptr, no_passphrase, nullptr);
  BIO_free(bio);
  if (raw == nullptr) {
    std::string why = openssl_error_text();
    return key_invalid(source, "not a PEM public key (" + why + ")");
  }
  return from_pkey(own(raw), source);
}

Result<PublicKey> PublicKey::from_der(std::string_view der, std::string_view source) {
  if (der.size() > kMaxKeyFileBytes) return key_invalid(source, "too large for a key");
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  EVP_PKEY* raw = d2i_PUBKEY(nullptr, &p, static_cast<long>(der.size()));
  if (raw == nullptr || p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) {
    if (raw != nullptr) EVP_PKEY_free(raw);
    std::string why = openssl_error_text();
    return key_invalid(source, "not a DER public key (" + why + ")");
  }
  return from_pkey(own(raw), source);
}

std::string PublicKey::pem() const { return pem_of(pkey_.get()); }

bool PublicKey::verify(std::string_view message, std::string_view signature) const {
  if (!pkey_ || signature.empty()) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return false;
  bool ok = EVP_DigestVerifyInit_ex(ctx, nullptr, digest_name(type_), nullptr, nullptr, pkey_.get(),
                                    nullptr) == 1 &&
            EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                             reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  ERR_clear_error();
  return ok;
}

Result<PrivateKey> PrivateKey::generate(KeyType type) {
  EVP_PKEY* raw = nullptr;
  switch (type) {
    case KeyType::kEd25519: raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"); break;
    case KeyType::kEcdsaP256: raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"); break;
    case KeyType::kEcdsaP384: raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-384"); break;
    case KeyType::kEcdsaP521: raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-521"); break;
  }
  if (raw == nullptr) return internal_error("generating a key: " + openssl_error_text());
  PrivateKey k;
  k.pkey_ = own(raw);
  INFERGATE_ASSIGN_OR_RETURN(k.public_, PublicKey::from_pkey(k.pkey_, "generated"));
  return k;
}

Result<PrivateKey> PrivateKey::from_pem(std::string_view pem, std::string_view source) {
  if (pem.size() > kMaxKeyFileBytes) return key_invalid(source, "too large for a key");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return internal_error("BIO_new_mem_buf failed");
  EVP_PKEY* raw = PEM_read_bio_PrivateKey(bio, nullptr, no_passphrase, nullptr);
  BIO_free(bio);
  if (raw == nullptr) {
    std::string why = openssl_error_text();
    return key_invalid(source, "not an unencrypted PEM private key (" + why + ")");
  }
  PrivateKey k;
  k.pkey_ = own(raw);
  INFERGATE_ASSIGN_OR_RETURN(k.public_, PublicKey::from_pkey(k.pkey_, source));
  return k;
}

Result<PrivateKey> PrivateKey::load(const fs::path& path) {
  auto text = read_file(path, kMaxKeyFileBytes);
  if (!text.ok()) return key_invalid(path.string(), text.error().message());
  return from_pem(*text, path.string());
}

Result<std::string> PrivateKey::private_pem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return internal_error("BIO_new failed");
  std::string out;
  bool ok = PEM_write_bio_PrivateKey(bio, pkey_.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (ok) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  if (!ok) return internal_error("encoding a private key: " + openssl_error_text());
  return out;
}

Result<std::string> PrivateKey::sign(std::string_view message) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return internal_error("EVP_MD_CTX_new failed");
  size_t len = 0;
  std::string sig;
  bool ok =
      EVP_DigestSignInit_ex(ctx, nullptr, digest_name(type()), nullptr, nullptr, pkey_.get(), nullptr) == 1 &&
      EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) == 1;
  if (ok) {
    sig.resize(len);
    ok = EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                        reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
    sig.resize(len);
  }
  EVP_MD_CTX_free(ctx);
  if (!ok) return internal_error("signing: " + openssl_error_text());
  return sig;
}

Status write_key_pair(const PrivateKey& key, const fs::path& prefix) {
  fs::path priv = prefix.string() + ".key";
  fs::path pub = prefix.string() + ".pub.pem";
  std::error_code ec;
  for (const auto& p : {priv, pub}) {
    if (fs::exists(fs::symlink_status(p, ec))) {
      return refusal(Reason::kUsageError, p.string() + " already exists; keygen never overwrites a key");
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(std::string priv_pem, key.private_pem());
  // write_file_atomic creates its temporary file with mode 0600 before anything is written to it.
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(priv, priv_pem, 0600).context("writing the private key"));
  INFERGATE_RETURN_IF_ERROR(
      write_file_atomic(pub, key.public_key().pem(), 0644).context("writing the public key"));
  return ok_status();
}

Result<std::vector<PublicKey>> load_public_keys(const std::vector<fs::path>& paths) {
  std::vector<PublicKey> keys;
  if (paths.empty()) return refusal(Reason::kUsageError, "no --public-key given: there is no unsigned mode");
  for (const auto& path : paths) {
    std::error_code ec;
    auto st = fs::status(path, ec);  // follows links: a Secret's entries are links
    if (ec) return key_invalid(path.string(), ec.message());
    std::vector<fs::path> files;
    if (fs::is_directory(st)) {
      for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (name.empty() || name[0] == '.' || it->path().extension() != ".pem") continue;
        files.push_back(it->path());
      }
      if (ec) return key_invalid(path.string(), ec.message());
      std::sort(files.begin(), files.end());
      if (files.empty()) return key_invalid(path.string(), "a directory without any *.pem public key");
    } else {
      files.push_back(path);
    }
    for (const auto& f : files) {
      auto text = read_file(f, kMaxKeyFileBytes);
      if (!text.ok()) return key_invalid(f.string(), text.error().message());
      INFERGATE_ASSIGN_OR_RETURN(PublicKey k, PublicKey::from_pem(*text, f.string()));
      keys.push_back(std::move(k));
    }
  }
  return keys;
}

}  // namespace infergate::agent
