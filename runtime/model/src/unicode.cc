// Unicode classes, UTF-8 decoding and NFC over the generated tables.
#include "infergate/runtime/model/unicode.h"

#include <algorithm>
#include <vector>

#include "unicode_tables.h"

namespace infergate::runtime::model::unicode {
namespace ud = unicode_data;
namespace {

bool in_ranges(char32_t cp, const ud::Range* r, size_t n) {
  const ud::Range* end = r + n;
  const ud::Range* it = std::upper_bound(r, end, static_cast<uint32_t>(cp),
                                         [](uint32_t v, const ud::Range& x) { return v < x.lo; });
  if (it == r) return false;
  --it;
  return cp <= it->hi;
}

// Hangul syllable composition constants (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

const ud::Decomposition* find_decomposition(char32_t cp) {
  const ud::Decomposition* begin = ud::kDecompositions;
  const ud::Decomposition* end = begin + ud::kDecompositionsSize;
  const ud::Decomposition* it = std::lower_bound(
      begin, end, static_cast<uint32_t>(cp), [](const ud::Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    int s = static_cast<int>(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const ud::Decomposition* d = find_decomposition(cp);
  if (!d) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second) decompose(d->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const ud::Composition* begin = ud::kCompositions;
  const ud::Composition* end = begin + ud::kCompositionsSize;
  const ud::Composition* it =
      std::lower_bound(begin, end, std::pair<uint32_t, uint32_t>(a, b),
                       [](const ud::Composition& c, std::pair<uint32_t, uint32_t> v) {
                         return c.first != v.first ? c.first < v.first : c.second < v.second;
                       });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// A code point, or an invalid byte carried through normalisation (marked with a high bit that no
// code point has).
constexpr char32_t kRawByte = 0x80000000u;

}  // namespace

std::string_view tables_version() { return ud::kUnicodeVersion; }

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(cp, ud::kLetterRanges, ud::kLetterRangesSize);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(cp, ud::kNumberRanges, ud::kNumberRangesSize);
}

bool is_whitespace(char32_t cp) {
  // The White_Space property, unchanged since Unicode 6.3.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const ud::ClassRange* begin = ud::kCombiningClasses;
  const ud::ClassRange* end = begin + ud::kCombiningClassesSize;
  const ud::ClassRange* it = std::upper_bound(begin, end, static_cast<uint32_t>(cp),
                                              [](uint32_t v, const ud::ClassRange& x) { return v < x.lo; });
  if (it == begin) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
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
  bool simple = true;
  for (size_t i = 0; i < s.size() && simple; ++i) {
    uint8_t b = static_cast<uint8_t>(s[i]);
    if (b >= 0xcc) simple = false;  // lead bytes of U+0300 and above
  }
  if (simple) return std::string(s);

  // 1. Full canonical decomposition.
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Unit u = decode(s, i);
    if (u.valid) {
      decompose(u.cp, cps);
    } else {
      cps.push_back(kRawByte | u.cp);
    }
    i += u.len;
  }
  auto ccc = [](char32_t cp) -> uint8_t { return (cp & kRawByte) ? 0 : combining_class(cp); };
  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(j),
                     [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // 3. Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in out of the last starter
  int last_ccc = -1;          // class of the last character appended after the starter
  for (char32_t cp : cps) {
    uint8_t c = ccc(cp);
    if (starter != SIZE_MAX && !(cp & kRawByte) && !(out[starter] & kRawByte)) {
      bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= c);
      if (!blocked) {
        char32_t composite = compose_pair(out[starter], cp);
        if (composite) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (c == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = c;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(s.size());
  for (char32_t cp : out) {
    if (cp & kRawByte) {
      result.push_back(static_cast<char>(cp & 0xff));
    } else {
      append_utf8(result, cp);
    }
  }
  return result;
}

}  // namespace infergate::runtime::model::unicode
