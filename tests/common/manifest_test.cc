// SHA256SUMS: strict parsing of every form coreutils writes, refusal of everything else, and a writer
// that reproduces sha256sum's output byte for byte (checked against the real sha256sum).
#include "infergate/common/manifest.h"

#include <gtest/gtest.h>

#include <fstream>

#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"

namespace infergate {
namespace {

namespace fs = std::filesystem;

const std::string kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
const std::string kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string reason_of(std::string_view text) {
  auto m = Manifest::parse(text);
  return m.ok() ? "ok" : m.error().reason();
}

TEST(ManifestParse, AcceptsTextAndBinaryMarkers) {
  auto m = Manifest::parse(kAbc + "  ./a.txt\n" + kEmpty + " *b/c.bin\n");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ(m->entries()[0].path, "a.txt");
  EXPECT_EQ(m->entries()[0].digest.hex(), kAbc);
  EXPECT_EQ(m->entries()[1].path, "b/c.bin");
  EXPECT_EQ(m->find("b/c.bin")->digest.hex(), kEmpty);
  EXPECT_EQ(m->find("./b/c.bin"), nullptr);
  EXPECT_EQ(m->find("missing"), nullptr);
}

TEST(ManifestParse, AcceptsTheTaggedForm) {
  auto m = Manifest::parse("SHA256 (./dir/we) = ird) = " + kAbc + "\n");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->entries()[0].path, "dir/we) = ird");
}

TEST(ManifestParse, UnescapesBackslashNewlineAndCarriageReturn) {
  auto m = Manifest::parse("\\" + kAbc + "  ./a\\nb\\\\c\\rd\n\\SHA256 (x\\\\y) = " + kEmpty + "\n");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_NE(m->find("a\nb\\c\rd"), nullptr);
  EXPECT_NE(m->find("x\\y"), nullptr);
}

TEST(ManifestParse, TakesBackslashesLiterallyOnUnescapedLines) {
  auto m = Manifest::parse(kAbc + "  a\\nb\n");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find("a\\nb"), nullptr);
}

TEST(ManifestParse, AcceptsCrLfAndAMissingFinalNewline) {
  auto m = Manifest::parse(kAbc + "  a\r\n" + kEmpty + "  b");
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->size(), 2u);
  EXPECT_NE(m->find("a"), nullptr);
}

TEST(ManifestParse, AcceptsUpperCaseHexAndNormalisesIt) {
  std::string upper = kAbc;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto m = Manifest::parse(upper + "  a\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->entries()[0].digest.hex(), kAbc);
}

TEST(ManifestParse, AcceptsAnEmptyText) {
  auto m = Manifest::parse("");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->empty());
}

TEST(ManifestParse, RefusesOneBadLineAmongGoodOnes) {
  auto m = Manifest::parse(kAbc + "  a\nthis is not a checksum line\n" + kEmpty + "  b\n");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "ManifestMalformed");
  EXPECT_NE(m.error().message().find("line 2"), std::string::npos) << m.error().message();
}

