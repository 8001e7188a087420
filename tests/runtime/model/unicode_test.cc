// Unicode classes, UTF-8 decoding and NFC, checked against Python's unicodedata where it matters.
#include "infergate/runtime/model/unicode.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "infergate/common/encoding.h"
#include "testing.h"

namespace infergate::runtime::model::unicode {
namespace {

TEST(Unicode, ClassifiesLettersNumbersAndWhitespace) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(U'Z'));
  EXPECT_TRUE(is_letter(U'é'));
  EXPECT_TRUE(is_letter(U'中'));
  EXPECT_TRUE(is_letter(U'ж'));
  EXPECT_TRUE(is_letter(U'ſ'));
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_FALSE(is_letter(U'_'));
  EXPECT_FALSE(is_letter(0x301));  // combining acute: a mark, not a letter
  EXPECT_TRUE(is_number(U'7'));
  EXPECT_TRUE(is_number(U'٣'));  // Arabic-Indic three
  EXPECT_TRUE(is_number(U'½'));
  EXPECT_TRUE(is_number(U'Ⅻ'));  // letter-like number (Nl)
  EXPECT_FALSE(is_number(U'a'));
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', char32_t{0x85}, char32_t{0xa0},
                     char32_t{0x3000}, char32_t{0x2009}}) {
    EXPECT_TRUE(is_whitespace(c)) << static_cast<uint32_t>(c);
  }
  EXPECT_FALSE(is_whitespace(0x200b));  // zero width space is not White_Space
  EXPECT_FALSE(is_whitespace(0x1c));
}

TEST(Unicode, DecodesValidUtf8AndMarksEachInvalidByte) {
  std::string s = "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) {
    Unit u = decode(s, i);
    ASSERT_TRUE(u.valid);
    cps.push_back(u.cp);
    i += u.len;
  }
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', U'é', U'中', U'😀'}));
  for (std::string bad : {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                          std::string("\xf4\x90\x80\x80"), std::string("\xe4\xb8"), std::string("\x80")}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << hex_encode(bad);
    Unit u = decode(bad, 0);
    EXPECT_FALSE(u.valid);
    EXPECT_EQ(u.len, 1);
  }
}

TEST(Unicode, NfcComposesDecomposedText) {
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");                     // e + combining acute -> é
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1"), "\xea\xb0\x80");  // Hangul L + V -> 가
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");                  // Angstrom sign -> Å (singleton)
  // Canonical ordering: dot below (220) sorts before acute (230); then composition.
  EXPECT_EQ(nfc("a\xcc\x81\xcc\xa3"), nfc("a\xcc\xa3\xcc\x81"));
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("x\xff\xcc\x81y"), "x\xff\xcc\x81y") << "invalid bytes pass through and block composition";
}

TEST(Unicode, NfcAgreesWithPythonOnRandomText) {
  // Random strings drawn from alphabets that exercise decomposition, reordering and composition.
  std::mt19937 rng(12345);
  std::vector<char32_t> pool = {U'a',      U'e',      U'o',      U'A',      U'\u0301', U'\u0300',
                                U'\u0323', U'\u0308', U'\u0327', U'\u00e9', U'\u1e9b', U'\u212b',
                                U'\u1100', U'\u1161', U'\u11a8', U'\uac00', U'\u0958', U'\u0915',
                                U'\u093c', U'\u00c5', U'\u0344', U'中',     U' '};
  std::string input_lines;
  std::vector<std::string> inputs;
  for (int n = 0; n < 300; ++n) {
    std::string s;
    int len = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < len; ++k) append_utf8(s, pool[rng() % pool.size()]);
    inputs.push_back(s);
    input_lines += hex_encode(s) + "\n";
  }
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "in.txt", input_lines);
  std::string script =
      "import sys, unicodedata\n"
      "for line in open(sys.argv[1]):\n"
      "    s = bytes.fromhex(line.strip()).decode('utf-8')\n"
      "    print(unicodedata.normalize('NFC', s).encode('utf-8').hex())\n";
  testing::write_bytes(dir.path() / "nfc.py", script);
  auto r = testing::run_python({(dir.path() / "nfc.py").string(), (dir.path() / "in.txt").string()});
  ASSERT_TRUE(r.status.success()) << r.err;
  std::istringstream expected(r.out);
  for (const auto& s : inputs) {
    std::string line;
    ASSERT_TRUE(std::getline(expected, line));
    EXPECT_EQ(hex_encode(nfc(s)), line) << "input " << hex_encode(s) << " (seed 12345)";
  }
}

