// Loading tokenizer.json and running byte-level BPE.
#include "infergate/runtime/model/tokenizer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "infergate/common/json.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {

namespace {
constexpr int32_t kMaxTokenId = (1 << 24) - 1;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct MergeValue {
  int32_t rank;
  int32_t merged;
};
}  // namespace

struct Tokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;  // byte-level spelling -> id
  std::vector<std::string> id_to_token;            // spelling (added tokens: their content)
  std::vector<std::string> id_bytes;               // what each id decodes to
  std::vector<uint8_t> id_special;
  std::array<int32_t, 256> byte_ids{};
  std::unordered_map<uint64_t, MergeValue> merges;
  size_t num_merges = 0;
  bool ignore_merges = false;
  bool nfc = false;
  bool add_prefix_space = false;
  std::vector<SplitPattern> splits;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  // Added-token matching: the distinct content lengths per first byte (longest first), and the index
  // of each content in `added`: a few hash lookups per candidate position, however many tokens exist.
  std::array<std::vector<size_t>, 256> added_lengths;
  std::unordered_map<std::string_view, size_t> added_index;
  std::vector<int32_t> prefix, suffix;  // post-processor template around the text

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  // Finds the leftmost-longest added token in text[from..]; returns false when none.
  bool next_added(std::string_view text, size_t from, bool parse_special, size_t* start, size_t* end,
                  const AddedToken** token) const;
};

namespace {

Error tok_error(std::string_view file, std::string_view field, std::string message) {
  Error e(ErrorCode::kInvalidArgument, std::string(file) + ": " + std::string(field) + ": " + message,
          "InvalidTokenizer");
  e.with_detail("file", std::string(file)).with_detail("field", std::string(field));
  return e;
}

bool is_word_char(char32_t cp) { return unicode::is_letter(cp) || unicode::is_number(cp) || cp == '_'; }

// The code point ending just before byte `pos`, or 0 at the start.
char32_t cp_before(std::string_view s, size_t pos) {
  if (pos == 0) return 0;
  size_t k = pos - 1;
  while (k > 0 && pos - k < 4 && (static_cast<uint8_t>(s[k]) & 0xc0) == 0x80) --k;
  unicode::Unit u = unicode::decode(s, k);
  return u.valid && k + u.len == pos ? u.cp : static_cast<uint8_t>(s[pos - 1]);
}

char32_t cp_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  unicode::Unit u = unicode::decode(s, pos);
  return u.cp;
}

Status parse_pre_tokenizer(const Json& p, std::string_view file, const std::string& path,
                           Tokenizer::Impl& t) {
  if (p.is_null()) return tok_error(file, path, "a byte-level pre-tokenizer is required");
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    return tok_error(file, path, "expected an object with a type");
  }
  std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      return tok_error(file, path + ".pretokenizers", "expected a list");
    }
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i) {
      INFERGATE_RETURN_IF_ERROR(parse_pre_tokenizer(p["pretokenizers"][i], file,
                                                    path + ".pretokenizers[" + std::to_string(i) + "]", t));
    }
    return ok_status();
  }
  if (type == "ByteLevel") {
    if (p.contains("add_prefix_space") && p["add_prefix_space"].is_boolean()) {
      t.add_prefix_space = p["add_prefix_space"].get<bool>();
    }
    bool use_regex = !p.contains("use_regex") || !p["use_regex"].is_boolean() || p["use_regex"].get<bool>();
    if (use_regex) t.splits.push_back(SplitPattern::kGpt2);
    return ok_status();
  }
  if (type == "Split") {
    const Json* pattern = p.contains("pattern") ? &p["pattern"] : nullptr;
    if (!pattern || !pattern->is_object() || !pattern->contains("Regex") ||
        !(*pattern)["Regex"].is_string()) {
      return tok_error(file, path + ".pattern", "expected {\"Regex\": ...}");
    }
    std::string regex = (*pattern)["Regex"].get<std::string>();
    std::string behavior = p.value("behavior", "");
    if (behavior != "Isolated") return tok_error(file, path + ".behavior", "only Isolated is supported");
    if (p.value("invert", false))
      return tok_error(file, path + ".invert", "inverted splits are not supported");
    for (SplitPattern sp : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2}) {
      if (regex == split_pattern_regex(sp)) {
        t.splits.push_back(sp);
        return ok_status();
      }
    }
    return tok_error(file, path + ".pattern.Regex",
                     "unsupported pre-tokenizer regex (supported: the GPT-2, Llama-3 and Qwen2 patterns)");
  }
  return tok_error(file, path + ".type", "unsupported pre-tokenizer '" + type + "'");
}

