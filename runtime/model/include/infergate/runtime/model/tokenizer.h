// Byte-level BPE, read from a Hugging Face tokenizer.json: GPT-2, Llama-3 and Qwen2 pre-tokenization,
// merges by rank, added and special tokens, encode and decode. Chat templates are the server's job
// (TokenizerConfig carries the template text).
//
// The pre-tokenizer regexes are implemented by hand over Unicode classes (std::regex has no \p{L});
// the three published patterns are recognised by their exact text in tokenizer.json, anything else is
// refused with its field path. Encoding accepts any bytes: invalid UTF-8 is carried through byte by
// byte, so decode(encode(x)) == x for every input when no normaliser is configured (NFC(x) with one).
// A Tokenizer is immutable after loading, cheap to copy, and safe to use from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::runtime::model {

// The published pre-tokenizer splits.
enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
            // ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // as kLlama3 with \p{N} (one digit per piece)
};
// The regex text of a pattern, exactly as tokenizer.json spells it.
std::string_view split_pattern_regex(SplitPattern p);
// Splits text as the pattern's regex would (find_iter, pieces kept): every byte of `text` lands in
// exactly one piece, in order.
std::vector<std::string_view> pre_tokenize(std::string_view text, SplitPattern pattern);

// GPT-2's reversible byte -> printable character map (byte_level.rs bytes_char).
const std::array<char32_t, 256>& byte_level_alphabet();
// The byte-level spelling of raw bytes ("Ġhello" for " hello").
std::string byte_level_encode(std::string_view bytes);

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct EncodeOptions {
  bool add_special_tokens = true;  // apply the post-processor's template (a BOS, for Llama-3)
  bool parse_special = true;       // recognise special tokens in the text; false for untrusted text
};

class Tokenizer {
 public:
  // Parses tokenizer.json. Errors carry the reason "InvalidTokenizer" and name the field.
  static Result<Tokenizer> from_json(std::string_view tokenizer_json,
                                     std::string_view file_name = "tokenizer.json");

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The bytes the ids stand for (not necessarily valid UTF-8 on its own: a character may span tokens).
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // The bytes of one token, for incremental decoding; empty for an id that is not a token.
  std::string_view token_bytes(int32_t id) const;
  // The id of a token given as it is spelled in the vocabulary (byte-level), or an added token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;
  // One past the largest id.
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  size_t num_merges() const;
  const std::vector<SplitPattern>& split_patterns() const;
  bool normalizes_nfc() const;

  struct Impl;  // opaque

 private:
  std::shared_ptr<const Impl> impl_;
};

// tokenizer_config.json: special token names and the chat template.
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  std::string chat_template;  // the default template ("" when none)
  bool add_bos_token = false;
  bool add_eos_token = false;
  int64_t model_max_length = 0;  // 0 when absent or absurd
};
Result<TokenizerConfig> parse_tokenizer_config(std::string_view json_text,
                                               std::string_view file_name = "tokenizer_config.json");

// A deterministic byte-level BPE trainer, for synthetic test models: pre-tokenizes `corpus` with
// `pattern`, starts from the 256 byte tokens (id = byte value) and repeatedly merges the most frequent
// adjacent pair (ties broken by the smaller pair of byte strings) until `vocab_size` tokens exist or
// no pair is left. Merges are returned in rank order, as tokenizer.json lists them.
struct TrainedBpe {
  std::vector<std::string> vocab;  // byte-level spellings; index = id
  std::vector<std::pair<std::string, std::string>> merges;
};
TrainedBpe train_byte_level_bpe(std::string_view corpus, size_t vocab_size, SplitPattern pattern);

// Writes a tokenizer.json for a trained BPE, in the shape the Hugging Face tokenizers library writes:
// a Split pre-tokenizer with the pattern's regex followed by ByteLevel, a ByteLevel decoder, the
// special tokens as added tokens with ids after the vocabulary, and optionally NFC and a BOS template.
struct TokenizerJsonOptions {
  SplitPattern pattern = SplitPattern::kLlama3;
  bool nfc = false;
  bool ignore_merges = false;
  std::vector<std::string> special_tokens;
  std::optional<std::string> bos_token;  // prepended by a TemplateProcessing post-processor
};
std::string make_tokenizer_json(const TrainedBpe& bpe, const TokenizerJsonOptions& options);

}  // namespace infergate::runtime::model
