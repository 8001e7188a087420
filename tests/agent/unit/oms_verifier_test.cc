// verify_release on OMS bundles: the checked-in fixtures sigstore-js made (tests/agent/fixtures/oms,
// see its make.sh) verify, and each tampering, policy and tree rule is refused with its reason.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "agent_test_util.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/agent/verify/verifier.h"
#include "infergate/common/encoding.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;
using testing::copy_oms_fixture;
using testing::oms_fixture;
using testing::OmsRelease;
using testing::write_file;

VerifyOptions keyless_options(const fs::path& dir, const std::string& bundle = "keyless") {
  VerifyOptions o;
  o.dir = dir;
  o.formats = {ReleaseFormat::kOms};
  o.trust.trusted_root = oms_fixture(bundle) / "trusted_root.json";
  o.trust.identities = {{testing::kFixtureIdentity, testing::kFixtureIssuer}};
  return o;
}

VerifyOptions key_options(const fs::path& dir, const std::string& bundle) {
  VerifyOptions o;
  o.dir = dir;
  o.formats = {ReleaseFormat::kOms};
  o.trust.public_keys = {oms_fixture(bundle) / "key.pub.pem"};
  return o;
}

std::string reason(const VerifyOptions& o) {
  auto v = verify_release(o);
  return v.ok() ? "Verified" : v.error().reason() + ": " + v.error().message();
}

// Rewrites model.sig's JSON.
void edit_bundle(const fs::path& dir, const std::function<void(Json&)>& edit) {
  Json j = Json::parse(*read_file(dir / "model.sig"));
  edit(j);
  ASSERT_TRUE(write_file_atomic(dir / "model.sig", j.dump(), 0644).ok());
}

std::string flip(const std::string& b64, size_t at) {
  std::string raw = *base64_decode(b64);
  raw[at % raw.size()] ^= 1;
  return base64_encode(raw);
}

TEST(VerifyOms, AcceptsEveryFixtureSigstoreJsMade) {
  for (const char* b : {"keyless", "keyless-intoto"}) {
    OmsRelease r = copy_oms_fixture(b);
    auto v = verify_release(keyless_options(r.dir, b));
    ASSERT_TRUE(v.ok()) << b << ": " << v.error().to_string();
    EXPECT_EQ(v->format, "oms");
    EXPECT_EQ(v->signer, "keyless publisher@example.com (https://accounts.example.com)");
    EXPECT_TRUE(v->created_at.has_value());
    EXPECT_FALSE(v->version.has_value());
    EXPECT_EQ(v->files, 4u);  // notes/ is in ignore_paths
    EXPECT_EQ(v->weight_format, "fp16");
    EXPECT_EQ(v->release_digest, "sha256:" + sha256(*read_file(r.dir / "model.sig"))->hex());
  }
  for (const char* b : {"key-p256", "key-p384-shards"}) {
    OmsRelease r = copy_oms_fixture(b);
    EXPECT_EQ(reason(key_options(r.dir, b)), "Verified") << b;
  }
}

TEST(VerifyOms, RefusesAnOmsBundleUnlessTheTrustConfigurationAllowsTheFormat) {
  OmsRelease r = copy_oms_fixture("key-p256");
  VerifyOptions o = key_options(r.dir, "key-p256");
  o.formats = {ReleaseFormat::kInfergate};
  EXPECT_EQ(verify_release(o).error().reason(), "FormatNotAllowed");
  fs::remove(r.dir / "model.sig");
  o.formats = {ReleaseFormat::kInfergate, ReleaseFormat::kOms};
  EXPECT_EQ(verify_release(o).error().reason(), "SignatureMissing");
}

TEST(VerifyOms, RefusesAKeylessBundleForAnotherIdentityOrIssuer) {
  OmsRelease r = copy_oms_fixture("keyless");
  VerifyOptions o = keyless_options(r.dir);
  o.trust.identities = {{"mallory@example.com", testing::kFixtureIssuer}};
  EXPECT_EQ(verify_release(o).error().reason(), "IdentityMismatch");
  o.trust.identities = {{testing::kFixtureIdentity, "https://accounts.example.org"}};
  EXPECT_EQ(verify_release(o).error().reason(), "IdentityMismatch");
  // Any one of several expected identities will do.
  o.trust.identities.push_back({testing::kFixtureIdentity, testing::kFixtureIssuer});
  EXPECT_EQ(reason(o), "Verified");
  o.trust.identities.clear();
  EXPECT_EQ(verify_release(o).error().reason(), "UsageError");
}

