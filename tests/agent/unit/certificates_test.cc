// X.509 for OMS: chains made here with the openssl CLI (a private CA, as the certificate method uses),
// the Fulcio certificate of the keyless fixture (identity, issuer, SCT), and trusted root parsing.
#include "infergate/agent/policy/certificates.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/policy/sigstore_trust.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;
using testing::oms_fixture;
using testing::write_file;

// A CA, an intermediate and leaves with chosen extensions, all P-256, valid from now for 20 years.
struct Pki {
  TempDir tmp = *TempDir::create("pki");
  fs::path p(const std::string& n) const { return tmp.path() / n; }

  void run(std::vector<std::string> args) {
    auto r = run_command(args);
    ASSERT_TRUE(r.ok() && r->status.success())
        << args[1] << ": " << (r.ok() ? r->err : r.error().to_string());
  }
  void key(const std::string& n) {
    run({"openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
         p(n + ".key").string()});
  }
  // Issues n.pem signed by issuer (or self-signed when issuer is empty) with the extension lines.
  void issue(const std::string& n, const std::string& issuer, const std::string& ext) {
    key(n);
    write_file(tmp.path(), n + ".ext", "[v3]\n" + ext + "\n");
    run({"openssl", "req", "-new", "-key", p(n + ".key").string(), "-subj", "/CN=" + n, "-out",
         p(n + ".csr").string()});
    std::vector<std::string> args = {"openssl",
                                     "x509",
                                     "-req",
                                     "-in",
                                     p(n + ".csr").string(),
                                     "-out",
                                     p(n + ".pem").string(),
                                     "-extfile",
                                     p(n + ".ext").string(),
                                     "-extensions",
                                     "v3",
                                     "-days",
                                     "7300"};
    if (issuer.empty()) {
      args.insert(args.end(), {"-signkey", p(n + ".key").string()});
    } else {
      args.insert(args.end(), {"-CA", p(issuer + ".pem").string(), "-CAkey", p(issuer + ".key").string(),
                               "-CAcreateserial"});
    }
    run(args);
  }
  Certificate cert(const std::string& n) {
    return Certificate::from_pem(*read_file(p(n + ".pem")), n)->front();
  }
};

constexpr const char* kCaExt = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign";
WallTime days_from_now(int days) { return std::chrono::system_clock::now() + std::chrono::hours(24 * days); }

TEST(Certificates, ChainsToAConfiguredRootOrIntermediateOnlyWithinValidity) {
  Pki pki;
  pki.issue("root", "", kCaExt);
  pki.issue("inter", "root", kCaExt);
  pki.issue("leaf", "inter", "keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning");
  Certificate leaf = pki.cert("leaf"), inter = pki.cert("inter"), root = pki.cert("root");
  EXPECT_TRUE(verify_chain(leaf, {inter}, {root}, days_from_now(1), "leaf").ok());
  EXPECT_TRUE(verify_chain(leaf, {}, {inter}, days_from_now(1), "leaf").ok());
  EXPECT_EQ(verify_chain(leaf, {}, {root}, days_from_now(1), "leaf").error().reason(), "CertificateInvalid");
  EXPECT_EQ(verify_chain(leaf, {inter}, {root}, days_from_now(365 * 30), "leaf").error().reason(),
            "CertificateInvalid");
  EXPECT_EQ(verify_chain(leaf, {inter}, {root}, days_from_now(-2), "leaf").error().reason(),
            "CertificateInvalid");
  EXPECT_EQ(verify_chain(leaf, {inter}, {}, days_from_now(1), "leaf").error().reason(), "CertificateInvalid");
}

