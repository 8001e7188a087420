// Serving certificates: loaded from files (as a mounted kubernetes.io/tls Secret holds them) with every
// mismatch named, and self-signed ones a client can verify once it trusts that very certificate.
#include "infergate/http/tls.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "fixtures/tls_certs.h"
#include "infergate/common/fs.h"
#include "infergate/http/client.h"

namespace infergate::http {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;

TEST(Tls, LoadsACertificateAndItsKeyFromFilesAndNamesWhatIsWrong) {
  auto m = infergate::testing::make_tls_material();
  auto other = infergate::testing::make_tls_material();
  ASSERT_TRUE(m.ok() && other.ok());
  auto dir = TempDir::create("tls");
  ASSERT_TRUE(dir.ok());
  const auto crt = dir->path() / "tls.crt", key = dir->path() / "tls.key", wrong = dir->path() / "other.key";
  ASSERT_TRUE(write_file_atomic(crt, m->server_cert_pem).ok());
  ASSERT_TRUE(write_file_atomic(key, m->server_key_pem).ok());
  ASSERT_TRUE(write_file_atomic(wrong, other->server_key_pem).ok());
  auto ok = load_tls_files(crt, key);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok->cert_chain_pem, m->server_cert_pem);
  auto mismatched = load_tls_files(crt, wrong);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.error().reason(), "BadTlsConfig");
  EXPECT_NE(mismatched.error().message().find("other.key"), std::string::npos);
  auto swapped = load_tls_files(key, crt);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.error().message().find("not a PEM certificate"), std::string::npos);
  auto missing = load_tls_files(dir->path() / "absent.crt", key);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("absent.crt"), std::string::npos);
}

TEST(Tls, ASelfSignedCertificateServesAndVerifiesForItsNamesWhenTrusted) {
  auto tls = make_self_signed_tls({"localhost", "127.0.0.1"});
  ASSERT_TRUE(tls.ok()) << tls.error().to_string();
  ServerOptions o;
  o.tls = *tls;
  auto s = Server::start(o, [](std::shared_ptr<Exchange> ex) { ex->respond({200, "text/plain", {}, "hi"}); });
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  ClientRequest r;
  r.timeout = 5s;
  auto trusted = fetch((*s)->url() + "/", r, ClientTls{tls->cert_chain_pem, "", "", false});
  ASSERT_TRUE(trusted.ok()) << trusted.error().to_string();
  EXPECT_EQ(trusted->body, "hi");
  EXPECT_FALSE(fetch((*s)->url() + "/", r).ok()) << "the system's CAs do not vouch for it";
  auto skipped = fetch((*s)->url() + "/", r, ClientTls{"", "", "", true});
  EXPECT_TRUE(skipped.ok()) << skipped.error().to_string();
  // Two certificates made one after the other are different keys.
  auto again = make_self_signed_tls({"localhost"});
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->key_pem, tls->key_pem);
  EXPECT_TRUE(refused(make_self_signed_tls({}), "", {"at least one name"}));
}

}  // namespace
}  // namespace infergate::http
