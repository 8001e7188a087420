// The pre-tokenizer splits, written out from their regexes (leftmost-first alternation, greedy with
// backtracking), over the Unicode classes in unicode.h. Invalid UTF-8 bytes count as "other" (neither
// letter, number nor whitespace), one unit per byte.
#include <vector>

#include "infergate/runtime/model/tokenizer.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {
namespace {

enum Class : uint8_t { kLetter, kNumber, kSpace, kOther };

struct U {
  char32_t cp;
  uint32_t offset;
  Class cls;
  bool newline;  // \r or \n
};

std::vector<U> units_of(std::string_view text) {
  std::vector<U> units;
  units.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unicode::Unit u = unicode::decode(text, i);
    Class c = kOther;
    if (u.valid) {
      if (unicode::is_letter(u.cp)) {
        c = kLetter;
      } else if (unicode::is_number(u.cp)) {
        c = kNumber;
      } else if (unicode::is_whitespace(u.cp)) {
        c = kSpace;
      }
    }
    units.push_back({u.valid ? u.cp : 0xFFFFFFFFu, static_cast<uint32_t>(i), c,
                     u.valid && (u.cp == '\r' || u.cp == '\n')});
    i += u.len;
  }
  return units;
}

// 's 't 're 've 'm 'll 'd at i; returns the length in units (0: no match).
size_t contraction(const std::vector<U>& u, size_t i, bool ignore_case) {
  size_t n = u.size();
  if (u[i].cp != '\'' || i + 1 >= n) return 0;
  auto is = [&](size_t k, char lower) {
    if (k >= n) return false;
    char32_t c = u[k].cp;
    if (c == static_cast<char32_t>(lower)) return true;
    if (!ignore_case) return false;
    if (c == static_cast<char32_t>(lower - 'a' + 'A')) return true;
    return lower == 's' && c == 0x17F;  // LATIN SMALL LETTER LONG S case-folds to s
  };
  if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return 2;
  if ((is(i + 1, 'r') && is(i + 2, 'e')) || (is(i + 1, 'v') && is(i + 2, 'e')) ||
      (is(i + 1, 'l') && is(i + 2, 'l'))) {
    return 3;
  }
  return 0;
}

size_t run_of(const std::vector<U>& u, size_t i, Class c) {
  while (i < u.size() && u[i].cls == c) ++i;
  return i;
}

// \s+(?!\S) then \s+: the whitespace run, leaving its last unit to the next piece when a
// non-space follows and the run is longer than one.
size_t whitespace_tail(const std::vector<U>& u, size_t i) {
  size_t j = run_of(u, i, kSpace);
  if (j == u.size()) return j;
  if (j - 1 > i) return j - 1;
  return j;
}

size_t next_gpt2(const std::vector<U>& u, size_t i) {
  const size_t n = u.size();
  if (size_t c = contraction(u, i, false)) return i + c;
  bool space = u[i].cp == ' ' && i + 1 < n;
  for (Class c : {kLetter, kNumber, kOther}) {
    if (space && u[i + 1].cls == c) return run_of(u, i + 1, c);
    if (u[i].cls == c) return run_of(u, i, c);
  }
  return whitespace_tail(u, i);
}

size_t next_llama3(const std::vector<U>& u, size_t i, size_t max_digits) {
  const size_t n = u.size();
  if (size_t c = contraction(u, i, true)) return i + c;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!u[i].newline && u[i].cls != kLetter && u[i].cls != kNumber && i + 1 < n && u[i + 1].cls == kLetter) {
    return run_of(u, i + 1, kLetter);
  }
  if (u[i].cls == kLetter) return run_of(u, i, kLetter);
  // \p{N}{1,max}
  if (u[i].cls == kNumber) {
    size_t j = i;
    while (j < n && u[j].cls == kNumber && j - i < max_digits) ++j;
    return j;
  }
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  size_t start = SIZE_MAX;
  if (u[i].cp == ' ' && i + 1 < n && u[i + 1].cls == kOther) {
    start = i + 1;
  } else if (u[i].cls == kOther) {
    start = i;
  }
  if (start != SIZE_MAX) {
    size_t j = run_of(u, start, kOther);
    while (j < n && u[j].newline) ++j;
    return j;
  }
  // \s*[\r\n]+ : up to and including the last newline of the whitespace run.
  size_t j = run_of(u, i, kSpace);
  for (size_t k = j; k > i; --k) {
    if (u[k - 1].newline) return k;
  }
  return whitespace_tail(u, i);
}

}  // namespace

std::string_view split_pattern_regex(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitPattern::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitPattern::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

std::vector<std::string_view> pre_tokenize(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> out;
  if (text.empty()) return out;
  std::vector<U> u = units_of(text);
  size_t i = 0;
  while (i < u.size()) {
    size_t j = pattern == SplitPattern::kGpt2     ? next_gpt2(u, i)
               : pattern == SplitPattern::kLlama3 ? next_llama3(u, i, 3)
                                                  : next_llama3(u, i, 1);
    size_t begin = u[i].offset;
    size_t end = j < u.size() ? u[j].offset : text.size();
    out.push_back(text.substr(begin, end - begin));
    i = j;
  }
  return out;
}

const std::array<char32_t, 256>& byte_level_alphabet() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::append_utf8(out, alphabet[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace infergate::runtime::model
