// The byte-level BPE tokenizer: the hand-written pre-tokenizer against the published regexes (run by
// Python's regex module), encoding against an independent Python BPE, round trips on multilingual and
// invalid UTF-8 text, added and special tokens, and refusals of unsupported tokenizer.json files.
#include "infergate/runtime/model/tokenizer.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <random>
#include <sstream>

#include "infergate/common/encoding.h"
#include "infergate/common/json.h"
#include "infergate/runtime/model/unicode.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {

using infergate::testing::refused;

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> lines = {
      "Hello world! It's a test, isn't it? I'M HERE, you'RE there, we'll see, they'd go, I've been.",
      "The year 2024 had 366 days; pi is about 3.14159 and 1234567890 is long.",
      "   leading spaces and trailing   ",
      "tabs\tand\nnewlines\r\n\r\nmixed  \n  indents\n\n\n",
      "中文分词测试：你好，世界！今天是2024年，天气很好。我们一起学习自然语言处理。",
      "Привет, мир! Ça va? naïve café résumé Straße",
      "مرحبا بالعالم ١٢٣ שלום עולם",
      "emoji 😀👍🏽 and symbols ©®™ — “quotes” «guillemets» …",
      "code: for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; } // done",
      "e\xcc\x81 decomposed and \xe1\x84\x80\xe1\x85\xa1 hangul jamo, \xe2\x84\xab angstrom",
      "'s 'S 'sound 'Re 'LL 'd' '' ' ",
      "multiple   spaces   between\xc2\xa0nbsp\xe3\x80\x80ideographic",
      "a",
      " ",
      "\n",
      "123456789012 12 1",
      "x  \n",
      "end with spaces  ",
      "!!!???...,,,;;; $$$ %%% &&&",
      "MixedCASE camelCase snake_case kebab-case SCREAMING_CASE",
  };
  return lines;
}

// Random strings from a pool of characters of every class the patterns distinguish.
std::vector<std::string> random_lines(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<std::string> pool = {"a",  "Z", "é", "中", "文", "ж",        "'",  "s",  "t",    "re",
                                   "ll", "1", "7", "٣",  " ",  "  ",       "\t", "\n", "\r\n", "!",
                                   ".",  ",", "😀", "-",  "_",  "\xc2\xa0", "(",  ")",  "\""};
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s;
    int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) s += pool[rng() % pool.size()];
    out.push_back(s);
  }
  return out;
}

std::string hex_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += hex_encode(l) + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

class PreTokenizer : public ::testing::TestWithParam<SplitPattern> {};

TEST_P(PreTokenizer, SplitsExactlyAsThePublishedRegex) {
  std::vector<std::string> inputs = corpus();
  auto more = random_lines(777, 400);
  inputs.insert(inputs.end(), more.begin(), more.end());
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "pattern.txt", split_pattern_regex(GetParam()));
  testing::write_bytes(dir.path() / "in.txt", hex_lines(inputs));
  auto r = testing::run_python({testing::source_file("bpe_oracle.py").string(), "split",
                                (dir.path() / "pattern.txt").string(), (dir.path() / "in.txt").string()});
  ASSERT_TRUE(r.status.success()) << r.err;
  auto expected = split_lines(r.out);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string ours;
    for (std::string_view p : pre_tokenize(inputs[i], GetParam())) {
      if (!ours.empty()) ours += ",";
      ours += hex_encode(p);
    }
    EXPECT_EQ(ours, expected[i]) << "input " << i << " (random seed 777): '" << inputs[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, PreTokenizer,
                         ::testing::Values(SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2),
                         [](const auto& param_info) {
                           return std::string(param_info.param == SplitPattern::kGpt2     ? "Gpt2"
                                              : param_info.param == SplitPattern::kLlama3 ? "Llama3"
                                                                                          : "Qwen2");
                         });

TEST(PreTokenizer, Llama3KeepsUpToThreeDigitsAndQwen2One) {
  auto l = pre_tokenize("12345", SplitPattern::kLlama3);
  EXPECT_EQ(l, (std::vector<std::string_view>{"123", "45"}));
  auto q = pre_tokenize("123", SplitPattern::kQwen2);
  EXPECT_EQ(q, (std::vector<std::string_view>{"1", "2", "3"}));
  auto g = pre_tokenize("hello  world", SplitPattern::kGpt2);
  EXPECT_EQ(g, (std::vector<std::string_view>{"hello", " ", " world"}));
}

TEST(PreTokenizer, CoversInvalidUtf8ByteByByte) {
  std::string s = "ab\xff\xfe cd\xe4\xb8";
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2}) {
    std::string joined;
    for (auto piece : pre_tokenize(s, p)) joined += piece;
    EXPECT_EQ(joined, s);
  }
}

