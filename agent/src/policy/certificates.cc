// X.509 checks over OpenSSL 3: errors are converted here and never leave OpenSSL's queue behind.
#include "infergate/agent/policy/certificates.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/ct.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>

#include "infergate/agent/reasons.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {
namespace {

constexpr size_t kMaxCertificateBytes = 64u << 10;

Error cert_invalid(std::string_view what, const std::string& why) {
  return refusal(Reason::kCertificateInvalid, std::string(what) + ": " + why);
}

WallTime asn1_time(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return WallTime{};
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::string asn1_string(const ASN1_STRING* s) {
  if (s == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// The raw contents of the extension with this dotted OID, if present.
std::optional<std::string> extension_data(X509* x, std::string_view oid) {
  ASN1_OBJECT* obj = OBJ_txt2obj(std::string(oid).c_str(), 1);
  if (obj == nullptr) {
    ERR_clear_error();
    return std::nullopt;
  }
  int idx = X509_get_ext_by_OBJ(x, obj, -1);
  ASN1_OBJECT_free(obj);
  if (idx < 0) return std::nullopt;
  return asn1_string(X509_EXTENSION_get_data(X509_get_ext(x, idx)));
}

void put_be(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The TBSCertificate with the embedded-SCT extension removed: what the log signed (RFC 6962 3.2).
Result<std::string> precert_tbs(const Certificate& leaf) {
  std::unique_ptr<X509, decltype(&X509_free)> copy(X509_dup(leaf.get()), X509_free);
  if (!copy) return internal_error("X509_dup failed: " + openssl_error_text());
  int idx = X509_get_ext_by_NID(copy.get(), NID_ct_precert_scts, -1);
  if (idx >= 0) X509_EXTENSION_free(X509_delete_ext(copy.get(), idx));
  unsigned char* buf = nullptr;
  int len = i2d_re_X509_tbs(copy.get(), &buf);
  if (len <= 0) return internal_error("encoding a TBSCertificate: " + openssl_error_text());
  std::string out(reinterpret_cast<char*>(buf), static_cast<size_t>(len));
  OPENSSL_free(buf);
  return out;
}

bool in_range(WallTime t, const std::optional<WallTime>& from, const std::optional<WallTime>& until) {
  return (!from || t >= *from) && (!until || t <= *until);
}

}  // namespace

Result<Certificate> Certificate::from_der(std::string_view der, std::string_view what) {
  if (der.empty() || der.size() > kMaxCertificateBytes) return cert_invalid(what, "not a certificate (size)");
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  X509* raw = d2i_X509(nullptr, &p, static_cast<long>(der.size()));
  if (raw == nullptr || p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) {
    if (raw != nullptr) X509_free(raw);
    return cert_invalid(what, "not a DER X.509 certificate (" + openssl_error_text() + ")");
  }
  Certificate c;
  c.x509_ = std::shared_ptr<X509>(raw, X509_free);
  c.der_ = std::string(der);
  return c;
}

Result<std::vector<Certificate>> Certificate::from_pem(std::string_view pem, std::string_view source) {
  if (pem.size() > 16 * kMaxCertificateBytes) {
    return refusal(Reason::kKeyInvalid, std::string(source) + ": too large for certificates");
  }
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return internal_error("BIO_new_mem_buf failed");
  std::vector<Certificate> out;
  for (;;) {
    X509* raw = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (raw == nullptr) break;
    unsigned char* der = nullptr;
    int len = i2d_X509(raw, &der);
    X509_free(raw);
    if (len <= 0) break;
    auto c = from_der(std::string_view(reinterpret_cast<char*>(der), static_cast<size_t>(len)), source);
    OPENSSL_free(der);
    if (!c.ok()) break;
    out.push_back(std::move(c).value());
  }
  BIO_free(bio);
  // The loop ends at the end of the text (PEM_R_NO_START_LINE) or at a block that does not parse.
  unsigned long last = ERR_peek_last_error();
  bool clean_end = last == 0 || ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  ERR_clear_error();
  if (!clean_end) return refusal(Reason::kKeyInvalid, std::string(source) + ": a certificate does not parse");
  if (out.empty()) return refusal(Reason::kKeyInvalid, std::string(source) + ": no PEM certificate");
  return out;
}

WallTime Certificate::not_before() const { return asn1_time(X509_get0_notBefore(get())); }
WallTime Certificate::not_after() const { return asn1_time(X509_get0_notAfter(get())); }

std::string Certificate::subject() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return {};
  X509_NAME_print_ex(bio, X509_get_subject_name(get()), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n > 0 ? n : 0));
  BIO_free(bio);
  ERR_clear_error();
  return out;
}

std::vector<std::string> Certificate::identities() const {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(get(), NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) {
    ERR_clear_error();
    return out;
  }
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_EMAIL) out.push_back(asn1_string(n->d.rfc822Name));
    if (n->type == GEN_URI) out.push_back(asn1_string(n->d.uniformResourceIdentifier));
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::optional<std::string> Certificate::oidc_issuer() const {
  if (auto v2 = extension_data(get(), kFulcioIssuerV2Oid)) {
    const auto* p = reinterpret_cast<const unsigned char*>(v2->data());
    ASN1_UTF8STRING* s = d2i_ASN1_UTF8STRING(nullptr, &p, static_cast<long>(v2->size()));
    if (s != nullptr) {
      std::string out = asn1_string(s);
      ASN1_UTF8STRING_free(s);
      return out;
    }
    ERR_clear_error();
  }
  return extension_data(get(), kFulcioIssuerV1Oid);
}

Result<PublicKey> Certificate::public_key() const {
  EVP_PKEY* k = X509_get0_pubkey(get());
  if (k == nullptr) return cert_invalid(subject(), "no usable public key (" + openssl_error_text() + ")");
  unsigned char* der = nullptr;
  int len = i2d_PUBKEY(k, &der);
  if (len <= 0) return internal_error("encoding a certificate's key: " + openssl_error_text());
  std::string spki(reinterpret_cast<char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  auto key = PublicKey::from_der(spki, "the signing certificate");
  if (!key.ok()) return cert_invalid("the signing certificate", key.error().message());
  return key;
}

Result<std::vector<Certificate>> verify_chain(const Certificate& leaf,
                                              const std::vector<Certificate>& intermediates,
                                              const std::vector<Certificate>& anchors, WallTime at,
                                              std::string_view what) {
  if (anchors.empty()) return cert_invalid(what, "no trusted certificate authority is configured");
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> untrusted(
      sk_X509_new_null(), [](STACK_OF(X509) * s) { sk_X509_free(s); });
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  if (!store || !untrusted || !ctx) return internal_error("OpenSSL allocation failed");
  for (const auto& a : anchors) X509_STORE_add_cert(store.get(), a.get());
  ERR_clear_error();  // a duplicate anchor is not an error worth keeping
  for (const auto& c : intermediates) sk_X509_push(untrusted.get(), c.get());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), untrusted.get()) != 1) {
    return internal_error("X509_STORE_CTX_init: " + openssl_error_text());
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  // An anchor is trusted as configured, root or intermediate: the trust file says which CA signs.
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_PARTIAL_CHAIN);
  X509_VERIFY_PARAM_set_time(param, std::chrono::system_clock::to_time_t(at));
  if (X509_verify_cert(ctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return cert_invalid(what, std::string("does not chain to a trusted CA at ") + format_rfc3339(at) + " (" +
                                  X509_verify_cert_error_string(err) + ")");
  }
  std::vector<Certificate> chain;
  STACK_OF(X509)* got = X509_STORE_CTX_get0_chain(ctx.get());
  for (int i = 0; got != nullptr && i < sk_X509_num(got); ++i) {
    unsigned char* der = nullptr;
    int len = i2d_X509(sk_X509_value(got, i), &der);
    if (len <= 0) return internal_error("encoding a chain certificate: " + openssl_error_text());
    auto c =
        Certificate::from_der(std::string_view(reinterpret_cast<char*>(der), static_cast<size_t>(len)), what);
    OPENSSL_free(der);
    if (!c.ok()) return std::move(c).error();
    chain.push_back(std::move(c).value());
  }
  return chain;
}

Status check_signing_usage(const Certificate& leaf, bool require_code_signing, std::string_view what) {
  uint32_t ku = X509_get_key_usage(leaf.get());
  uint32_t eku = X509_get_extended_key_usage(leaf.get());
  ERR_clear_error();
  bool has_ku = ku != UINT32_MAX, has_eku = eku != UINT32_MAX;
  if (!has_ku && !has_eku) return cert_invalid(what, "has neither a key usage nor an extended key usage");
  if (has_ku && (ku & KU_DIGITAL_SIGNATURE) == 0)
    return cert_invalid(what, "its key usage does not allow signing");
  if ((has_eku || require_code_signing) && (!has_eku || (eku & (XKU_CODE_SIGN | XKU_ANYEKU)) == 0)) {
    return cert_invalid(what, "its extended key usage does not allow code signing");
  }
  return ok_status();
}

Status verify_embedded_scts(const Certificate& leaf, const Certificate& issuer,
                            const std::vector<CtLog>& logs) {
  constexpr std::string_view what = "the signing certificate";
  auto* scts =
      static_cast<STACK_OF(SCT)*>(X509_get_ext_d2i(leaf.get(), NID_ct_precert_scts, nullptr, nullptr));
  ERR_clear_error();
  if (scts == nullptr) return cert_invalid(what, "carries no certificate transparency timestamp (SCT)");
  std::unique_ptr<STACK_OF(SCT), void (*)(STACK_OF(SCT)*)> guard(scts, SCT_LIST_free);
  INFERGATE_ASSIGN_OR_RETURN(std::string tbs, precert_tbs(leaf));
  INFERGATE_ASSIGN_OR_RETURN(PublicKey issuer_key, issuer.public_key());
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest issuer_hash, sha256(issuer_key.spki_der()));
  std::string last_problem = "no SCT names a trusted CT log";
  for (int i = 0; i < sk_SCT_num(scts); ++i) {
    const SCT* sct = sk_SCT_value(scts, i);
    if (SCT_get_version(sct) != SCT_VERSION_V1) continue;
    unsigned char* id = nullptr;
    size_t id_len = SCT_get0_log_id(sct, &id);
    const CtLog* log = nullptr;
    for (const auto& l : logs) {
      if (id_len == l.log_id.size() &&
          std::equal(l.log_id.begin(), l.log_id.end(), reinterpret_cast<char*>(id)))
        log = &l;
    }
    if (log == nullptr) continue;
    uint64_t ms = SCT_get_timestamp(sct);
    WallTime when{std::chrono::milliseconds(ms)};
    if (!in_range(when, log->valid_from, log->valid_until)) {
      last_problem = "the SCT's log was not valid at the SCT's time";
      continue;
    }
    unsigned char* ext = nullptr;
    size_t ext_len = SCT_get0_extensions(sct, &ext);
    unsigned char* sig = nullptr;
    size_t sig_len = SCT_get0_signature(sct, &sig);
    // digitally-signed struct of RFC 6962 3.2 for a precertificate entry.
    std::string msg;
    put_be(&msg, 0, 1);  // v1
    put_be(&msg, 0, 1);  // certificate_timestamp
    put_be(&msg, ms, 8);
    put_be(&msg, 1, 2);  // precert_entry
    msg.append(reinterpret_cast<const char*>(issuer_hash.bytes.data()), issuer_hash.bytes.size());
    put_be(&msg, tbs.size(), 3);
    msg.append(tbs);
    put_be(&msg, ext_len, 2);
    msg.append(reinterpret_cast<const char*>(ext), ext_len);
    if (log->key.verify(msg, std::string_view(reinterpret_cast<const char*>(sig), sig_len)))
      return ok_status();
    last_problem = "an SCT's signature does not verify";
  }
  return cert_invalid(what, last_problem);
}

}  // namespace infergate::agent
