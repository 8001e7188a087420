// Hex and base64 codecs, including the strictness of the decoders.
#include "infergate/common/encoding.h"

#include <gtest/gtest.h>

namespace infergate {
namespace {

TEST(Hex, RoundTrips) {
  std::string bytes("\x00\x01\xab\xff", 4);
  EXPECT_EQ(hex_encode(bytes), "0001abff");
  EXPECT_EQ(*hex_decode("0001ABff"), bytes);
}

TEST(Hex, RefusesOddLengthAndNonHex) {
  EXPECT_FALSE(hex_decode("abc").ok());
  EXPECT_FALSE(hex_decode("zz").ok());
  EXPECT_FALSE(hex_decode(std::string("a\0", 2)).ok());
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
  EXPECT_FALSE(base64_decode("Zg=").ok());       // length
  EXPECT_FALSE(base64_decode("Zm9v!A==").ok());  // alphabet
  EXPECT_FALSE(base64_decode("Zh==").ok());      // non-canonical padding bits
  EXPECT_FALSE(base64_decode("Z===").ok());
  EXPECT_FALSE(base64_decode("Zm9v\nYmFy").ok());
}

}  // namespace
}  // namespace infergate
