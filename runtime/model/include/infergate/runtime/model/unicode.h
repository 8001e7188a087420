// The Unicode the tokenizer needs, without a regex engine: UTF-8 decoding that tolerates invalid
// bytes, the Letter / Number / White_Space classes behind \p{L}, \p{N} and \s, and NFC. The classes
// and NFC come from utf8proc's Unicode database (Debian's libutf8proc); thread-safe, no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace infergate::runtime::model::unicode {

// The Unicode version of utf8proc's database ("15.0.0" with Debian 12's utf8proc 2.8).
std::string_view unicode_version();

bool is_letter(char32_t cp);      // general category L* (\p{L})
bool is_number(char32_t cp);      // general category N* (\p{N})
bool is_whitespace(char32_t cp);  // the White_Space property (\s in Unicode-aware regexes)
uint8_t combining_class(char32_t cp);

// One decoded unit of a byte string. An invalid or truncated sequence yields one unit per byte
// with valid == false, so every byte of the input belongs to exactly one unit.
struct Unit {
  char32_t cp;  // the code point, or the raw byte value when !valid
  uint8_t len;  // bytes consumed (1..4)
  bool valid;
};
// Decodes the unit starting at s[i] (i < s.size()). Strict: overlong forms, surrogates and code
// points above U+10FFFF are invalid.
Unit decode(std::string_view s, size_t i);
bool is_valid_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t cp);

// `s` as valid UTF-8 text: every maximal ill-formed subpart (Unicode's "substitution of maximal
// subparts", what Python's bytes.decode("utf-8", errors="replace") and browsers do) becomes one U+FFFD.
// A token holding part of a character ("\xe2\x82") therefore reads as one U+FFFD, as OpenAI-compatible
// servers report such a token's text. Valid input is returned unchanged.
std::string replace_invalid_utf8(std::string_view s);

// Normalisation Form C. Invalid bytes are passed through unchanged and act as starters.
std::string nfc(std::string_view s);

}  // namespace infergate::runtime::model::unicode
