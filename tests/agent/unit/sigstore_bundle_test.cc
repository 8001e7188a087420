// Sigstore bundle parsing: the fixtures' shapes read back, every malformation is SignatureMalformed,
// and what we write reads back the same.
#include "infergate/agent/signing/sigstore_bundle.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/common/encoding.h"

namespace infergate::agent {
namespace {

using testing::oms_fixture;

Json fixture_json(const std::string& name) {
  return Json::parse(*read_file(oms_fixture(name) / "model.sig"));
}

std::string refused(const Json& j) {
  auto b = parse_bundle(j.dump());
  return b.ok() ? "accepted" : b.error().reason();
}

TEST(SigstoreBundle, ReadsKeylessAndKeyBundles) {
  auto keyless = parse_bundle(*read_file(oms_fixture("keyless") / "model.sig"));
  ASSERT_TRUE(keyless.ok()) << keyless.error().to_string();
  EXPECT_EQ(keyless->minor_version, 3);
  EXPECT_EQ(keyless->material, BundleMaterial::kCertificate);
  ASSERT_EQ(keyless->tlog_entries.size(), 1u);
  const TlogEntry& e = keyless->tlog_entries[0];
  EXPECT_EQ(e.kind, "dsse");
  EXPECT_EQ(e.log_id.size(), 32u);
  ASSERT_TRUE(e.inclusion_proof.has_value());
  EXPECT_EQ(e.inclusion_proof->tree_size, 5);
  EXPECT_EQ(e.inclusion_proof->log_index, 2);
  EXPECT_FALSE(e.inclusion_proof->checkpoint.empty());
  EXPECT_TRUE(e.signed_entry_timestamp.has_value());
  auto key = parse_bundle(*read_file(oms_fixture("key-p256") / "model.sig"));
  ASSERT_TRUE(key.ok()) << key.error().to_string();
  EXPECT_EQ(key->material, BundleMaterial::kPublicKey);
  EXPECT_EQ(key->public_key_hint.size(), 64u);
  EXPECT_TRUE(key->tlog_entries.empty());
}

TEST(SigstoreBundle, RefusesMalformedBundlesWithSignatureMalformed) {
  std::vector<std::pair<std::string, std::function<void(Json&)>>> edits = {
      {"another media type", [](Json& j) { j["mediaType"] = "application/json"; }},
      {"no material", [](Json& j) { j["verificationMaterial"].erase("certificate"); }},
      {"two materials",
       [](Json& j) {
         j["verificationMaterial"]["publicKey"] = {{"hint", "x"}};
       }},
      {"a certificate that is not base64",
       [](Json& j) { j["verificationMaterial"]["certificate"]["rawBytes"] = "!!"; }},
      {"no envelope", [](Json& j) { j.erase("dsseEnvelope"); }},
      {"a message signature", [](Json& j) { j["messageSignature"] = Json::object(); }},
      {"an envelope without signatures", [](Json& j) { j["dsseEnvelope"]["signatures"] = Json::array(); }},
      {"a short root hash",
       [](Json& j) {
         j["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["rootHash"] = base64_encode("short");
       }},
      {"a negative index", [](Json& j) { j["verificationMaterial"]["tlogEntries"][0]["logIndex"] = -1; }},
      {"an index with a sign",
       [](Json& j) { j["verificationMaterial"]["tlogEntries"][0]["logIndex"] = "+1"; }},
      {"an index with a leading zero",
       [](Json& j) { j["verificationMaterial"]["tlogEntries"][0]["integratedTime"] = "012"; }},
      {"no body", [](Json& j) { j["verificationMaterial"]["tlogEntries"][0].erase("canonicalizedBody"); }},
      {"a v0.3 proof without checkpoint",
       [](Json& j) { j["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].erase("checkpoint"); }},
      {"a v0.3 entry without proof",
       [](Json& j) { j["verificationMaterial"]["tlogEntries"][0].erase("inclusionProof"); }},
      {"too many entries",
       [](Json& j) {
         auto& es = j["verificationMaterial"]["tlogEntries"];
         while (es.size() <= kMaxTlogEntries) es.push_back(es[0]);
       }},
  };
  for (const auto& [name, edit] : edits) {
    Json j = fixture_json("keyless");
    edit(j);
    EXPECT_EQ(refused(j), "SignatureMalformed") << name;
  }
  EXPECT_EQ(parse_bundle("").error().reason(), "SignatureMalformed");
  EXPECT_EQ(parse_bundle("[]").error().reason(), "SignatureMalformed");
  EXPECT_EQ(parse_bundle("{\"mediaType\":1,\"mediaType\":2}").error().reason(), "SignatureMalformed");
  EXPECT_EQ(parse_bundle(std::string(kMaxBundleBytes + 1, ' ')).error().reason(), "SignatureMalformed");
}

TEST(SigstoreBundle, ReadsAbsentIntegersAsZeroAsProto3WritesThem) {
  Json j = fixture_json("keyless");
  j["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].erase("logIndex");
  auto b = parse_bundle(j.dump());
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(b->tlog_entries[0].inclusion_proof->log_index, 0);
}

TEST(SigstoreBundle, AcceptsOlderMediaTypesAndIgnoresUnknownFields) {
  Json j = fixture_json("key-p256");
  j["mediaType"] = "application/vnd.dev.sigstore.bundle+json;version=0.1";
  j["somethingNew"] = {{"x", 1}};
  auto b = parse_bundle(j.dump());
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(b->minor_version, 1);
}

TEST(SigstoreBundle, WhatItWritesReadsBackTheSame) {
  for (const char* name : {"keyless", "key-p256"}) {
    auto b = parse_bundle(*read_file(oms_fixture(name) / "model.sig"));
    ASSERT_TRUE(b.ok());
    auto again = parse_bundle(serialize_bundle(*b));
    ASSERT_TRUE(again.ok()) << again.error().to_string();
    EXPECT_EQ(again->envelope.payload, b->envelope.payload);
    EXPECT_EQ(again->certificates, b->certificates);
    EXPECT_EQ(again->public_key_hint, b->public_key_hint);
    ASSERT_EQ(again->tlog_entries.size(), b->tlog_entries.size());
    for (size_t i = 0; i < b->tlog_entries.size(); ++i) {
      EXPECT_EQ(again->tlog_entries[i].canonicalized_body, b->tlog_entries[i].canonicalized_body);
      EXPECT_EQ(again->tlog_entries[i].inclusion_proof->hashes, b->tlog_entries[i].inclusion_proof->hashes);
    }
  }
}

}  // namespace
}  // namespace infergate::agent