Status parse_normalizer(const Json& n, std::string_view file, const std::string& path, Tokenizer::Impl& t) {
  if (n.is_null()) return ok_status();
  if (!n.is_object() || !n.contains("type") || !n["type"].is_string()) {
    return tok_error(file, path, "expected an object with a type");
  }
  std::string type = n["type"].get<std::string>();
  if (type == "NFC") {
    t.nfc = true;
    return ok_status();
  }
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (size_t i = 0; i < n["normalizers"].size(); ++i) {
      INFERGATE_RETURN_IF_ERROR(
          parse_normalizer(n["normalizers"][i], file, path + ".normalizers[" + std::to_string(i) + "]", t));
    }
    return ok_status();
  }
  return tok_error(file, path + ".type", "unsupported normalizer '" + type + "' (NFC only)");
}

Status parse_post_processor(const Json& p, std::string_view file, const std::string& path,
                            Tokenizer::Impl& t) {
  if (p.is_null()) return ok_status();
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    return tok_error(file, path, "expected an object with a type");
  }
  std::string type = p["type"].get<std::string>();
  if (type == "ByteLevel") return ok_status();  // offsets only; ids unchanged
  if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array())
      return tok_error(file, path, "expected processors");
    for (size_t i = 0; i < p["processors"].size(); ++i) {
      INFERGATE_RETURN_IF_ERROR(
          parse_post_processor(p["processors"][i], file, path + ".processors[" + std::to_string(i) + "]", t));
    }
    return ok_status();
  }
  if (type == "TemplateProcessing") {
    if (!p.contains("single") || !p["single"].is_array())
      return tok_error(file, path + ".single", "expected a list");
    const Json* specials =
        p.contains("special_tokens") && p["special_tokens"].is_object() ? &p["special_tokens"] : nullptr;
    bool seen_sequence = false;
    for (size_t i = 0; i < p["single"].size(); ++i) {
      const Json& item = p["single"][i];
      std::string ipath = path + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return tok_error(file, ipath, "expected a Sequence or a SpecialToken");
      }
      std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials && specials->contains(name) && (*specials)[name].contains("ids") &&
          (*specials)[name]["ids"].is_array()) {
        for (const Json& id : (*specials)[name]["ids"]) {
          if (!id.is_number_integer())
            return tok_error(file, path + ".special_tokens", "ids must be integers");
          ids.push_back(id.get<int32_t>());
        }
      } else if (auto it = t.added_by_content.find(name); it != t.added_by_content.end()) {
        ids.push_back(it->second);
      } else {
        return tok_error(file, ipath, "special token '" + name + "' is not defined");
      }
      auto& dst = seen_sequence ? t.suffix : t.prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    return ok_status();
  }
  return tok_error(file, path + ".type", "unsupported post-processor '" + type + "'");
}

// "Ġhello" -> " hello"; characters outside the byte-level alphabet keep their UTF-8 bytes.
std::string byte_level_decode(std::string_view token) {
  static const std::unordered_map<char32_t, uint8_t> inverse = [] {
    std::unordered_map<char32_t, uint8_t> m;
    const auto& a = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) m[a[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    unicode::Unit u = unicode::decode(token, i);
    auto it = u.valid ? inverse.find(u.cp) : inverse.end();
    if (it != inverse.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(token.substr(i, u.len));
    }
    i += u.len;
  }
  return out;
}

}  // namespace

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    auto it = vocab.find(byte_level_encode(piece));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Sym> syms(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    syms[i] = {byte_ids[static_cast<uint8_t>(piece[i])], static_cast<int32_t>(i) - 1,
               i + 1 < piece.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[static_cast<size_t>(pos)].next < 0) return;
    const Sym& a = syms[static_cast<size_t>(pos)];
    auto it = merges.find(pair_key(a.id, syms[static_cast<size_t>(a.next)].id));
    if (it != merges.end()) heap.push({it->second.rank, pos, it->second.merged});
  };
  for (size_t i = 0; i + 1 < piece.size(); ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Sym& a = syms[static_cast<size_t>(c.pos)];
    if (a.id < 0 || a.next < 0) continue;  // merged away, or now last
    Sym& b = syms[static_cast<size_t>(a.next)];
    auto it = merges.find(pair_key(a.id, b.id));
    if (it == merges.end() || it->second.rank != c.rank || it->second.merged != c.merged) continue;  // stale
    a.id = c.merged;
    b.id = -1;
    a.next = b.next;
    if (a.next >= 0) syms[static_cast<size_t>(a.next)].prev = c.pos;
    consider(a.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next)
    out.push_back(syms[static_cast<size_t>(i)].id);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc) {
    normalized = unicode::nfc(text);
    text = normalized;
  }
  std::string prefixed;
  if (add_prefix_space && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text};
  for (SplitPattern sp : splits) {
    std::vector<std::string_view> next;
    for (std::string_view p : pieces) {
      auto parts = pre_tokenize(p, sp);
      next.insert(next.end(), parts.begin(), parts.end());
    }
    pieces.swap(next);
  }
  for (std::string_view p : pieces) bpe(p, out);
}

