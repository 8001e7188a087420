// SHA-256: known answers (FIPS 180-4 examples), incremental splits, hex round trips.
#include "infergate/common/sha256.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <random>
#include <thread>
#include <vector>

namespace infergate {
namespace {

using infergate::testing::refused;

TEST(Sha256, MatchesTheFipsExamples) {
  EXPECT_EQ(sha256("")->hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc")->hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")->hex(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, GivesTheSameDigestForAnySplitOfTheInput) {
  std::mt19937 rng(42);
  std::string data(100'000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  auto whole = sha256(data);
  ASSERT_TRUE(whole.ok());
  Sha256 h;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t n = std::min<size_t>(rng() % 7000, data.size() - pos);
    h.update(data.data() + pos, n);
    pos += n;
  }
  EXPECT_EQ(h.size(), data.size());
  EXPECT_EQ(*h.finish(), *whole) << "seed 42";
}

TEST(Sha256, IsReusableAfterFinish) {
  Sha256 h;
  h.update("abc");
  auto first = h.finish();
  EXPECT_EQ(h.size(), 0u);
  h.update("abc");
  EXPECT_EQ(*h.finish(), *first);
}

TEST(Sha256, SurvivesBeingMoved) {
  Sha256 a;
  a.update("ab");
  Sha256 b = std::move(a);
  b.update("c");
  EXPECT_EQ(b.finish()->hex(), sha256("abc")->hex());
}

TEST(Sha256, HashesConcurrentlyFromSeveralThreads) {
  std::vector<std::thread> threads;
  std::vector<std::string> out(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&out, t] {
      Sha256 h;
      for (int i = 0; i < 1000; ++i) h.update("abc");
      out[t] = h.finish()->hex();
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(out[t], out[0]);
}

TEST(Sha256Digest, RoundTripsThroughHexInEitherCase) {
  auto d = sha256("abc");
  auto lower = Sha256Digest::from_hex(d->hex());
  ASSERT_TRUE(lower.ok());
  EXPECT_EQ(*lower, *d);
  std::string upper = d->hex();
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(*Sha256Digest::from_hex(upper), *d);
}

TEST(Sha256Digest, RefusesWrongLengthsAndNonHex) {
  std::string hex = sha256("abc")->hex();
  EXPECT_TRUE(refused(Sha256Digest::from_hex(hex.substr(0, 63)), "", {"64 hex digits, got 63"}));
  EXPECT_TRUE(refused(Sha256Digest::from_hex(hex + "0"), "", {"64 hex digits, got 65"}));
  std::string bad = hex;
  bad[10] = 'g';
  EXPECT_TRUE(
      refused(Sha256Digest::from_hex(bad), "", {"SHA-256 digest", "non-hex character at position 10"}));
  bad[10] = '\0';
  EXPECT_TRUE(refused(Sha256Digest::from_hex(bad), "", {"non-hex character at position 10"}));
}

}  // namespace
}  // namespace infergate
