// Keys: generation, PEM round trips, signatures that verify only for the right key and message,
// and refusal of keys we do not support.
#include "infergate/agent/signing/keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "agent_test_util.h"
#include "infergate/common/sha256.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

using testing::write_file;
namespace fs = std::filesystem;

class KeysForType : public ::testing::TestWithParam<KeyType> {};

TEST_P(KeysForType, SignAndVerifyOnlyTheSameMessageWithTheSameKey) {
  auto key = PrivateKey::generate(GetParam());
  ASSERT_TRUE(key.ok());
  auto other = PrivateKey::generate(GetParam());
  auto sig = key->sign("the statement");
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(key->public_key().verify("the statement", *sig));
  EXPECT_FALSE(key->public_key().verify("the statement!", *sig));
  EXPECT_FALSE(other->public_key().verify("the statement", *sig));
  std::string flipped = *sig;
  flipped[flipped.size() / 2] ^= 1;
  EXPECT_FALSE(key->public_key().verify("the statement", flipped));
  EXPECT_FALSE(key->public_key().verify("the statement", ""));
  EXPECT_NE(key->key_id(), other->key_id());
  EXPECT_EQ(key->key_id().size(), 64u);
}

TEST_P(KeysForType, RoundTripThroughPemFiles) {
  auto dir = *TempDir::create("keys-test");
  auto key = PrivateKey::generate(GetParam());
  ASSERT_TRUE(write_key_pair(*key, dir.path() / "k").ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "k.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = PrivateKey::load(dir.path() / "k.key");
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  EXPECT_EQ(loaded->key_id(), key->key_id());
  EXPECT_EQ(loaded->type(), GetParam());
  auto pubs = load_public_keys({dir.path() / "k.pub.pem"});
  ASSERT_TRUE(pubs.ok()) << pubs.error().to_string();
  ASSERT_EQ(pubs->size(), 1u);
  EXPECT_EQ((*pubs)[0].key_id(), key->key_id());
  EXPECT_TRUE((*pubs)[0].verify("m", *loaded->sign("m")));
}

INSTANTIATE_TEST_SUITE_P(BothTypes, KeysForType, ::testing::Values(KeyType::kEd25519, KeyType::kEcdsaP256),
                         [](const auto& param_info) {
                           return param_info.param == KeyType::kEd25519 ? "Ed25519" : "EcdsaP256";
                         });

TEST(WriteKeyPair, NeverOverwritesAKey) {
  auto dir = *TempDir::create("keys-test");
  auto key = PrivateKey::generate(KeyType::kEd25519);
  ASSERT_TRUE(write_key_pair(*key, dir.path() / "k").ok());
  auto again = write_key_pair(*PrivateKey::generate(KeyType::kEd25519), dir.path() / "k");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().reason(), "UsageError");
  EXPECT_EQ(PrivateKey::load(dir.path() / "k.key")->key_id(), key->key_id());
}

Result<std::string> openssl_genpkey(const fs::path& out, std::vector<std::string> args) {
  std::vector<std::string> argv = {"openssl", "genpkey"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("-out");
  argv.push_back(out.string());
  auto r = run_command(argv, std::chrono::seconds(30));
  if (!r.ok()) return std::move(r).error();
  if (!r->status.success()) return internal_error("openssl genpkey failed: " + r->err);
  return read_file(out);
}

TEST(PrivateKey, RefusesEncryptedKeysWithoutPrompting) {
  auto dir = *TempDir::create("keys-test");
  auto pem = openssl_genpkey(dir.path() / "enc.key",
                             {"-algorithm", "ed25519", "-aes-256-cbc", "-pass", "pass:secret"});
  ASSERT_TRUE(pem.ok()) << pem.error().to_string();
  auto k = PrivateKey::load(dir.path() / "enc.key");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().reason(), "KeyInvalid");
}

TEST(PrivateKey, RefusesRsaAndOtherCurves) {
  auto dir = *TempDir::create("keys-test");
  ASSERT_TRUE(
      openssl_genpkey(dir.path() / "rsa.key", {"-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:1024"})
          .ok());
  ASSERT_TRUE(
      openssl_genpkey(dir.path() / "k1.key", {"-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:secp256k1"})
          .ok());
  EXPECT_EQ(PrivateKey::load(dir.path() / "rsa.key").error().reason(), "KeyInvalid");
  EXPECT_EQ(PrivateKey::load(dir.path() / "k1.key").error().reason(), "KeyInvalid");
  auto pub = run_command({"openssl", "pkey", "-in", (dir.path() / "k1.key").string(), "-pubout"});
  ASSERT_TRUE(pub.ok() && pub->status.success());
  EXPECT_EQ(PublicKey::from_pem(pub->out, "k1.pub").error().reason(), "KeyInvalid");
}