std::string training_text() {
  std::string t;
  for (int rep = 0; rep < 3; ++rep) {
    for (const auto& l : corpus()) t += l + "\n";
  }
  return t;
}

struct Built {
  std::string json;
  Tokenizer tok;
};

Built build(SplitPattern pattern, bool nfc, bool ignore_merges, size_t vocab = 700) {
  TrainedBpe bpe = train_byte_level_bpe(training_text(), vocab, pattern);
  TokenizerJsonOptions o;
  o.pattern = pattern;
  o.nfc = nfc;
  o.ignore_merges = ignore_merges;
  o.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"};
  o.bos_token = "<|begin_of_text|>";
  std::string json = make_tokenizer_json(bpe, o);
  auto t = Tokenizer::from_json(json);
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return {json, std::move(t).value()};
}

TEST(BpeTrainer, IsDeterministicAndLearnsRealMerges) {
  TrainedBpe a = train_byte_level_bpe(training_text(), 600, SplitPattern::kLlama3);
  TrainedBpe b = train_byte_level_bpe(training_text(), 600, SplitPattern::kLlama3);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.vocab.size(), 600u);
  EXPECT_EQ(a.merges.size(), 600u - 256u);
  // The most frequent pair in English text with spaces: a merge involving Ġ (space) comes early.
  bool space_merge = false;
  for (size_t i = 0; i < 20; ++i) space_merge |= a.merges[i].first.find("Ġ") != std::string::npos;
  EXPECT_TRUE(space_merge);
}

struct EncodeCase {
  SplitPattern pattern;
  bool nfc;
  bool ignore_merges;
};

class TokenizerEncode : public ::testing::TestWithParam<EncodeCase> {};

TEST_P(TokenizerEncode, MatchesAnIndependentPythonBpe) {
  auto [pattern, nfc, ignore_merges] = GetParam();
  Built b = build(pattern, nfc, ignore_merges);
  std::vector<std::string> inputs = corpus();
  auto more = random_lines(4242, 200);
  inputs.insert(inputs.end(), more.begin(), more.end());
  inputs.push_back("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto dir = testing::temp_dir();
  testing::write_bytes(dir.path() / "tokenizer.json", b.json);
  testing::write_bytes(dir.path() / "in.txt", hex_lines(inputs));
  auto r = testing::run_python({testing::source_file("bpe_oracle.py").string(), "encode",
                                (dir.path() / "tokenizer.json").string(), (dir.path() / "in.txt").string()});
  ASSERT_TRUE(r.status.success()) << r.err;
  auto expected = split_lines(r.out);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string ours;
    for (int32_t id : b.tok.encode(inputs[i])) {
      if (!ours.empty()) ours += " ";
      ours += std::to_string(id);
    }
    EXPECT_EQ(ours, expected[i]) << "input " << i << " (random seed 4242): '" << inputs[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TokenizerEncode,
                         ::testing::Values(EncodeCase{SplitPattern::kLlama3, false, false},
                                           EncodeCase{SplitPattern::kLlama3, false, true},
                                           EncodeCase{SplitPattern::kQwen2, true, false},
                                           EncodeCase{SplitPattern::kGpt2, false, false}));

TEST(Tokenizer, RoundTripsMultilingualText) {
  Built b = build(SplitPattern::kLlama3, false, false);
  for (const auto& line : corpus()) {
    auto ids = b.tok.encode(line, {.add_special_tokens = false});
    auto back = b.tok.decode(ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, line);
  }
  // Chinese text compresses: merges learned from the training text apply.
  std::string zh = "你好，世界！我们一起学习自然语言处理。";
  EXPECT_LT(b.tok.encode(zh, {.add_special_tokens = false}).size(), zh.size() / 2);
}

TEST(Tokenizer, RoundTripsInvalidUtf8ByteForByte) {
  Built b = build(SplitPattern::kLlama3, false, false);
  std::mt19937 rng(99);
  for (int n = 0; n < 200; ++n) {
    std::string s;
    int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) s.push_back(static_cast<char>(rng() % 256));
    auto back = b.tok.decode(b.tok.encode(s, {.add_special_tokens = false}));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(hex_encode(*back), hex_encode(s)) << "random seed 99, case " << n;
  }
  for (std::string s : {std::string("\xff"), std::string("abc\xe4\xb8"), std::string("\xc0\xaf"),
                        std::string("\xed\xa0\x80x"), std::string("\0\0\x01", 3)}) {
    auto back = b.tok.decode(b.tok.encode(s, {.add_special_tokens = false}));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(hex_encode(*back), hex_encode(s));
  }
}

TEST(Tokenizer, NfcNormalisesBeforeEncoding) {
  Built b = build(SplitPattern::kQwen2, true, false);
  EXPECT_TRUE(b.tok.normalizes_nfc());
  auto decomposed = b.tok.encode("cafe\xcc\x81", {.add_special_tokens = false});
  auto composed = b.tok.encode("caf\xc3\xa9", {.add_special_tokens = false});
  EXPECT_EQ(decomposed, composed);
  EXPECT_EQ(*b.tok.decode(decomposed), "caf\xc3\xa9");
}

TEST(Tokenizer, AddsTheBosTemplateAndParsesSpecialTokensOnlyWhenAsked) {
  Built b = build(SplitPattern::kLlama3, false, false);
  int32_t bos = *b.tok.token_to_id("<|begin_of_text|>");
  int32_t im_start = *b.tok.token_to_id("<|im_start|>");
  auto ids = b.tok.encode("<|im_start|>hi");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], bos);
  EXPECT_EQ(ids[1], im_start);
  EXPECT_TRUE(b.tok.is_special(im_start));
  // Untrusted text: the special token's characters are ordinary text.
  auto plain = b.tok.encode("<|im_start|>hi", {.add_special_tokens = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(*b.tok.decode(plain), "<|im_start|>hi");
  // Decoding can skip special tokens.
  EXPECT_EQ(*b.tok.decode(ids, /*skip_special_tokens=*/true), "hi");
  EXPECT_EQ(*b.tok.decode(ids), "<|begin_of_text|><|im_start|>hi");
}

TEST(Tokenizer, DecodeRefusesUnknownIds) {
  Built b = build(SplitPattern::kLlama3, false, false);
  std::vector<int32_t> ids = {b.tok.vocab_size()};
  auto r = b.tok.decode(ids);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "UnknownTokenId");
  std::vector<int32_t> neg = {-1};
  EXPECT_TRUE(refused(b.tok.decode(neg), "UnknownTokenId", {"token id -1"}));
}

