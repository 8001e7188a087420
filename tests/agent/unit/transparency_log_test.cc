// Rekor checks offline: the RFC 6962 inclusion proof against a Merkle tree built here from the RFC's
// definition, checkpoints signed with a test key, and the SET's canonical bytes.
#include "infergate/agent/policy/transparency_log.h"

#include <gtest/gtest.h>

#include "infergate/common/encoding.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {
namespace {

std::string h(std::string_view s) {
  auto d = *sha256(s);
  return std::string(reinterpret_cast<const char*>(d.bytes.data()), 32);
}

// MTH and PATH of RFC 6962 section 2.1, written from the definitions (k: largest power of 2 < n).
std::string mth(const std::vector<std::string>& leaves, size_t lo, size_t n) {
  if (n == 1) return leaves[lo];
  size_t k = 1;
  while (k * 2 < n) k *= 2;
  return h("\x01" + mth(leaves, lo, k) + mth(leaves, lo + k, n - k));
}

std::vector<std::string> path(size_t m, const std::vector<std::string>& leaves, size_t lo, size_t n) {
  if (n == 1) return {};
  size_t k = 1;
  while (k * 2 < n) k *= 2;
  std::vector<std::string> out;
  if (m < k) {
    out = path(m, leaves, lo, k);
    out.push_back(mth(leaves, lo + k, n - k));
  } else {
    out = path(m - k, leaves, lo + k, n - k);
    out.push_back(mth(leaves, lo, k));
  }
  return out;
}

TEST(TransparencyLog, InclusionProofsReachTheRootForEveryLeafOfTreesUpTo17) {
  for (size_t n = 1; n <= 17; ++n) {
    std::vector<std::string> leaves;
    for (size_t i = 0; i < n; ++i) leaves.push_back(rfc6962_leaf_hash("entry " + std::to_string(i)));
    std::string root = mth(leaves, 0, n);
    for (size_t m = 0; m < n; ++m) {
      auto got = root_from_inclusion_proof(leaves[m], static_cast<int64_t>(m), static_cast<int64_t>(n),
                                           path(m, leaves, 0, n));
      ASSERT_TRUE(got.ok()) << n << " " << m << ": " << got.error().to_string();
      EXPECT_EQ(*got, root) << "tree " << n << " leaf " << m;
      if (n > 1) {
        // The same proof for a neighbouring index does not reach the root.
        size_t other = (m + 1) % n;
        auto wrong = root_from_inclusion_proof(leaves[m], static_cast<int64_t>(other),
                                               static_cast<int64_t>(n), path(m, leaves, 0, n));
        EXPECT_TRUE(!wrong.ok() || *wrong != root) << n << " " << m;
      }
    }
  }
}

TEST(TransparencyLog, RefusesProofsWhoseShapeDoesNotFitTheTree) {
  std::string leaf = rfc6962_leaf_hash("x");
  EXPECT_EQ(root_from_inclusion_proof(leaf, 3, 3, {}).error().reason(), "TransparencyLogInvalid");
  EXPECT_EQ(root_from_inclusion_proof(leaf, 0, 0, {}).error().reason(), "TransparencyLogInvalid");
  EXPECT_EQ(root_from_inclusion_proof(leaf, 0, 4, {leaf}).error().reason(), "TransparencyLogInvalid");
  EXPECT_EQ(root_from_inclusion_proof(leaf, 0, 1, {leaf}).error().reason(), "TransparencyLogInvalid");
}

struct Log {
  PrivateKey key = *PrivateKey::generate(KeyType::kEcdsaP256);
  TransparencyLog log() const {
    auto d = *sha256(key.public_key().spki_der());
    return {std::string(reinterpret_cast<const char*>(d.bytes.data()), 32), key.public_key(), std::nullopt,
            std::nullopt, "https://rekor.test"};
  }
  std::string checkpoint(int64_t size, const std::string& root, std::string hint = "") const {
    std::string note = "rekor.test - 42\n" + std::to_string(size) + "\n" + base64_encode(root) + "\n";
    if (hint.empty()) hint = log().log_id.substr(0, 4);
    return note + "\n\xE2\x80\x94 rekor.test " + base64_encode(hint + *key.sign(note)) + "\n";
  }
};

TEST(TransparencyLog, VerifiesACheckpointOfTheLogForTheProofsTree) {
  Log l;
  std::string root = h("root");
  EXPECT_TRUE(verify_checkpoint(l.checkpoint(9, root), l.log(), 9, root).ok());
  EXPECT_EQ(verify_checkpoint(l.checkpoint(9, root), l.log(), 10, root).error().reason(),
            "TransparencyLogInvalid");
  EXPECT_EQ(verify_checkpoint(l.checkpoint(9, root), l.log(), 9, h("other")).error().reason(),
            "TransparencyLogInvalid");
  EXPECT_EQ(verify_checkpoint(l.checkpoint(9, root, "abcd"), l.log(), 9, root).error().reason(),
            "TransparencyLogInvalid");
  Log other;
  EXPECT_EQ(verify_checkpoint(other.checkpoint(9, root, l.log().log_id.substr(0, 4)), l.log(), 9, root)
                .error()
                .reason(),
            "TransparencyLogInvalid");
  EXPECT_EQ(verify_checkpoint("no blank line", l.log(), 9, root).error().reason(), "TransparencyLogInvalid");
}

TEST(TransparencyLog, SignsTheSetOverTheCanonicalEntryWithKeysInCodePointOrder) {
  TlogEntry e;
  e.canonicalized_body = "{}";
  e.integrated_time = 1700000000;
  e.log_index = 42;
  e.log_id = std::string("\x01\xab", 2);
  EXPECT_EQ(set_payload(e),
            "{\"body\":\"e30=\",\"integratedTime\":1700000000,\"logID\":\"01ab\",\"logIndex\":42}");
}

}  // namespace
}  // namespace infergate::agent