TEST(PublicKey, ReadsTheCurvesOfTheModelSigningFormatAndSignsWithTheirDigest) {
  auto dir = *TempDir::create("keys-test");
  for (auto [curve, type] :
       {std::pair{"P-384", KeyType::kEcdsaP384}, std::pair{"P-521", KeyType::kEcdsaP521}}) {
    fs::path key = dir.path() / (std::string(curve) + ".key");
    ASSERT_TRUE(
        openssl_genpkey(key, {"-algorithm", "ec", "-pkeyopt", std::string("ec_paramgen_curve:") + curve})
            .ok());
    auto k = PrivateKey::load(key);
    ASSERT_TRUE(k.ok()) << k.error().to_string();
    EXPECT_EQ(k->type(), type);
    auto sig = k->sign("message");
    ASSERT_TRUE(sig.ok());
    EXPECT_TRUE(k->public_key().verify("message", *sig));
    // openssl's own verifier agrees on the digest (SHA-384 for P-384, SHA-512 for P-521).
    write_file(dir.path(), "msg", "message");
    write_file(dir.path(), "sig", *sig);
    write_file(dir.path(), "pub.pem", k->public_key().pem());
    std::string dgst = type == KeyType::kEcdsaP384 ? "-sha384" : "-sha512";
    auto v = run_command({"openssl", "dgst", dgst, "-verify", (dir.path() / "pub.pem").string(), "-signature",
                          (dir.path() / "sig").string(), (dir.path() / "msg").string()});
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v->status.success()) << v->out;
  }
}

TEST(PublicKey, HintIsTheSha256OfItsPemText) {
  auto k = *PrivateKey::generate(KeyType::kEcdsaP256);
  EXPECT_EQ(k.public_key().pem_hint(), sha256(k.public_key().pem())->hex());
  auto from_der = PublicKey::from_der(k.public_key().spki_der(), "der");
  ASSERT_TRUE(from_der.ok());
  EXPECT_EQ(from_der->key_id(), k.key_id());
  EXPECT_EQ(PublicKey::from_der(k.public_key().spki_der() + "x", "der").error().reason(), "KeyInvalid");
}

TEST(PublicKey, RefusesGarbageAPrivateKeyAndEmptyText) {
  auto key = PrivateKey::generate(KeyType::kEd25519);
  EXPECT_EQ(PublicKey::from_pem("", "x").error().reason(), "KeyInvalid");
  EXPECT_EQ(PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n", "x")
                .error()
                .reason(),
            "KeyInvalid");
  EXPECT_EQ(PublicKey::from_pem(*key->private_pem(), "x").error().reason(), "KeyInvalid");
}

TEST(LoadPublicKeys, ReadsAMountedSecretDirectory) {
  // A Secret volume: the visible names are links into a hidden, timestamped directory.
  auto dir = *TempDir::create("keys-test");
  fs::path secret = dir.path() / "secret";
  fs::create_directories(secret / "..2026_01_01");
  auto a = PrivateKey::generate(KeyType::kEd25519);
  auto b = PrivateKey::generate(KeyType::kEcdsaP256);
  write_file(secret / "..2026_01_01", "a.pem", a->public_key().pem());
  write_file(secret / "..2026_01_01", "b.pem", b->public_key().pem());
  write_file(secret / "..2026_01_01", "README", "not a key");
  fs::create_directory_symlink("..2026_01_01", secret / "..data");
  fs::create_symlink("..data/a.pem", secret / "a.pem");
  fs::create_symlink("..data/b.pem", secret / "b.pem");
  fs::create_symlink("..data/README", secret / "README");
  auto keys = load_public_keys({secret});
  ASSERT_TRUE(keys.ok()) << keys.error().to_string();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].key_id(), a->key_id());
  EXPECT_EQ((*keys)[1].key_id(), b->key_id());
}

TEST(LoadPublicKeys, RefusesNothingAnEmptyDirectoryAndAMissingFile) {
  auto dir = *TempDir::create("keys-test");
  EXPECT_EQ(load_public_keys({}).error().reason(), "UsageError");
  EXPECT_EQ(load_public_keys({dir.path()}).error().reason(), "KeyInvalid");
  EXPECT_EQ(load_public_keys({dir.path() / "absent.pem"}).error().reason(), "KeyInvalid");
  write_file(dir.path(), "bad.pem", "garbage");
  EXPECT_EQ(load_public_keys({dir.path()}).error().reason(), "KeyInvalid");
}

TEST(KeyType, ParsesItsNames) {
  EXPECT_EQ(*parse_key_type("ed25519"), KeyType::kEd25519);
  EXPECT_EQ(*parse_key_type("ecdsa-p256"), KeyType::kEcdsaP256);
  EXPECT_EQ(parse_key_type("rsa").error().reason(), "UsageError");
  EXPECT_EQ(key_type_name(KeyType::kEcdsaP256), "ecdsa-p256");
}

}  // namespace
}  // namespace infergate::agent
