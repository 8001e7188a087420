// Unicode classes and NFC from utf8proc's database (Debian's libutf8proc), and the UTF-8 decoding
// the tokenizer needs around them (invalid bytes are carried through, one unit per byte).
#include "infergate/runtime/model/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <new>

namespace infergate::runtime::model::unicode {
namespace {

utf8proc_category_t category(char32_t cp) {
  // utf8proc answers "unassigned" (Cn) for anything outside the code space.
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

// NFC of `run` (valid UTF-8, checked by the caller) appended to `out`.
void append_nfc(std::string& out, std::string_view run) {
  utf8proc_uint8_t* composed = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                          static_cast<utf8proc_ssize_t>(run.size()), &composed,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // The run is valid UTF-8 (decode() and utf8proc agree on what is), so only memory can fail here.
    std::free(composed);
    throw std::bad_alloc();
  }
  out.append(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
  std::free(composed);
}

// Whether `s` holds a byte >= 0xCC: a lead byte of U+0300 and above, where NFC can change anything.
// 64 bytes at a time without an early exit inside a block, so that the compiler vectorises the scan.
bool has_byte_from_0xcc(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint8_t any = 0;
    for (size_t k = 0; k < 64; ++k) any |= static_cast<uint8_t>(p[i + k] >= 0xcc);
    if (any) return true;
  }
  for (; i < n; ++i) {
    if (p[i] >= 0xcc) return true;
  }
  return false;
}

}  // namespace

std::string_view unicode_version() { return utf8proc_unicode_version(); }

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return true;
    default: return false;
  }
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

bool is_whitespace(char32_t cp) {
  // The White_Space property: the space separators (Zs), the line and paragraph separators (Zl, Zp),
  // and the controls U+0009..U+000D and U+0085 (not U+001C..U+001F, which Python's str.isspace() adds).
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return true;
  if (cp < 0x80) return cp == 0x20;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return true;
    default: return false;
  }
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  return static_cast<uint8_t>(utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class);
}

Unit decode(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true};
  size_t need;
  char32_t cp;
  char32_t min;
  if ((b0 & 0xe0) == 0xc0) {
    need = 1, cp = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    need = 2, cp = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    need = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {b0, 1, false};
  }
  if (i + need >= s.size()) return {b0, 1, false};
  for (size_t k = 1; k <= need; ++k) {
    uint8_t b = byte(i + k);
    if ((b & 0xc0) != 0x80) return {b0, 1, false};
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {b0, 1, false};
  return {cp, static_cast<uint8_t>(need + 1), true};
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Unit u = decode(s, i);
    if (!u.valid) return false;
    i += u.len;
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  for (size_t i = 0; i < s.size();) {
    const uint8_t b0 = byte(i);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must fall in (Unicode Table 3-7).
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    size_t len = 1;  // bytes of a well-formed prefix
    while (need > 0 && len < need && i + len < s.size()) {
      const uint8_t b = byte(i + len);
      const uint8_t l = len == 1 ? lo : 0x80, h = len == 1 ? hi : 0xBF;
      if (b < l || b > h) break;
      ++len;
    }
    if (need > 0 && len == need) {
      out.append(s.substr(i, len));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal subpart (at least the lead byte)
    }
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::string nfc(std::string_view s) {
  // Fast path: text below U+0300 is already in NFC (nothing there decomposes or combines).
  if (!has_byte_from_0xcc(s)) return std::string(s);

  // utf8proc normalises valid UTF-8 only. An invalid byte is a starter that composes with nothing
  // and that no mark reorders across, so NFC of the whole is NFC of each valid run between them,
  // with the invalid bytes kept in place.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    while (i < s.size()) {
      const Unit u = decode(s, i);
      if (!u.valid) break;
      i += u.len;
    }
    if (i > start) append_nfc(out, s.substr(start, i - start));
    while (i < s.size() && !decode(s, i).valid) out.push_back(s[i++]);
  }
  return out;
}

}  // namespace infergate::runtime::model::unicode
