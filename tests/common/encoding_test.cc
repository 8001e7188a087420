// Hex and base64 codecs, including the strictness of the decoders.
#include "infergate/common/encoding.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

namespace infergate {
namespace {

using infergate::testing::refused;

TEST(Hex, RoundTrips) {
  std::string bytes("\x00\x01\xab\xff", 4);
  EXPECT_EQ(hex_encode(bytes), "0001abff");
  EXPECT_EQ(*hex_decode("0001ABff"), bytes);
}

TEST(Hex, RefusesOddLengthAndNonHex) {
  EXPECT_TRUE(refused(hex_decode("abc"), "", {"odd number of digits"}));
  EXPECT_TRUE(refused(hex_decode("zz"), "", {"non-hex character at position 0"}));
  EXPECT_TRUE(refused(hex_decode(std::string("a\0", 2)), "", {"non-hex character at position 1"}));
  EXPECT_TRUE(is_lower_hex("09af"));
  EXPECT_FALSE(is_lower_hex("09AF"));
}

TEST(Base64, MatchesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (auto [plain, enc] : vectors) {
    EXPECT_EQ(base64_encode(plain), enc);
    EXPECT_EQ(*base64_decode(enc), plain);
  }
}

TEST(Base64, RefusesMalformedInput) {
  EXPECT_TRUE(refused(base64_decode("Zg="), "", {"not a multiple of 4"}));
  EXPECT_TRUE(refused(base64_decode("Zm9v!A=="), "", {"invalid character at position 4"}));
  EXPECT_TRUE(refused(base64_decode("Zh=="), "", {"non-canonical padding"}));
  EXPECT_TRUE(refused(base64_decode("Z==="), "", {"base64"}));
  EXPECT_TRUE(refused(base64_decode("Zm9v\nYmFy"), "", {"base64"}));
}

TEST(Utf8, AcceptsWellFormedTextAndRefusesInvalidOverlongSurrogateAndTruncatedSequences) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("a\x80"));             // a continuation byte alone
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));          // truncated at the end
}

}  // namespace
}  // namespace infergate
