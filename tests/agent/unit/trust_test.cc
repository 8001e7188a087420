// Signature checks against the trusted keys: any trusted key may have signed; nothing else passes.
#include "infergate/agent/policy/trust.h"

#include <gtest/gtest.h>

namespace infergate::agent {
namespace {

DsseEnvelope signed_envelope(const PrivateKey& key, std::string payload = "statement",
                             std::string type = std::string(kInTotoPayloadType)) {
  DsseEnvelope env{type, payload, {}};
  env.signatures.push_back({key.key_id(), *key.sign(dsse_pae(type, payload))});
  return env;
}

TEST(VerifyEnvelope, AcceptsASignatureByAnyTrustedKey) {
  auto old_key = *PrivateKey::generate(KeyType::kEd25519);
  auto new_key = *PrivateKey::generate(KeyType::kEcdsaP256);
  std::vector<PublicKey> trusted = {old_key.public_key(), new_key.public_key()};
  auto a = verify_envelope(signed_envelope(old_key), trusted);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ((*a)->key_id(), old_key.key_id());
  auto b = verify_envelope(signed_envelope(new_key), trusted);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->key_id(), new_key.key_id());
}

TEST(VerifyEnvelope, TreatsTheKeyidAsAHintOnly) {
  auto key = *PrivateKey::generate(KeyType::kEd25519);
  auto env = signed_envelope(key);
  env.signatures[0].keyid = "";
  EXPECT_TRUE(verify_envelope(env, {key.public_key()}).ok());
  env.signatures[0].keyid = "someone-else";
  EXPECT_TRUE(verify_envelope(env, {key.public_key()}).ok());
}

TEST(VerifyEnvelope, RefusesAKeyThatIsNotTrusted) {
  auto signer = *PrivateKey::generate(KeyType::kEd25519);
  auto trusted = *PrivateKey::generate(KeyType::kEd25519);
  auto r = verify_envelope(signed_envelope(signer), {trusted.public_key()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "UntrustedKey");
  EXPECT_NE(r.error().message().find(signer.key_id()), std::string::npos);
}

TEST(VerifyEnvelope, RefusesAnAlteredPayloadOrSignature) {
  auto key = *PrivateKey::generate(KeyType::kEd25519);
  auto env = signed_envelope(key);
  env.payload = "statement, altered";
  EXPECT_EQ(verify_envelope(env, {key.public_key()}).error().reason(), "SignatureInvalid");
  env = signed_envelope(key);
  env.signatures[0].sig[0] ^= 1;
  EXPECT_EQ(verify_envelope(env, {key.public_key()}).error().reason(), "SignatureInvalid");
}

TEST(VerifyEnvelope, RefusesAnotherPayloadTypeEvenWhenSigned) {
  auto key = *PrivateKey::generate(KeyType::kEd25519);
  auto env = signed_envelope(key, "statement", "application/json");
  EXPECT_EQ(verify_envelope(env, {key.public_key()}).error().reason(), "SignatureMalformed");
}

TEST(VerifyEnvelope, RefusesASignatureOverTheBarePayload) {
  // The signature must cover the pre-authentication encoding, not the payload alone.
  auto key = *PrivateKey::generate(KeyType::kEd25519);
  DsseEnvelope env{std::string(kInTotoPayloadType), "statement", {{key.key_id(), *key.sign("statement")}}};
  EXPECT_EQ(verify_envelope(env, {key.public_key()}).error().reason(), "SignatureInvalid");
}

}  // namespace
}  // namespace infergate::agent
