// sign --format oms through the library: what it writes verifies, it covers what it should, agrees
// with SHA256SUMS, and a release can carry both formats.
#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/signing/release_signer.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/agent/verify/verifier.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;
using testing::make_release;
using testing::Release;
using testing::write_file;

VerifyOptions oms_options(const Release& r) {
  VerifyOptions o;
  o.dir = r.dir;
  o.formats = {ReleaseFormat::kOms};
  o.trust.public_keys = {r.pub};
  return o;
}

TEST(SignOms, WritesABundleThatVerifiesAndCoversEveryFileButTheSignatures) {
  for (KeyType t : {KeyType::kEcdsaP256, KeyType::kEcdsaP384, KeyType::kEd25519}) {
    testing::ReleaseSpec spec;
    spec.key_type = t;
    Release r = make_release(spec);  // SHA256SUMS and release.dsse.json are there
    auto s = sign_oms_release({r.dir, "demo-model", std::nullopt, {}}, r.private_key);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    EXPECT_EQ(s->statement.serialization.ignore_paths,
              (std::vector<std::string>{"model.sig", "release.dsse.json"}));
    bool covers_manifest = false;
    for (const auto& res : s->statement.resources) covers_manifest |= res.path == "SHA256SUMS";
    EXPECT_TRUE(covers_manifest);
    auto v = verify_release(oms_options(r));
    ASSERT_TRUE(v.ok()) << key_type_name(t) << ": " << v.error().to_string();
    EXPECT_EQ(v->name, "demo-model");
    EXPECT_EQ(v->files, 6u);  // the five model files and SHA256SUMS
  }
}

TEST(SignOms, AReleaseCanCarryBothFormatsAndEachVerifiesAlone) {
  Release r = make_release();
  ASSERT_TRUE(sign_oms_release({r.dir, "", std::nullopt, {}}, r.private_key).ok());
  VerifyOptions ours;
  ours.dir = r.dir;
  ours.trust.public_keys = {r.pub};
  auto a = verify_release(ours);  // model.sig is not part of the SHA256SUMS rule
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->format, "infergate");
  auto b = verify_release(oms_options(r));
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(b->format, "oms");
  EXPECT_EQ(b->name, "model");  // the directory's name by default
  // With both allowed, ours wins: it binds name, version and expiry.
  ours.formats = {ReleaseFormat::kInfergate, ReleaseFormat::kOms};
  EXPECT_EQ(verify_release(ours)->format, "infergate");
  // Re-signing our release afterwards leaves model.sig valid (release.dsse.json is an ignored path).
  testing::resign(r);
  EXPECT_TRUE(verify_release(oms_options(r)).ok());
}

TEST(SignOms, RefusesToSignWhatSha256SumsContradicts) {
  Release r = make_release();
  write_file(r.dir, "config.json", "{\"changed\":true}");
  auto s = sign_oms_release({r.dir, "", std::nullopt, {}}, r.private_key);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "DigestMismatch");
  EXPECT_FALSE(fs::exists(r.dir / "model.sig"));
  write_file(r.dir, "new.txt", "x");
  testing::resign(r);
  fs::remove(r.dir / "new.txt");
  EXPECT_EQ(sign_oms_release({r.dir, "", std::nullopt, {}}, r.private_key).error().reason(), "MissingFile");
}

TEST(SignOms, SignsShardsThatTileEveryFile) {
  Release r = make_release();
  auto s = sign_oms_release({r.dir, "", 1000, {}}, r.private_key);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->statement.serialization.method, OmsMethod::kShards);
  for (const auto& res : s->statement.resources) EXPECT_LE(res.end - res.start, 1000u);
  EXPECT_TRUE(verify_release(oms_options(r)).ok());
  write_file(r.dir, "a:b.txt", "colon");
  EXPECT_EQ(sign_oms_release({r.dir, "", 1000, {}}, r.private_key).error().reason(), "UsageError");
}

TEST(SignOms, RefusesSymlinksBadNamesAndEmptyTrees) {
  Release r = make_release();
  EXPECT_EQ(sign_oms_release({r.dir, "bad name", std::nullopt, {}}, r.private_key).error().reason(),
            "UsageError");
  EXPECT_EQ(sign_oms_release({r.dir, "", uint64_t{0}, {}}, r.private_key).error().reason(), "UsageError");
  fs::create_symlink("config.json", r.dir / "link.json");
  EXPECT_EQ(sign_oms_release({r.dir, "", std::nullopt, {}}, r.private_key).error().reason(), "Symlink");
  auto tmp = *TempDir::create("oms-empty");
  fs::create_directory(tmp.path() / "m");
  EXPECT_EQ(sign_oms_release({tmp.path() / "m", "", std::nullopt, {}}, r.private_key).error().reason(),
            "EmptyRelease");
}

}  // namespace
}  // namespace infergate::agent