TEST(ManifestParse, RefusesDigestsOfTheWrongLengthOrAlphabet) {
  EXPECT_EQ(reason_of(kAbc.substr(1) + "  a\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of(kAbc + "0  a\n"), "ManifestMalformed");
  std::string g = kAbc;
  g[5] = 'g';
  EXPECT_EQ(reason_of(g + "  a\n"), "ManifestMalformed");
  std::string nul = kAbc;
  nul[5] = '\0';
  EXPECT_EQ(reason_of(nul + "  a\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of(kAbc + std::string("  a\0b\n", 6)), "ManifestMalformed");  // NUL in the name
}

TEST(ManifestParse, RefusesShapesCoreutilsDoesNotWrite) {
  EXPECT_EQ(reason_of("\n"), "ManifestMalformed");              // empty line
  EXPECT_EQ(reason_of(kAbc + "  a\n\n"), "ManifestMalformed");  // trailing empty line
  EXPECT_EQ(reason_of("# comment\n" + kAbc + "  a\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of(kAbc + " a\n"), "ManifestMalformed");              // one space
  EXPECT_EQ(reason_of(kAbc + "\ta\n"), "ManifestMalformed");             // tab
  EXPECT_EQ(reason_of(" " + kAbc + "  a\n"), "ManifestMalformed");       // leading space
  EXPECT_EQ(reason_of(kAbc + " xa\n"), "ManifestMalformed");             // unknown marker
  EXPECT_EQ(reason_of(kAbc + "  \n"), "ManifestMalformed");              // empty name
  EXPECT_EQ(reason_of("\\" + kAbc + "  a\\tb\n"), "ManifestMalformed");  // unknown escape
  EXPECT_EQ(reason_of("\\" + kAbc + "  ab\\\n"), "ManifestMalformed");   // dangling backslash
  EXPECT_EQ(reason_of("SHA512 (a) = " + kAbc + "\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of("SHA256 (a)= " + kAbc + "\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of("SHA256 (a) = " + kAbc.substr(1) + "\n"), "ManifestMalformed");
}

TEST(ManifestParse, RefusesListingTheManifestOrTheReleaseItself) {
  EXPECT_EQ(reason_of(kAbc + "  ./SHA256SUMS\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of(kAbc + "  release.dsse.json\n"), "ManifestMalformed");
  EXPECT_EQ(reason_of(kAbc + "  sub/SHA256SUMS\n"), "ok");
}

TEST(ManifestParse, RefusesUnsafePathsBeforeAnyFileIsTouched) {
  for (std::string name :
       {"../x", "/etc/passwd", "a/../../b", "a//b", "./../x", "a/./b", "a/", ".", "./", "..", "a/.."}) {
    auto m = Manifest::parse(kAbc + "  " + name + "\n");
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_EQ(m.error().reason(), "UnsafePath") << name;
  }
  EXPECT_EQ(reason_of(kAbc + "  " + std::string(256, 'x') + "\n"), "UnsafePath");
  EXPECT_EQ(reason_of(kAbc + "  " + std::string(255, 'x') + "\n"), "ok");
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += std::string(250, 'd') + "/";
  EXPECT_EQ(reason_of(kAbc + "  " + deep + "f\n"), "UnsafePath");
}

TEST(ManifestParse, RefusesNamesThatAreNotUtf8) {
  // Names travel in JSON (signed sizes, reports): only Unicode text can.
  for (std::string name : {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe6\x97"}) {
    EXPECT_EQ(reason_of(kAbc + "  " + name + "\n"), "UnsafePath") << name;
  }
  for (std::string name : {"\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\x7f"}) {
    EXPECT_EQ(reason_of(kAbc + "  " + name + "\n"), "ok") << name;
  }
}

TEST(ManifestParse, RefusesTheSamePathTwiceWithAnyDigest) {
  auto same = Manifest::parse(kAbc + "  a\n" + kAbc + "  a\n");
  ASSERT_FALSE(same.ok());
  EXPECT_EQ(same.error().reason(), "DuplicateEntry");
  EXPECT_EQ(same.error().detail("file"), "a");
  EXPECT_EQ(reason_of(kAbc + "  ./a\n" + kEmpty + " *a\n"), "DuplicateEntry");
  EXPECT_EQ(reason_of(kAbc + "  a\nSHA256 (./a) = " + kEmpty + "\n"), "DuplicateEntry");
}

TEST(ManifestParse, RefusesATextOverTheCapBeforeParsingIt) {
  std::string big(kMaxManifestBytes + 1, 'x');
  EXPECT_EQ(reason_of(big), "ManifestTooLarge");
}

TEST(ManifestWrite, SortsByteWiseAndEscapesLikeCoreutils) {
  auto d = *Sha256Digest::from_hex(kAbc);
  auto m = Manifest::from_entries({{"b", d}, {"a/b", d}, {"a-b", d}, {"A", d}, {"n\nl", d}});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->to_text(), kAbc + "  ./A\n" + kAbc + "  ./a-b\n" + kAbc + "  ./a/b\n" + kAbc + "  ./b\n" +
                              "\\" + kAbc + "  ./n\\nl\n");
}

TEST(ManifestWrite, RoundTripsThroughTheParser) {
  auto d = *Sha256Digest::from_hex(kEmpty);
  auto m = Manifest::from_entries({{"x\\y", d}, {"c\rr", d}, {"sp ace", d}, {"\xe6\x97\xa5", d}});
  ASSERT_TRUE(m.ok());
  auto again = Manifest::parse(m->to_text());
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(again->entries(), m->entries());
}

TEST(ManifestWrite, RefusesDuplicateOrNonCanonicalEntries) {
  auto d = *Sha256Digest::from_hex(kEmpty);
  EXPECT_EQ(Manifest::from_entries({{"a", d}, {"a", d}}).error().reason(), "DuplicateEntry");
  EXPECT_EQ(Manifest::from_entries({{"./a", d}}).error().reason(), "UnsafePath");
  EXPECT_EQ(Manifest::from_entries({{"a/../b", d}}).error().reason(), "UnsafePath");
}

// The writer against the real thing: sha256sum over the same names, in the same order.
TEST(ManifestWrite, EqualsSha256sumOutputForAwkwardNames) {
  auto dir = *TempDir::create("manifest-test");
  std::vector<std::string> names = {
      "plain", "with space",        "back\\slash", "new\nline", "carriage\rreturn",
      "star*", "\xc3\xa9t\xc3\xa9", "-dash"};
  std::vector<ManifestEntry> entries;
  std::vector<std::string> argv = {"sha256sum", "--"};
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::ofstream(dir.path() / n) << "content of " << n;
    entries.push_back({n, *sha256("content of " + n)});
    argv.push_back("./" + n);
  }
  auto r = run_command(argv, std::chrono::seconds(30), {}, dir.path());
  ASSERT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : r.error().to_string());
  auto m = Manifest::from_entries(entries);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->to_text(), r->out);
  auto parsed = Manifest::parse(r->out);
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  EXPECT_EQ(parsed->entries(), m->entries());
  // And the tagged form, which coreutils writes with --tag.
  argv.insert(argv.begin() + 1, "--tag");
  auto tagged = run_command(argv, std::chrono::seconds(30), {}, dir.path());
  ASSERT_TRUE(tagged.ok() && tagged->status.success());
  auto from_tagged = Manifest::parse(tagged->out);
  ASSERT_TRUE(from_tagged.ok()) << from_tagged.error().to_string();
  EXPECT_EQ(from_tagged->entries(), m->entries());
}

}  // namespace
}  // namespace infergate