// Expected values are what Python's bytes.decode("utf-8", errors="replace") gives (maximal subparts).
TEST(Unicode, ReplaceInvalidUtf8SubstitutesEachMaximalIllFormedSubpartOnce) {
  const std::string r = "\xEF\xBF\xBD";
  const std::pair<std::string, std::string> cases[] = {
      {"abc", "abc"},
      {"\xE2\x82\xAC", "\xE2\x82\xAC"},                    // a whole character is kept
      {"\xE2\x82", r},                                     // a cut 3-byte character: one U+FFFD
      {"a\xE2\x41", "a" + r + "A"},                        // a lead byte without its continuation
      {"\xF0\x9F\x98", r},                                 // a cut 4-byte character
      {"\xC0\xAF", r + r},                                 // overlong lead: each byte alone
      {"\xED\xA0\x80", r + r + r},                         // a surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},                 // above U+10FFFF
      {"\xFF\xFE", r + r},                                 // never valid
      {"\x80\x80", r + r},                                 // stray continuation bytes
      {"\xE0\x80\xAF", r + r + r},                         // overlong 3-byte form
      {"\xF0\x9F\x98\x80x\xC3", "\xF0\x9F\x98\x80x" + r},  // valid, then a cut 2-byte character
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(hex_encode(replace_invalid_utf8(in)), hex_encode(want)) << "input " << hex_encode(in);
    EXPECT_TRUE(is_valid_utf8(replace_invalid_utf8(in)));
  }
}

// The classes behind \p{L}, \p{N} and \s over the whole code space, against the tokenizer tests'
// oracle (Python's regex module): the database is utf8proc's, and the two must be the same Unicode
// version (Debian 12: utf8proc 2.8 and python3-regex 2022.10.31, both Unicode 15.0).
TEST(Unicode, ClassesAgreeWithPythonRegexOnEveryCodePoint) {
  std::string ours;
  ours.reserve(0x110000);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    ours.push_back(static_cast<char>('0' + is_letter(cp) + 2 * is_number(cp) + 4 * is_whitespace(cp)));
  }
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "ours.txt", ours);
  std::string script =
      "import sys, regex\n"
      "L, N, S = regex.compile(r'\\p{L}'), regex.compile(r'\\p{N}'), regex.compile(r'\\s')\n"
      "ours = open(sys.argv[1]).read()\n"
      "bad = []\n"
      "for cp in range(0x110000):\n"
      "    if 0xD800 <= cp <= 0xDFFF: continue\n"
      "    c = chr(cp)\n"
      "    v = (1 if L.match(c) else 0) + (2 if N.match(c) else 0) + (4 if S.match(c) else 0)\n"
      "    if str(v) != ours[cp]: bad.append('U+%04X python %d ours %s' % (cp, v, ours[cp]))\n"
      "print(len(bad))\n"
      "print('; '.join(bad[:10]))\n";
  testing::write_bytes(dir.path() / "classes.py", script);
  auto r = testing::run_python({(dir.path() / "classes.py").string(), (dir.path() / "ours.txt").string()});
  ASSERT_TRUE(r.status.success()) << r.err;
  std::istringstream out(r.out);
  std::string count, first;
  std::getline(out, count);
  std::getline(out, first);
  EXPECT_EQ(count, "0")
      << "code points classified differently (1 letter, 2 number, 4 space), utf8proc's Unicode "
      << unicode_version() << ": " << first;
}

TEST(Unicode, NfcNormalisesEachValidRunAroundInvalidBytesAndKeepsNulBytes) {
  EXPECT_EQ(hex_encode(nfc(std::string("a\0e\xcc\x81", 5))), hex_encode(std::string("a\0\xc3\xa9", 4)));
  EXPECT_EQ(nfc("e\xcc\x81\xff"
                "e\xcc\x81\xe2\x84\xab"),
            "\xc3\xa9\xff\xc3\xa9\xc3\x85");
  EXPECT_EQ(nfc("\xcc\x81\xff\xcc\x81"), "\xcc\x81\xff\xcc\x81");  // marks with no starter stay as they are
  EXPECT_EQ(nfc("\xe1\x84\x80\xff\xe1\x85\xa1"),
            "\xe1\x84\x80\xff\xe1\x85\xa1");  // no Hangul L+V across a byte
}

TEST(Unicode, CharactersOfUnicode15AreClassified) {
  // Added in Unicode 15.0 (Kawi, Nag Mundari): the hand-written Unicode 14 tables this replaced
  // called them "other".
  EXPECT_TRUE(is_letter(0x11F04)) << "KAWI LETTER A, Unicode " << unicode_version();
  EXPECT_TRUE(is_number(0x11F50)) << "KAWI DIGIT ZERO";
  EXPECT_TRUE(is_letter(0x1E4D0)) << "NAG MUNDARI LETTER O";
}

}  // namespace
}  // namespace infergate::runtime::model::unicode
