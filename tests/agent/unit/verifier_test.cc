// verify_release through the library: the order of checks, expiry on a fake clock, and the report
// values. (tests/agent/cli covers every refusal through the binary with its exit code.)
#include "infergate/agent/verify/verifier.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

using testing::make_release;
using testing::Release;
using testing::write_file;
using namespace std::chrono_literals;

VerifyOptions options(const Release& r) {
  VerifyOptions o;
  o.dir = r.dir;
  o.trust.public_keys = {r.pub};
  return o;
}

TEST(VerifyRelease, AcceptsAGoodReleaseAndDescribesIt) {
  testing::ReleaseSpec spec;
  spec.name = "glm-4-9b";
  spec.version = 5;
  Release r = make_release(spec);
  VerifyOptions o = options(r);
  o.policy = {"glm-4-9b", 5, "fp16"};
  auto v = verify_release(o);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(v->name, "glm-4-9b");
  EXPECT_EQ(v->version, 5);
  EXPECT_EQ(v->weight_format, "fp16");
  EXPECT_EQ(v->files, 5u);
  EXPECT_EQ(v->release_digest, "sha256:" + sha256(*read_file(r.dir / "release.dsse.json"))->hex());
}

TEST(VerifyRelease, RefusesAnExpiredReleaseOnlyOnceItHasExpired) {
  FakeClock clock(*parse_rfc3339("2026-05-01T00:00:00Z"));
  testing::ReleaseSpec spec;
  spec.expires_in = 1h;
  spec.clock = &clock;
  Release r = make_release(spec);
  VerifyOptions o = options(r);
  o.clock = &clock;
  clock.advance(59min);
  EXPECT_TRUE(verify_release(o).ok());
  clock.advance(1min);
  auto v = verify_release(o);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().reason(), "ReleaseExpired");
}

TEST(VerifyRelease, ChecksTheSignatureBeforeTheFiles) {
  Release r = make_release();
  std::string tokenizer = *read_file(r.dir / "tokenizer.json");
  tokenizer[0] ^= 1;  // same size, other content
  write_file(r.dir, "tokenizer.json", tokenizer);
  auto other = testing::make_key(r.tmp.path() / "other");
  VerifyOptions o = options(r);
  o.trust.public_keys = {r.tmp.path() / "other.pub.pem"};
  EXPECT_EQ(verify_release(o).error().reason(), "UntrustedKey");
  EXPECT_EQ(verify_release(options(r)).error().reason(), "DigestMismatch");
}

TEST(VerifyRelease, RefusesAManifestListingFilesTheStatementHasNoSizeFor) {
  // A statement whose sizes disagree with its own manifest can only come from a broken signer.
  Release r = make_release();
  auto env = *read_file(r.dir / "release.dsse.json");
  write_file(r.dir, "late.txt", "added after signing");
  auto m = *Manifest::parse(*read_file(r.dir / "SHA256SUMS"));
  std::vector<ManifestEntry> entries = m.entries();
  entries.push_back({"late.txt", *sha256("added after signing")});
  write_file(r.dir, "SHA256SUMS", Manifest::from_entries(entries)->to_text());
  // Re-sign the new manifest with sizes from the old statement: only the library can do this.
  auto old = parse_statement(parse_envelope(env)->payload);
  ASSERT_TRUE(old.ok());
  ReleaseStatement s = *old;
  s.manifest_digest = *sha256(*read_file(r.dir / "SHA256SUMS"));
  DsseEnvelope e{std::string(kInTotoPayloadType), serialize_statement(s), {}};
  e.signatures.push_back({r.private_key.key_id(), *r.private_key.sign(dsse_pae(e.payload_type, e.payload))});
  write_file(r.dir, "release.dsse.json", serialize_envelope(e));
  EXPECT_EQ(verify_release(options(r)).error().reason(), "StatementInvalid");
}

}  // namespace
}  // namespace infergate::agent
