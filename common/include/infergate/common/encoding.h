// Hex and base64 (RFC 4648, standard alphabet, padded), and UTF-8 validation. Decoders are strict: any
// character outside the alphabet, bad padding or a wrong length is an error, never silently skipped.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate {

std::string hex_encode(std::span<const uint8_t> bytes);
inline std::string hex_encode(std::string_view bytes) {
  return hex_encode(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}
// Accepts upper or lower case; the length must be even.
Result<std::string> hex_decode(std::string_view text);
bool is_lower_hex(std::string_view text);

std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

// Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view text);

}  // namespace infergate