TEST(VerifyOms, RefusesAKeylessBundleWhoseLogEvidenceWasAltered) {
  auto entry = [](Json& j) -> Json& { return j["verificationMaterial"]["tlogEntries"][0]; };
  std::vector<std::pair<std::string, std::function<void(Json&)>>> edits = {
      {"set",
       [&](Json& j) {
         auto& p = entry(j)["inclusionPromise"]["signedEntryTimestamp"];
         p = flip(p, 10);
       }},
      {"integrated time", [&](Json& j) { entry(j)["integratedTime"] = "1"; }},
      {"log index", [&](Json& j) { entry(j)["logIndex"] = "7"; }},
      {"audit path",
       [&](Json& j) {
         auto& h = entry(j)["inclusionProof"]["hashes"][0];
         h = flip(h, 0);
       }},
      {"proof index", [&](Json& j) { entry(j)["inclusionProof"]["logIndex"] = "1"; }},
      {"checkpoint signature",
       [&](Json& j) {
         std::string cp = entry(j)["inclusionProof"]["checkpoint"]["envelope"];
         cp[cp.size() - 5] = cp[cp.size() - 5] == 'A' ? 'B' : 'A';
         entry(j)["inclusionProof"]["checkpoint"]["envelope"] = cp;
       }},
      {"log id", [&](Json& j) { entry(j)["logId"]["keyId"] = base64_encode(std::string(32, 'x')); }},
      {"no entry", [&](Json& j) { j["verificationMaterial"]["tlogEntries"] = Json::array(); }},
      {"no promise", [&](Json& j) { entry(j).erase("inclusionPromise"); }},
  };
  for (const auto& [name, edit] : edits) {
    OmsRelease r = copy_oms_fixture("keyless");
    edit_bundle(r.dir, edit);
    EXPECT_EQ(verify_release(keyless_options(r.dir)).error().reason(), "TransparencyLogInvalid") << name;
  }
}

TEST(VerifyOms, RefusesAKeylessBundleWhoseSignatureOrStatementWasAltered) {
  OmsRelease r = copy_oms_fixture("keyless");
  edit_bundle(r.dir, [](Json& j) {
    auto& s = j["dsseEnvelope"]["signatures"][0]["sig"];
    s = flip(s, 20);
  });
  EXPECT_EQ(verify_release(keyless_options(r.dir)).error().reason(), "SignatureInvalid");
  OmsRelease r2 = copy_oms_fixture("keyless");
  edit_bundle(r2.dir, [](Json& j) {
    Json st = Json::parse(*base64_decode(j["dsseEnvelope"]["payload"].get<std::string>()));
    st["subject"][0]["name"] = "another-model";
    j["dsseEnvelope"]["payload"] = base64_encode(st.dump());
  });
  EXPECT_EQ(verify_release(keyless_options(r2.dir)).error().reason(), "SignatureInvalid");
}

TEST(VerifyOms, RefusesAKeylessBundleUnderAnotherTrustedRoot) {
  // The other fixture's Sigstore: another log (the entry is unknown to it).
  OmsRelease r = copy_oms_fixture("keyless");
  VerifyOptions o = keyless_options(r.dir);
  o.trust.trusted_root = oms_fixture("keyless-intoto") / "trusted_root.json";
  EXPECT_EQ(verify_release(o).error().reason(), "TransparencyLogInvalid");
  // The right log but another CA: the certificate does not chain.
  Json mine = Json::parse(*read_file(oms_fixture("keyless") / "trusted_root.json"));
  Json other = Json::parse(*read_file(oms_fixture("keyless-intoto") / "trusted_root.json"));
  mine["certificateAuthorities"] = other["certificateAuthorities"];
  write_file(r.tmp.path(), "mixed.json", mine.dump());
  o.trust.trusted_root = r.tmp.path() / "mixed.json";
  EXPECT_EQ(verify_release(o).error().reason(), "CertificateInvalid");
  // A CA that was not valid yet at the log's time.
  mine = Json::parse(*read_file(oms_fixture("keyless") / "trusted_root.json"));
  mine["certificateAuthorities"][0]["validFor"]["start"] = "2099-01-01T00:00:00Z";
  write_file(r.tmp.path(), "later.json", mine.dump());
  o.trust.trusted_root = r.tmp.path() / "later.json";
  EXPECT_EQ(verify_release(o).error().reason(), "CertificateInvalid");
  // A CT log the SCT does not come from.
  mine = Json::parse(*read_file(oms_fixture("keyless") / "trusted_root.json"));
  mine["ctlogs"] = other["ctlogs"];
  write_file(r.tmp.path(), "ct.json", mine.dump());
  o.trust.trusted_root = r.tmp.path() / "ct.json";
  EXPECT_EQ(verify_release(o).error().reason(), "CertificateInvalid");
}