bool Tokenizer::Impl::next_added(std::string_view text, size_t from, bool parse_special, size_t* start,
                                 size_t* end, const AddedToken** token) const {
  for (size_t i = from; i < text.size(); ++i) {
    for (size_t len : added_lengths[static_cast<uint8_t>(text[i])]) {
      if (len > text.size() - i) continue;
      auto hit = added_index.find(text.substr(i, len));
      if (hit == added_index.end()) continue;
      const AddedToken& t = added[hit->second];
      if (t.special && !parse_special) continue;
      size_t s = i, e = i + t.content.size();
      if (t.single_word && (is_word_char(cp_before(text, s)) || is_word_char(cp_at(text, e)))) continue;
      if (t.lstrip) {
        while (s > from && unicode::is_whitespace(cp_before(text, s))) {
          size_t k = s - 1;
          while (k > from && (static_cast<uint8_t>(text[k]) & 0xc0) == 0x80) --k;
          s = k;
        }
      }
      if (t.rstrip) {
        while (e < text.size()) {
          unicode::Unit u = unicode::decode(text, e);
          if (!u.valid || !unicode::is_whitespace(u.cp)) break;
          e += u.len;
        }
      }
      *start = s;
      *end = e;
      *token = &t;
      return true;  // candidates are ordered longest first: this is the leftmost-longest match
    }
  }
  return false;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view text, std::string_view file) {
  auto parsed = parse_json(text, file);
  if (!parsed.ok()) return Error(std::move(parsed).error()).with_reason("InvalidTokenizer");
  const Json& j = *parsed;
  if (!j.is_object()) return tok_error(file, "(root)", "expected a JSON object");
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;

  // model
  if (!j.contains("model") || !j["model"].is_object())
    return tok_error(file, "model", "required object is missing");
  const Json& m = j["model"];
  if (m.value("type", std::string("BPE")) != "BPE")
    return tok_error(file, "model.type", "only BPE models are supported");
  for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(unsupported) && m[unsupported].is_string() && !m[unsupported].get<std::string>().empty()) {
      return tok_error(file, std::string("model.") + unsupported, "not supported for byte-level BPE");
    }
  }
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>()) {
    return tok_error(file, "model.byte_fallback", "byte fallback (SentencePiece-style BPE) is not supported");
  }
  if (m.contains("ignore_merges") && m["ignore_merges"].is_boolean())
    t.ignore_merges = m["ignore_merges"].get<bool>();
  if (!m.contains("vocab") || !m["vocab"].is_object())
    return tok_error(file, "model.vocab", "required object is missing");
  int32_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxTokenId) {
      return tok_error(file, "model.vocab." + it.key(), "expected a token id in [0, 2^24)");
    }
    int32_t id = it.value().get<int32_t>();
    t.vocab.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  // added_tokens
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) return tok_error(file, "added_tokens", "expected a list");
    for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const Json& a = j["added_tokens"][i];
      std::string path = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        return tok_error(file, path, "expected {id, content, ...}");
      }
      AddedToken at;
      int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id > kMaxTokenId)
        return tok_error(file, path + ".id", "expected a token id in [0, 2^24)");
      at.id = static_cast<int32_t>(id);
      at.content = a["content"].get<std::string>();
      if (at.content.empty()) return tok_error(file, path + ".content", "must not be empty");
      auto flag = [&](const char* k) { return a.contains(k) && a[k].is_boolean() && a[k].get<bool>(); };
      at.special = flag("special");
      at.lstrip = flag("lstrip");
      at.rstrip = flag("rstrip");
      at.single_word = flag("single_word");
      at.normalized = flag("normalized");
      if (!t.added_by_content.emplace(at.content, at.id).second) {
        return tok_error(file, path + ".content", "'" + at.content + "' is listed twice");
      }
      max_id = std::max(max_id, at.id);
      t.added.push_back(std::move(at));
    }
  }
  if (max_id < 0) return tok_error(file, "model.vocab", "is empty");
  const size_t n = static_cast<size_t>(max_id) + 1;
  t.id_to_token.assign(n, {});
  t.id_bytes.assign(n, {});
  t.id_special.assign(n, 0);
  std::vector<uint8_t> seen(n, 0);
  for (const auto& [tok, id] : t.vocab) {
    if (seen[static_cast<size_t>(id)])
      return tok_error(file, "model.vocab." + tok, "id " + std::to_string(id) + " is used twice");
    seen[static_cast<size_t>(id)] = 1;
    t.id_to_token[static_cast<size_t>(id)] = tok;
    t.id_bytes[static_cast<size_t>(id)] = byte_level_decode(tok);
  }
  for (const AddedToken& a : t.added) {
    size_t id = static_cast<size_t>(a.id);
    if (seen[id] && t.id_to_token[id] != a.content && t.id_bytes[id] != a.content) {
      return tok_error(file, "added_tokens",
                       "token id " + std::to_string(a.id) + " ('" + a.content +
                           "') is already the vocabulary token '" + t.id_to_token[id] + "'");
    }
    t.id_to_token[id] = a.content;
    t.id_bytes[id] = a.content;
    t.id_special[id] = a.special ? 1 : 0;
  }
  for (size_t i = 0; i < t.added.size(); ++i) {
    const std::string& c = t.added[i].content;
    t.added_index.emplace(c, i);  // views into t.added, which no longer changes
    auto& lengths = t.added_lengths[static_cast<uint8_t>(c[0])];
    if (std::find(lengths.begin(), lengths.end(), c.size()) == lengths.end()) lengths.push_back(c.size());
  }
  for (auto& lengths : t.added_lengths) std::sort(lengths.rbegin(), lengths.rend());
  // Every byte must have a token, or some inputs could not be encoded.
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, alphabet[static_cast<size_t>(b)]);
    auto it = t.vocab.find(s);
    if (it == t.vocab.end()) {
      return tok_error(file, "model.vocab",
                       "has no token for byte 0x" + std::string(1, "0123456789abcdef"[b >> 4]) +
                           std::string(1, "0123456789abcdef"[b & 15]) +
                           ": a byte-level vocabulary needs all 256");
    }
    t.byte_ids[static_cast<size_t>(b)] = it->second;
  }
  // merges: "a b" strings, or [a, b] pairs (tokenizers >= 0.20).
  if (m.contains("merges") && !m["merges"].is_null()) {
    if (!m["merges"].is_array()) return tok_error(file, "model.merges", "expected a list");
    const Json& merges = m["merges"];
    t.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      std::string path = "model.merges[" + std::to_string(i) + "]";
      std::string a, b;
      const Json& e = merges[i];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() ||
            s.find(' ', sp + 1) != std::string::npos) {
          return tok_error(file, path, "expected \"left right\"");
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return tok_error(file, path, "expected \"left right\" or [left, right]");
      }
      auto ia = t.vocab.find(a), ib = t.vocab.find(b), im = t.vocab.find(a + b);
      if (ia == t.vocab.end() || ib == t.vocab.end())
        return tok_error(file, path, "a part is not in the vocabulary");
      if (im == t.vocab.end()) return tok_error(file, path, "the merged token is not in the vocabulary");
      t.merges.emplace(pair_key(ia->second, ib->second), MergeValue{static_cast<int32_t>(i), im->second});
    }
    t.num_merges = merges.size();
  }
  INFERGATE_RETURN_IF_ERROR(
      parse_normalizer(j.contains("normalizer") ? j["normalizer"] : Json(), file, "normalizer", t));
  INFERGATE_RETURN_IF_ERROR(parse_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json(),
                                                file, "pre_tokenizer", t));
  INFERGATE_RETURN_IF_ERROR(parse_post_processor(j.contains("post_processor") ? j["post_processor"] : Json(),
                                                 file, "post_processor", t));
  const Json& dec = j.contains("decoder") ? j["decoder"] : Json();
  if (!dec.is_object() || dec.value("type", std::string()) != "ByteLevel") {
    return tok_error(file, "decoder", "a ByteLevel decoder is required");
  }
  for (int32_t id : t.prefix) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      return tok_error(file, "post_processor", "template id out of range");
  }
  for (int32_t id : t.suffix) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      return tok_error(file, "post_processor", "template id out of range");
  }
  Tokenizer out;
  out.impl_ = std::move(impl);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) out.insert(out.end(), t.prefix.begin(), t.prefix.end());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t s = 0, e = 0;
    const AddedToken* tok = nullptr;
    if (!t.added.empty() && t.next_added(text, pos, options.parse_special, &s, &e, &tok)) {
      t.encode_text(text.substr(pos, s - pos), out);
      out.push_back(tok->id);
      pos = e;
    } else {
      t.encode_text(text.substr(pos), out);
      break;
    }
  }
  if (options.add_special_tokens) out.insert(out.end(), t.suffix.begin(), t.suffix.end());
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.id_bytes.size() ||
        t.id_to_token[static_cast<size_t>(id)].empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   "token id " + std::to_string(id) + " is not in the vocabulary", "UnknownTokenId");
    }
    if (skip_special_tokens && t.id_special[static_cast<size_t>(id)]) continue;
    out += t.id_bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token)); it != impl_->added_by_content.end())
    return it->second;
  if (auto it = impl_->vocab.find(std::string(token)); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return {};
  return impl_->id_to_token[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() &&
         impl_->id_special[static_cast<size_t>(id)];
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
size_t Tokenizer::num_merges() const { return impl_->num_merges; }
const std::vector<SplitPattern>& Tokenizer::split_patterns() const { return impl_->splits; }
bool Tokenizer::normalizes_nfc() const { return impl_->nfc; }

Result<TokenizerConfig> parse_tokenizer_config(std::string_view text, std::string_view file) {
  auto parsed = parse_json(text, file);
  if (!parsed.ok()) return Error(std::move(parsed).error()).with_reason("InvalidTokenizer");
  const Json& j = *parsed;
  if (!j.is_object()) return tok_error(file, "(root)", "expected a JSON object");
  TokenizerConfig c;
  // A special token is a string, or an AddedToken-like object with "content".
  auto token = [&](const char* key, std::optional<std::string>* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return ok_status();
    const Json& v = j[key];
    if (v.is_string()) {
      *out = v.get<std::string>();
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      *out = v["content"].get<std::string>();
    } else {
      return tok_error(file, key, "expected a string or {\"content\": ...}");
    }
    return ok_status();
  };
  INFERGATE_RETURN_IF_ERROR(token("bos_token", &c.bos_token));
  INFERGATE_RETURN_IF_ERROR(token("eos_token", &c.eos_token));
  INFERGATE_RETURN_IF_ERROR(token("pad_token", &c.pad_token));
  INFERGATE_RETURN_IF_ERROR(token("unk_token", &c.unk_token));
  if (j.contains("chat_template") && !j["chat_template"].is_null()) {
    const Json& ct = j["chat_template"];
    if (ct.is_string()) {
      c.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const Json& e : ct) {
        if (e.is_object() && e.value("name", std::string()) == "default" && e.contains("template") &&
            e["template"].is_string()) {
          c.chat_template = e["template"].get<std::string>();
        }
      }
    } else {
      return tok_error(file, "chat_template", "expected a string or a list of named templates");
    }
  }
  auto flag = [&](const char* key, bool* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return ok_status();
    if (!j[key].is_boolean()) return tok_error(file, key, "expected true or false");
    *out = j[key].get<bool>();
    return ok_status();
  };
  INFERGATE_RETURN_IF_ERROR(flag("add_bos_token", &c.add_bos_token));
  INFERGATE_RETURN_IF_ERROR(flag("add_eos_token", &c.add_eos_token));
  if (j.contains("model_max_length") && j["model_max_length"].is_number_integer()) {
    int64_t v = j["model_max_length"].get<int64_t>();
    if (v > 0 && v < (int64_t{1} << 40)) c.model_max_length = v;  // transformers writes 1e30 for "no limit"
  }
  return c;
}

}  // namespace infergate::runtime::model
