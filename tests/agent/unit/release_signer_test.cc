// Signing: never signs a tree that its manifest does not describe, and records what it signed.
#include "infergate/agent/signing/release_signer.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

using testing::make_release;
using testing::Release;
using testing::write_file;
using namespace std::chrono_literals;

SignOptions options(const Release& r) {
  SignOptions o;
  o.dir = r.dir;
  o.name = "demo-model";
  o.version = 4;
  return o;
}

TEST(SignRelease, WritesAStatementOverTheManifestWithSizesAndFormat) {
  Release r = make_release();
  FakeClock clock(*parse_rfc3339("2026-03-01T12:00:00Z"));
  SignOptions o = options(r);
  o.clock = &clock;
  o.expires_in = 24h;
  auto s = sign_release(o, r.private_key);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(*read_file(r.dir / "release.dsse.json"), s->envelope);
  auto env = parse_envelope(s->envelope);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->signatures[0].keyid, r.private_key.key_id());
  EXPECT_EQ(s->statement.manifest_digest, *sha256(*read_file(r.dir / "SHA256SUMS")));
  EXPECT_EQ(s->statement.weight_format, "fp16");  // from the F16 safetensors shards
  EXPECT_EQ(format_rfc3339(s->statement.created_at), "2026-03-01T12:00:00Z");
  EXPECT_EQ(format_rfc3339(*s->statement.expires_at), "2026-03-02T12:00:00Z");
  EXPECT_EQ(s->statement.file_sizes.size(), 5u);
  EXPECT_EQ(s->statement.file_sizes.at("model-00001-of-00002.safetensors"),
            std::filesystem::file_size(r.dir / "model-00001-of-00002.safetensors"));
}

TEST(SignRelease, RefusesATreeThatNoLongerMatchesItsManifest) {
  Release r = make_release();
  write_file(r.dir, "tokenizer.json", "changed after the manifest was written");
  auto s = sign_release(options(r), r.private_key);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "DigestMismatch");
  write_file(r.dir, "injected.py", "import os");
  EXPECT_EQ(sign_release(options(r), r.private_key).error().reason(), "UnlistedFile");
}

TEST(SignRelease, RefusesWithoutAManifestOrWithAnEmptyOne) {
  Release r = make_release();
  std::filesystem::remove(r.dir / "SHA256SUMS");
  EXPECT_EQ(sign_release(options(r), r.private_key).error().reason(), "ManifestMissing");
  write_file(r.dir, "SHA256SUMS", "");
  EXPECT_EQ(sign_release(options(r), r.private_key).error().reason(), "EmptyRelease");
}

TEST(SignRelease, RefusesAWeightFormatThatContradictsTheMetadata) {
  Release r = make_release();
  SignOptions o = options(r);
  o.weight_format = "int4";
  EXPECT_EQ(sign_release(o, r.private_key).error().reason(), "MetadataInvalid");
  o.weight_format = "fp16";
  EXPECT_TRUE(sign_release(o, r.private_key).ok());
}

TEST(SignRelease, UsesTheGivenFormatWhenNothingElseSays) {
  testing::ReleaseSpec spec;
  spec.files = {{"weights.gguf", "GGUF..."}};
  spec.weight_format = "int4";
  Release r = make_release(spec);
  SignOptions o = options(r);
  EXPECT_EQ(sign_release(o, r.private_key).error().reason(), "MetadataInvalid");
  o.weight_format = "int4";
  auto s = sign_release(o, r.private_key);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->statement.weight_format, "int4");
}

TEST(SignRelease, RefusesBadNamesVersionsAndExpiries) {
  Release r = make_release();
  SignOptions o = options(r);
  o.name = "no spaces";
  EXPECT_EQ(sign_release(o, r.private_key).error().reason(), "UsageError");
  o = options(r);
  o.version = -1;
  EXPECT_EQ(sign_release(o, r.private_key).error().reason(), "UsageError");
  o = options(r);
  o.expires_in = 0s;
  EXPECT_EQ(sign_release(o, r.private_key).error().reason(), "UsageError");
}

}  // namespace
}  // namespace infergate::agent