TEST(Certificates, ASigningCertificateMustAllowSigningCode) {
  Pki pki;
  pki.issue("root", "", kCaExt);
  pki.issue("good", "root", "keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning");
  pki.issue("ku-only", "root", "keyUsage=critical,digitalSignature");
  pki.issue("tls", "root", "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth");
  pki.issue("encipher", "root", "keyUsage=critical,keyEncipherment");
  pki.issue("bare", "root", "subjectKeyIdentifier=hash");
  EXPECT_TRUE(check_signing_usage(pki.cert("good"), true, "c").ok());
  EXPECT_TRUE(check_signing_usage(pki.cert("ku-only"), false, "c").ok());
  EXPECT_EQ(check_signing_usage(pki.cert("ku-only"), true, "c").error().reason(), "CertificateInvalid");
  EXPECT_EQ(check_signing_usage(pki.cert("tls"), false, "c").error().reason(), "CertificateInvalid");
  EXPECT_EQ(check_signing_usage(pki.cert("encipher"), false, "c").error().reason(), "CertificateInvalid");
  EXPECT_EQ(check_signing_usage(pki.cert("bare"), false, "c").error().reason(), "CertificateInvalid");
}

TEST(Certificates, ReadsTheFulcioIdentityIssuerAndSctOfTheKeylessFixture) {
  auto bundle = parse_bundle(*read_file(oms_fixture("keyless") / "model.sig"));
  ASSERT_TRUE(bundle.ok());
  auto leaf = Certificate::from_der(bundle->certificates.front(), "leaf");
  ASSERT_TRUE(leaf.ok()) << leaf.error().to_string();
  EXPECT_EQ(leaf->identities(), std::vector<std::string>{testing::kFixtureIdentity});
  EXPECT_EQ(leaf->oidc_issuer(), std::string(testing::kFixtureIssuer));
  auto root = load_trusted_root(oms_fixture("keyless") / "trusted_root.json");
  ASSERT_TRUE(root.ok()) << root.error().to_string();
  const Certificate& ca = root->certificate_authorities.front().chain.front();
  EXPECT_TRUE(verify_embedded_scts(*leaf, ca, root->ctlogs).ok());
  auto other = load_trusted_root(oms_fixture("keyless-intoto") / "trusted_root.json");
  EXPECT_EQ(verify_embedded_scts(*leaf, ca, other->ctlogs).error().reason(), "CertificateInvalid");
  // The right log, but another issuer key hash: the SCT's signature no longer verifies.
  EXPECT_EQ(verify_embedded_scts(*leaf, other->certificate_authorities.front().chain.front(), root->ctlogs)
                .error()
                .reason(),
            "CertificateInvalid");
}

TEST(Certificates, RefusesTextThatIsNotACertificate) {
  EXPECT_EQ(Certificate::from_der("not der", "x").error().reason(), "CertificateInvalid");
  EXPECT_EQ(Certificate::from_pem("no pem here", "x").error().reason(), "KeyInvalid");
  EXPECT_EQ(Certificate::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "x")
                .error()
                .reason(),
            "KeyInvalid");
}

TEST(TrustedRoot, RefusesRootsWithoutLogsOrCasOrWithBadFields) {
  std::string text = *read_file(oms_fixture("keyless") / "trusted_root.json");
  ASSERT_TRUE(parse_trusted_root(text, "root").ok());
  std::vector<std::pair<std::string, std::function<void(Json&)>>> edits = {
      {"no logs", [](Json& j) { j["tlogs"] = Json::array(); }},
      {"no CAs", [](Json& j) { j.erase("certificateAuthorities"); }},
      {"a bad key", [](Json& j) { j["tlogs"][0]["publicKey"]["rawBytes"] = "AAAA"; }},
      {"a bad time", [](Json& j) { j["tlogs"][0]["publicKey"]["validFor"]["start"] = "yesterday"; }},
      {"a bad certificate",
       [](Json& j) { j["certificateAuthorities"][0]["certChain"]["certificates"][0]["rawBytes"] = "AAAA"; }},
      {"another media type", [](Json& j) { j["mediaType"] = "application/json"; }},
  };
  for (const auto& [name, edit] : edits) {
    Json j = Json::parse(text);
    edit(j);
    EXPECT_EQ(parse_trusted_root(j.dump(), "root").error().reason(), "KeyInvalid") << name;
  }
}

}  // namespace
}  // namespace infergate::agent
