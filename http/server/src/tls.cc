// Serving certificates: from PEM files, or self-signed with OpenSSL.
#include "infergate/http/tls.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "infergate/common/fs.h"

namespace infergate::http {
namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

Error tls_error(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), "BadTlsConfig");
}

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

bool add_extension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool is_ip(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

Result<TlsOptions> load_tls_files(const std::filesystem::path& cert_chain, const std::filesystem::path& key) {
  TlsOptions out;
  auto cert = read_file(cert_chain, 1u << 20);
  if (!cert.ok()) return std::move(cert).error().context("serving certificate");
  auto k = read_file(key, 1u << 20);
  if (!k.ok()) return std::move(k).error().context("serving key");
  BioPtr cb(BIO_new_mem_buf(cert->data(), static_cast<int>(cert->size())), BIO_free);
  CertPtr x(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr), X509_free);
  if (!x) return tls_error(cert_chain.string() + ": not a PEM certificate");
  BioPtr kb(BIO_new_mem_buf(k->data(), static_cast<int>(k->size())), BIO_free);
  KeyPtr pk(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!pk) return tls_error(key.string() + ": not a PEM private key");
  if (X509_check_private_key(x.get(), pk.get()) != 1)
    return tls_error(key.string() + " is not the key of the certificate in " + cert_chain.string());
  out.cert_chain_pem = std::move(*cert);
  out.key_pem = std::move(*k);
  return out;
}

Result<TlsOptions> make_self_signed_tls(const std::vector<std::string>& names, std::chrono::hours validity) {
  if (names.empty()) return invalid_argument("a self-signed certificate needs at least one name");
  KeyPtr key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!key) return internal_error("EC key generation failed");
  CertPtr cert(X509_new(), X509_free);
  X509_set_version(cert.get(), 2);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_new(), BN_free);
  if (!bn || BN_rand(bn.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()))) {
    return internal_error("cannot make a certificate serial number");
  }
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(validity.count()) * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(names[0].c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  std::string san;
  for (const auto& n : names) san += (san.empty() ? "" : ",") + std::string(is_ip(n) ? "IP:" : "DNS:") + n;
  if (!add_extension(cert.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_extension(cert.get(), NID_key_usage, "critical,digitalSignature,keyEncipherment") ||
      !add_extension(cert.get(), NID_ext_key_usage, "serverAuth") ||
      !add_extension(cert.get(), NID_subject_alt_name, san)) {
    return invalid_argument("cannot name \"" + san + "\" in a certificate");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
    return internal_error("cannot sign the certificate");
  BioPtr cb(BIO_new(BIO_s_mem()), BIO_free);
  BioPtr kb(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_X509(cb.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(kb.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return internal_error("cannot write the certificate as PEM");
  }
  TlsOptions out;
  out.cert_chain_pem = bio_text(cb.get());
  out.key_pem = bio_text(kb.get());
  return out;
}

}  // namespace infergate::http
