// A small deterministic byte-level BPE trainer (for the synthetic test models' tokenizers).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "infergate/common/json.h"
#include "infergate/runtime/model/tokenizer.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {

TrainedBpe train_byte_level_bpe(std::string_view corpus, size_t vocab_size, SplitPattern pattern) {
  TrainedBpe out;
  std::vector<std::string> raw;  // each token's bytes, for tie-breaking
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, alphabet[static_cast<size_t>(b)]);
    out.vocab.push_back(s);
    raw.emplace_back(1, static_cast<char>(b));
  }
  // Distinct words with their counts, in a deterministic (sorted) order.
  std::map<std::string, int64_t> counts;
  for (std::string_view piece : pre_tokenize(corpus, pattern)) ++counts[std::string(piece)];
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [w, c] : counts) {
    Word word{{}, c};
    for (char ch : w) word.syms.push_back(static_cast<uint8_t>(ch));
    words.push_back(std::move(word));
  }
  while (out.vocab.size() < vocab_size) {
    std::unordered_map<uint64_t, int64_t> pairs;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        pairs[(static_cast<uint64_t>(w.syms[i]) << 32) | static_cast<uint32_t>(w.syms[i + 1])] += w.count;
      }
    }
    if (pairs.empty()) break;
    uint64_t best = 0;
    int64_t best_count = -1;
    for (const auto& [key, count] : pairs) {
      if (count < best_count) continue;
      if (count == best_count) {
        auto l = [&](uint64_t k) { return std::make_pair(raw[k >> 32], raw[k & 0xffffffffu]); };
        if (!(l(key) < l(best))) continue;
      }
      best = key;
      best_count = count;
    }
    int32_t a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xffffffffu);
    int32_t merged = static_cast<int32_t>(out.vocab.size());
    out.merges.emplace_back(out.vocab[static_cast<size_t>(a)], out.vocab[static_cast<size_t>(b)]);
    out.vocab.push_back(out.vocab[static_cast<size_t>(a)] + out.vocab[static_cast<size_t>(b)]);
    raw.push_back(raw[static_cast<size_t>(a)] + raw[static_cast<size_t>(b)]);
    for (Word& w : words) {
      std::vector<int32_t> next;
      next.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == a && w.syms[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(w.syms[i]);
        }
      }
      w.syms.swap(next);
    }
  }
  return out;
}

std::string make_tokenizer_json(const TrainedBpe& bpe, const TokenizerJsonOptions& options) {
  using OJson = nlohmann::ordered_json;
  OJson added = OJson::array();
  int64_t next = static_cast<int64_t>(bpe.vocab.size());
  std::optional<int64_t> bos_id;
  for (const std::string& s : options.special_tokens) {
    if (options.bos_token && s == *options.bos_token) bos_id = next;
    added.push_back({{"id", next++},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  // The vocabulary is written by hand, in id order (ordered_json's inserts are linear searches).
  std::string vocab = "{";
  for (size_t i = 0; i < bpe.vocab.size(); ++i) {
    if (i) vocab += ",\n      ";
    vocab += nlohmann::json(bpe.vocab[i]).dump() + ": " + std::to_string(i);
  }
  vocab += "}";
  const std::string placeholder = "@@VOCAB@@";
  OJson merges = OJson::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(OJson::array({a, b}));
  OJson post = nullptr;
  if (bos_id) {
    post = {{"type", "TemplateProcessing"},
            {"single", OJson::array({{{"SpecialToken", {{"id", *options.bos_token}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", OJson::array({{{"SpecialToken", {{"id", *options.bos_token}, {"type_id", 0}}}},
                                   {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                   {{"SpecialToken", {{"id", *options.bos_token}, {"type_id", 1}}}},
                                   {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens",
             {{*options.bos_token,
               {{"id", *options.bos_token},
                {"ids", OJson::array({*bos_id})},
                {"tokens", OJson::array({*options.bos_token})}}}}}};
  } else {
    post = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  }
  OJson j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", options.nfc ? OJson{{"type", "NFC"}} : OJson(nullptr)},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         OJson::array({{{"type", "Split"},
                        {"pattern", {{"Regex", std::string(split_pattern_regex(options.pattern))}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", false}}})}}},
      {"post_processor", post},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", options.ignore_merges},
        {"vocab", placeholder},
        {"merges", merges}}},
  };
  std::string text = j.dump(2) + "\n";
  size_t at = text.find("\"" + placeholder + "\"");
  text.replace(at, placeholder.size() + 2, vocab);
  return text;
}

}  // namespace infergate::runtime::model
