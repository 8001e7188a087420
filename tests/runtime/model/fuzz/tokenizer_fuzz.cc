// libFuzzer target: the tokenizer on arbitrary bytes (servers feed it untrusted text). The first byte
// picks the pre-tokenizer pattern; the rest is the text. Pre-tokenization must cover every byte, in
// order; encode then decode must give the text back (NFC-normalised for the Qwen2 tokenizer).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "infergate/runtime/model/test_model.h"
#include "infergate/runtime/model/tokenizer.h"
#include "infergate/runtime/model/unicode.h"

namespace m = infergate::runtime::model;

namespace {

const m::Tokenizer& tokenizer(m::SplitPattern p) {
  auto build = [](m::SplitPattern pattern) {
    m::TrainedBpe bpe = m::train_byte_level_bpe(m::test_model_training_text(), 600, pattern);
    m::TokenizerJsonOptions o;
    o.pattern = pattern;
    o.nfc = pattern == m::SplitPattern::kQwen2;
    o.special_tokens = {"<|begin_of_text|>", "<|im_start|>", "<|im_end|>"};
    auto t = m::Tokenizer::from_json(m::make_tokenizer_json(bpe, o));
    if (!t.ok()) std::abort();
    return *t;
  };
  static const m::Tokenizer gpt2 = build(m::SplitPattern::kGpt2);
  static const m::Tokenizer llama3 = build(m::SplitPattern::kLlama3);
  static const m::Tokenizer qwen2 = build(m::SplitPattern::kQwen2);
  return p == m::SplitPattern::kGpt2 ? gpt2 : p == m::SplitPattern::kLlama3 ? llama3 : qwen2;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto pattern = static_cast<m::SplitPattern>(data[0] % 3);
  const bool parse_special = (data[0] & 0x80) != 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string joined;
  for (std::string_view piece : m::pre_tokenize(text, pattern)) {
    if (piece.empty()) std::abort();
    joined.append(piece);
  }
  if (joined != text) std::abort();
  const m::Tokenizer& t = tokenizer(pattern);
  auto ids = t.encode(text, {.add_special_tokens = false, .parse_special = parse_special});
  auto back = t.decode(ids);
  if (!back.ok()) std::abort();
  if (!t.normalizes_nfc()) {
    if (*back != text) std::abort();
  } else if (!parse_special) {
    // One segment, normalised as a whole. (With special tokens parsed, each text segment between them
    // is normalised on its own, as in Hugging Face tokenizers, so NFC of the whole text can differ.)
    if (*back != m::unicode::nfc(text)) std::abort();
  }
  return 0;
}