TEST(VerifyOms, RefusesAKeyBundleSignedByAnUntrustedKey) {
  OmsRelease r = copy_oms_fixture("key-p256");
  VerifyOptions o = key_options(r.dir, "key-p384-shards");
  EXPECT_EQ(verify_release(o).error().reason(), "UntrustedKey");
  o.trust.public_keys.clear();
  o.trust.trusted_root = oms_fixture("keyless") / "trusted_root.json";
  EXPECT_EQ(verify_release(o).error().reason(), "UntrustedKey");
}

TEST(VerifyOms, AppliesTheSameTreeRulesAsSha256Sums) {
  struct Case {
    const char* name;
    std::function<void(const fs::path&)> damage;
    const char* reason;
  };
  std::vector<Case> cases = {
      {"a changed byte",
       [](const fs::path& d) { write_file(d, "tokenizer.json", "{\"model\":{\"type\":\"BPF\"}}\n"); },
       "DigestMismatch"},
      {"a missing file", [](const fs::path& d) { fs::remove(d / "sub/deeper/file.txt"); }, "MissingFile"},
      {"an added file", [](const fs::path& d) { write_file(d, "sub/extra.safetensors", "x"); },
       "UnlistedFile"},
      {"an unsigned SHA256SUMS", [](const fs::path& d) { write_file(d, "SHA256SUMS", "x"); }, "UnlistedFile"},
      {"a symlink", [](const fs::path& d) { fs::create_symlink("weights.bin", d / "alias.bin"); }, "Symlink"},
      {"a FIFO", [](const fs::path& d) { ::mkfifo((d / "pipe").c_str(), 0644); }, "SpecialFile"},
  };
  for (const auto& c : cases) {
    OmsRelease r = copy_oms_fixture("key-p256");
    c.damage(r.dir);
    auto v = verify_release(key_options(r.dir, "key-p256"));
    ASSERT_FALSE(v.ok()) << c.name;
    EXPECT_EQ(v.error().reason(), c.reason) << c.name << ": " << v.error().message();
  }
}

TEST(VerifyOms, IgnoresExactlyTheIgnoredPathsWhateverLiesThere) {
  // notes/ is in the fixture's ignore_paths: anything there, even a FIFO or a link, is never looked at.
  OmsRelease r = copy_oms_fixture("key-p256");
  write_file(r.dir, "notes/new.txt", "added later");
  ::mkfifo((r.dir / "notes/pipe").c_str(), 0644);
  fs::create_symlink("/etc/passwd", r.dir / "notes/link");
  EXPECT_EQ(reason(key_options(r.dir, "key-p256")), "Verified");
  // notesX/ is not notes/: a prefix of a name is not a path prefix.
  write_file(r.dir, "notesX/a.txt", "x");
  EXPECT_EQ(verify_release(key_options(r.dir, "key-p256")).error().reason(), "UnlistedFile");
}

TEST(VerifyOms, ChecksShardsAndNamesTheBytesThatDiffer) {
  OmsRelease r = copy_oms_fixture("key-p384-shards");
  std::string w = *read_file(r.dir / "weights.bin");
  w[2500] ^= 1;
  write_file(r.dir, "weights.bin", w);
  auto v = verify_release(key_options(r.dir, "key-p384-shards"));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().reason(), "DigestMismatch");
  EXPECT_NE(v.error().message().find("bytes 2000 to 3000"), std::string::npos) << v.error().message();
  write_file(r.dir, "weights.bin", w + "x");
  EXPECT_EQ(verify_release(key_options(r.dir, "key-p384-shards")).error().reason(), "SizeMismatch");
}

