// DSSE: the pre-authentication encoding and an envelope parser that refuses every malformed shape.
#include "infergate/agent/signing/dsse.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/common/encoding.h"

namespace infergate::agent {
namespace {

using infergate::testing::refused;

std::string reason(std::string_view text) {
  auto e = parse_envelope(text);
  return e.ok() ? "ok" : e.error().reason();
}

const std::string kGood = R"({"payloadType":"application/vnd.in-toto+json","payload":"aGVsbG8gd29ybGQ=",)"
                          R"("signatures":[{"keyid":"k1","sig":"c2ln"}]})";

TEST(DssePae, MatchesTheSpecificationsExample) {
  // secure-systems-lab/dsse protocol.md: PAE("http://example.com/HelloWorld", "hello world").
  EXPECT_EQ(dsse_pae("http://example.com/HelloWorld", "hello world"),
            "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
  EXPECT_EQ(dsse_pae("", ""), "DSSEv1 0  0 ");
}

TEST(ParseEnvelope, ReadsPayloadAndSignatures) {
  auto e = parse_envelope(kGood);
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_EQ(e->payload_type, kInTotoPayloadType);
  EXPECT_EQ(e->payload, "hello world");
  ASSERT_EQ(e->signatures.size(), 1u);
  EXPECT_EQ(e->signatures[0].keyid, "k1");
  EXPECT_EQ(e->signatures[0].sig, "sig");
}

TEST(ParseEnvelope, RoundTripsThroughSerialize) {
  DsseEnvelope env{"t", std::string("pay\0load", 8), {{"a", "s1"}, {"", "s2"}}};
  auto back = parse_envelope(serialize_envelope(env));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->payload, env.payload);
  ASSERT_EQ(back->signatures.size(), 2u);
  EXPECT_EQ(back->signatures[1].sig, "s2");
  EXPECT_EQ(back->signatures[1].keyid, "");
}

TEST(ParseEnvelope, RefusesEmptyTruncatedAndNonJsonText) {
  EXPECT_EQ(reason(""), "SignatureMalformed");
  EXPECT_EQ(reason(kGood.substr(0, kGood.size() / 2)), "SignatureMalformed");
  EXPECT_EQ(reason("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"),
            "SignatureMalformed");
  EXPECT_EQ(reason("[]"), "SignatureMalformed");
  EXPECT_EQ(reason("null"), "SignatureMalformed");
  EXPECT_EQ(reason(std::string("{\0}", 3)), "SignatureMalformed");
}

TEST(ParseEnvelope, RefusesBadBase64) {
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"not base64!","signatures":[{"sig":"c2ln"}]})"),
            "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"aGVsbG8","signatures":[{"sig":"c2ln"}]})"),
            "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":[{"sig":"%%%%"}]})"),
            "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":[{"sig":""}]})"), "SignatureMalformed");
}

TEST(ParseEnvelope, RefusesMissingOrMistypedFields) {
  EXPECT_EQ(reason(R"({"payload":"","signatures":[{"sig":"c2ln"}]})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":1,"payload":"","signatures":[{"sig":"c2ln"}]})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","signatures":[{"sig":"c2ln"}]})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":""})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":[]})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":{}})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":["c2ln"]})"), "SignatureMalformed");
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","signatures":[{"sig":"c2ln","keyid":7}]})"),
            "SignatureMalformed");
}

TEST(ParseEnvelope, RefusesDuplicateKeysTooManySignaturesAndDeepNesting) {
  EXPECT_EQ(reason(R"({"payloadType":"t","payload":"","payload":"aGk=","signatures":[{"sig":"c2ln"}]})"),
            "SignatureMalformed");
  std::string many = R"({"payloadType":"t","payload":"","signatures":[)";
  for (size_t i = 0; i <= kMaxEnvelopeSignatures; ++i)
    many += std::string(i ? "," : "") + R"({"sig":"c2ln"})";
  EXPECT_EQ(reason(many + "]}"), "SignatureMalformed");
  std::string deep = R"({"payloadType":"t","payload":"","signatures":[{"sig":"c2ln"}],"x":)" +
                     std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_EQ(reason(deep), "SignatureMalformed");
}

TEST(ParseEnvelope, RefusesTextsOverTheCapBeforeParsing) {
  EXPECT_EQ(reason(std::string(kMaxEnvelopeBytes + 1, ' ')), "SignatureMalformed");
}

TEST(ParseJsonUniqueKeys, AllowsTheSameKeyInDifferentObjects) {
  EXPECT_TRUE(parse_json_unique_keys(R"({"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}]})", "x").ok());
  EXPECT_TRUE(
      refused(parse_json_unique_keys(R"({"a":{"k":1,"k":2}})", "x"), "", {"x: the key \"k\" appears twice"}));
}

}  // namespace
}  // namespace infergate::agent
