// Format families and the word grammar of scheme.h.
#include "infergate/weights/scheme.h"

#include <algorithm>
#include <charconv>
#include <optional>

namespace infergate::weights {
namespace {

Error bad_word(std::string_view word, const std::string& why) {
  return Error(
      ErrorCode::kInvalidArgument,
      "weight format '" + std::string(word.substr(0, 64)) + "': " + why +
          " (words: fp16, bf16, fp32, int8, int4, fp8-block[-RxC], fp8-channel, int4-ct-gG-sym|asym, "
          "int4-ct-ch-sym|asym, awq-gG, gptq-gG[-v2])",
      "InvalidFormatWord");
}

std::string group_word(int64_t g) { return g > 0 ? "g" + std::to_string(g) : "ch"; }

// "g128" -> 128, "ch" -> 0; nullopt otherwise (G must be 1..65536 without leading zeros).
std::optional<int64_t> parse_group(std::string_view s) {
  if (s == "ch") return int64_t{0};
  if (s.size() < 2 || s[0] != 'g' || s[1] == '0') return std::nullopt;
  int64_t g = 0;
  auto [p, ec] = std::from_chars(s.data() + 1, s.data() + s.size(), g);
  if (ec != std::errc() || p != s.data() + s.size() || g < 1 || g > 65536) return std::nullopt;
  return g;
}

std::optional<int64_t> parse_positive(std::string_view s) {
  if (s.empty() || s[0] == '0') return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > 65536) return std::nullopt;
  return v;
}

}  // namespace

std::string_view family_name(Family f) {
  switch (f) {
    case Family::kDense: return "dense";
    case Family::kInfergateInt8: return "infergate-int8";
    case Family::kInfergateInt4: return "infergate-int4";
    case Family::kFp8Block: return "fp8-block";
    case Family::kFp8Channel: return "fp8-channel";
    case Family::kCtInt4: return "ct-int4";
    case Family::kAwqInt4: return "awq";
    case Family::kGptqInt4: return "gptq";
  }
  return "unknown";
}

bool is_quantized(Family f) { return f != Family::kDense; }

Result<std::string> format_word(const Scheme& s) {
  switch (s.family) {
    case Family::kDense:
      switch (s.dense_dtype) {
        case Dtype::kF16: return std::string("fp16");
        case Dtype::kBF16: return std::string("bf16");
        case Dtype::kF32: return std::string("fp32");
        default:
          return Error(
              ErrorCode::kInvalidArgument,
              "dense weights of dtype " + std::string(dtype_name(s.dense_dtype)) + " name no weight format",
              "UnsupportedQuantization");
      }
    case Family::kInfergateInt8: return std::string("int8");
    case Family::kInfergateInt4: return std::string("int4");
    case Family::kFp8Block:
      if (s.block[0] == 128 && s.block[1] == 128) return std::string("fp8-block");
      return "fp8-block-" + std::to_string(s.block[0]) + "x" + std::to_string(s.block[1]);
    case Family::kFp8Channel: return std::string("fp8-channel");
    case Family::kCtInt4: return "int4-ct-" + group_word(s.group_size) + (s.symmetric ? "-sym" : "-asym");
    case Family::kAwqInt4: return "awq-" + group_word(s.group_size);
    case Family::kGptqInt4: return "gptq-" + group_word(s.group_size) + (s.gptq_v2 ? "-v2" : "");
  }
  return Error(ErrorCode::kInternal, "unknown format family");
}

Result<Scheme> parse_format_word(std::string_view w) {
  Scheme s;
  if (w == "fp16" || w == "bf16" || w == "fp32") {
    s.dense_dtype = w == "fp16" ? Dtype::kF16 : w == "bf16" ? Dtype::kBF16 : Dtype::kF32;
    s.bits = w == "fp32" ? 32 : 16;
    return s;
  }
  if (w == "int8" || w == "int4") {
    s.family = w == "int8" ? Family::kInfergateInt8 : Family::kInfergateInt4;
    s.bits = w == "int8" ? 8 : 4;
    return s;
  }
  if (w == "fp8-channel") {
    s.family = Family::kFp8Channel;
    s.bits = 8;
    return s;
  }
  if (w == "fp8-block") {
    s.family = Family::kFp8Block;
    s.bits = 8;
    s.block = {128, 128};
    return s;
  }
  if (w.starts_with("fp8-block-")) {
    const std::string_view dims = w.substr(10);
    const size_t x = dims.find('x');
    auto r = x == std::string_view::npos ? std::nullopt : parse_positive(dims.substr(0, x));
    auto c = x == std::string_view::npos ? std::nullopt : parse_positive(dims.substr(x + 1));
    if (!r || !c) return bad_word(w, "a block is R x C, e.g. fp8-block-64x64");
    if (*r == 128 && *c == 128) return bad_word(w, "128 x 128 blocks are spelled fp8-block");
    s.family = Family::kFp8Block;
    s.bits = 8;
    s.block = {*r, *c};
    return s;
  }
  if (w.starts_with("int4-ct-")) {
    std::string_view rest = w.substr(8);
    const size_t dash = rest.find('-');
    auto g = dash == std::string_view::npos ? std::nullopt : parse_group(rest.substr(0, dash));
    const std::string_view sym = dash == std::string_view::npos ? "" : rest.substr(dash + 1);
    if (!g || (sym != "sym" && sym != "asym")) return bad_word(w, "expected int4-ct-<gG|ch>-<sym|asym>");
    s.family = Family::kCtInt4;
    s.bits = 4;
    s.group_size = *g;
    s.symmetric = sym == "sym";
    return s;
  }
  if (w.starts_with("awq-")) {
    auto g = parse_group(w.substr(4));
    if (!g) return bad_word(w, "expected awq-<gG|ch>");
    s.family = Family::kAwqInt4;
    s.bits = 4;
    s.group_size = *g;
    s.symmetric = false;
    return s;
  }
  if (w.starts_with("gptq-")) {
    std::string_view rest = w.substr(5);
    if (rest.ends_with("-v2")) {
      s.gptq_v2 = true;
      rest.remove_suffix(3);
    }
    auto g = parse_group(rest);
    if (!g) return bad_word(w, "expected gptq-<gG|ch>[-v2]");
    s.family = Family::kGptqInt4;
    s.bits = 4;
    s.group_size = *g;
    return s;
  }
  return bad_word(w, "not a weight format word");
}

bool is_statement_word(std::string_view w) {
  if (w.empty() || w.size() > 32) return false;
  return std::all_of(w.begin(), w.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

}  // namespace infergate::weights
