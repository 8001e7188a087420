// Signing keys: Ed25519 (the default) and ECDSA P-256, P-384 and P-521 (the curves the OpenSSF model
// signing format uses), as PEM files OpenSSL 3 reads and writes. Private keys are PKCS#8 (unencrypted,
// file mode 0600); public keys are SubjectPublicKeyInfo.
#pragma once

#include <openssl/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::agent {

enum class KeyType { kEd25519, kEcdsaP256, kEcdsaP384, kEcdsaP521 };

std::string_view key_type_name(KeyType type);  // "ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521"
Result<KeyType> parse_key_type(std::string_view name);

// A public key that release signatures are checked against. Immutable and thread-safe.
class PublicKey {
 public:
  // Refuses (KeyInvalid) anything but one Ed25519 or ECDSA P-256/P-384/P-521 public key in PEM;
  // `source` names the origin in errors.
  static Result<PublicKey> from_pem(std::string_view pem, std::string_view source);
  // The same from DER SubjectPublicKeyInfo (a Sigstore trusted root's rawBytes, a certificate's key).
  static Result<PublicKey> from_der(std::string_view der, std::string_view source);

  KeyType type() const { return type_; }
  // Hex SHA-256 of the DER SubjectPublicKeyInfo: the DSSE keyid our signer writes.
  const std::string& key_id() const { return key_id_; }
  const std::string& source() const { return source_; }
  std::string pem() const;
  // Hex SHA-256 of pem()'s text: the publicKey.hint the OpenSSF model signing tool writes.
  const std::string& pem_hint() const { return pem_hint_; }
  // The DER SubjectPublicKeyInfo; its SHA-256 is a Sigstore log's id.
  const std::string& spki_der() const { return der_; }

  // True when `signature` is this key's signature over `message` (Ed25519 over the message itself;
  // ECDSA over its SHA-256, SHA-384 or SHA-512 for P-256, P-384 and P-521, the signature DER-encoded).
  // Never throws; OpenSSL's error queue is cleared on failure.
  bool verify(std::string_view message, std::string_view signature) const;

 private:
  friend class PrivateKey;
  static Result<PublicKey> from_pkey(std::shared_ptr<EVP_PKEY> pkey, std::string_view source);
  std::shared_ptr<EVP_PKEY> pkey_;
  KeyType type_ = KeyType::kEd25519;
  std::string key_id_;
  std::string pem_hint_;
  std::string der_;
  std::string source_;
};

class PrivateKey {
 public:
  static Result<PrivateKey> generate(KeyType type);
  // Refuses (KeyInvalid) encrypted keys and key types other than the four above.
  static Result<PrivateKey> from_pem(std::string_view pem, std::string_view source);
  static Result<PrivateKey> load(const std::filesystem::path& path);

  KeyType type() const { return public_.type(); }
  const PublicKey& public_key() const { return public_; }
  const std::string& key_id() const { return public_.key_id(); }
  Result<std::string> private_pem() const;
  Result<std::string> sign(std::string_view message) const;

 private:
  std::shared_ptr<EVP_PKEY> pkey_;
  PublicKey public_;
};

// OpenSSL's last error as text, the error queue emptied so that it cannot leak into later calls.
std::string openssl_error_text();

// Writes PREFIX.key (private, mode 0600) and PREFIX.pub.pem (public, 0644). Refuses to overwrite
// either file (UsageError), so a key is never lost by accident.
Status write_key_pair(const PrivateKey& key, const std::filesystem::path& prefix);

// Public keys from files or directories: a directory contributes every "*.pem" file in it whose
// name does not start with "." (a mounted Kubernetes Secret: its entries are symlinks into "..data",
// which is why links are followed here, unlike in the artifact). Each file must hold one public key.
// Refuses (KeyInvalid) an unreadable path, a bad key, or an empty result.
Result<std::vector<PublicKey>> load_public_keys(const std::vector<std::filesystem::path>& paths);

}  // namespace infergate::agent