TEST(VerifyOms, AcceptsAnEmptyFileUnderShardsAsTheFormatGivesItNoShard) {
  OmsRelease r = copy_oms_fixture("key-p384-shards");
  write_file(r.dir, "empty.txt", "");
  EXPECT_EQ(reason(key_options(r.dir, "key-p384-shards")), "Verified");
  OmsRelease f = copy_oms_fixture("key-p256");  // whole files: an empty file is a file to list
  write_file(f.dir, "empty.txt", "");
  EXPECT_EQ(verify_release(key_options(f.dir, "key-p256")).error().reason(), "UnlistedFile");
}

TEST(VerifyOms, HoldsTheNameAndWeightFormatPolicyAndCannotCheckAVersion) {
  OmsRelease r = copy_oms_fixture("keyless");
  VerifyOptions o = keyless_options(r.dir);
  o.policy.expect_name = "model";  // the subject name: the directory's name when signed
  o.policy.expect_weight_format = "fp16";
  EXPECT_EQ(reason(o), "Verified");
  o.policy.expect_name = "glm-4-9b";
  EXPECT_EQ(verify_release(o).error().reason(), "NameMismatch");
  o.policy.expect_name.reset();
  o.policy.expect_weight_format = "int8";
  EXPECT_EQ(verify_release(o).error().reason(), "WeightFormatMismatch");
  o.policy.expect_weight_format.reset();
  o.policy.min_version = 1;
  EXPECT_EQ(verify_release(o).error().reason(), "PolicyUnsupported");
}

TEST(VerifyOms, FollowsLinksBeneathTheRootOnlyWhenTheBundleAllowsThem) {
  auto tmp = *TempDir::create("oms-links");
  fs::path dir = tmp.path() / "model";
  write_file(dir, "blobs/abc", "weights");
  write_file(dir, "config.json", "{}");
  fs::create_symlink("blobs/abc", dir / "model.safetensors.link");
  PrivateKey key = testing::make_key(tmp.path() / "k", KeyType::kEcdsaP256);
  OmsSerialization ser;
  ser.allow_symlinks = true;
  testing::sign_oms_raw(dir, key, ser);
  VerifyOptions o;
  o.dir = dir;
  o.formats = {ReleaseFormat::kOms};
  o.trust.public_keys = {tmp.path() / "k.pub.pem"};
  EXPECT_EQ(reason(o), "Verified");
  // The target changes: the link's digest no longer matches.
  write_file(dir, "blobs/abc", "other weights");
  EXPECT_EQ(verify_release(o).error().reason(), "DigestMismatch");
  write_file(dir, "blobs/abc", "weights");
  // A link out of the tree, or to a directory, is refused even so, and never read.
  fs::create_symlink("/etc/hostname", dir / "escape");
  EXPECT_EQ(verify_release(o).error().reason(), "Symlink");
  fs::remove(dir / "escape");
  fs::create_directory_symlink("blobs", dir / "dirlink");
  EXPECT_EQ(verify_release(o).error().reason(), "Symlink");
  fs::remove(dir / "dirlink");
  // Without allow_symlinks the same link is refused.
  ser.allow_symlinks = false;
  fs::remove(dir / "model.safetensors.link");
  testing::sign_oms_raw(dir, key, ser);
  fs::create_symlink("blobs/abc", dir / "model.safetensors.link");
  EXPECT_EQ(verify_release(o).error().reason(), "Symlink");
}

TEST(VerifyOms, RefusesAStatementThatListsNothing) {
  auto tmp = *TempDir::create("oms-empty");
  fs::path dir = tmp.path() / "model";
  write_file(dir, "config.json", "{}");
  PrivateKey key = testing::make_key(tmp.path() / "k", KeyType::kEd25519);
  OmsSerialization ser;
  ser.ignore_paths = {"config.json", "model.sig"};
  testing::sign_oms_raw(dir, key, ser);
  VerifyOptions o;
  o.dir = dir;
  o.formats = {ReleaseFormat::kOms};
  o.trust.public_keys = {tmp.path() / "k.pub.pem"};
  EXPECT_EQ(verify_release(o).error().reason(), "EmptyRelease");
}

}  // namespace
}  // namespace infergate::agent