TEST(Tokenizer, AcceptsMergesWrittenAsStrings) {
  Built b = build(SplitPattern::kLlama3, false, false, 400);
  auto j = *parse_json(b.json, "t");
  Json merges = Json::array();
  for (const auto& m : j["model"]["merges"])
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = merges;
  auto t = Tokenizer::from_json(j.dump());
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->encode("hello world, it's me"), b.tok.encode("hello world, it's me"));
}

void expect_refused(const std::string& json, std::string_view field) {
  auto t = Tokenizer::from_json(json);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().reason(), "InvalidTokenizer") << t.error().to_string();
  EXPECT_NE(t.error().detail("field").find(std::string(field)), std::string::npos) << t.error().to_string();
}

TEST(Tokenizer, RefusesUnsupportedOrBrokenFilesNamingTheField) {
  Built b = build(SplitPattern::kLlama3, false, false, 300);
  auto base = *parse_json(b.json, "t");
  auto edit = [&](auto f) {
    Json j = base;
    f(j);
    return j.dump();
  };
  expect_refused(edit([](Json& j) { j["model"]["type"] = "WordPiece"; }), "model.type");
  expect_refused(edit([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }),
                 "pre_tokenizer.pretokenizers[0].pattern.Regex");
  expect_refused(edit([](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }), "normalizer.type");
  expect_refused(edit([](Json& j) { j["decoder"] = nullptr; }), "decoder");
  expect_refused(edit([](Json& j) {
                   j["model"]["merges"][3] = Json::array({"Ġ", "not-in-vocab"});
                 }),
                 "model.merges[3]");
  expect_refused(edit([](Json& j) { j["model"]["vocab"].erase("a"); }), "model.vocab");
  expect_refused(edit([](Json& j) { j["model"]["vocab"]["zzz"] = 5; }), "model.vocab");
  expect_refused(edit([](Json& j) { j["model"]["byte_fallback"] = true; }), "model.byte_fallback");
  expect_refused(edit([](Json& j) { j["added_tokens"][0]["id"] = -3; }), "added_tokens[0].id");
  expect_refused("[]", "(root)");
}

TEST(TokenizerConfig, ReadsSpecialTokensAndTheChatTemplate) {
  auto c = parse_tokenizer_config(R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true},
    "chat_template": [{"name": "default", "template": "{{ x }}"}, {"name": "tool_use", "template": "t"}],
    "add_bos_token": true, "model_max_length": 1000000000000000019884624838656})");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->bos_token, "<s>");
  EXPECT_EQ(c->eos_token, "</s>");
  EXPECT_EQ(c->chat_template, "{{ x }}");
  EXPECT_TRUE(c->add_bos_token);
  EXPECT_EQ(c->model_max_length, 0);
  auto bad = parse_tokenizer_config(R"({"eos_token": 5})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().detail("field"), "eos_token");
}

}  // namespace
}  // namespace infergate::runtime::model
