// The rules a quantization_config uses to say which modules are quantized: compressed-tensors'
// `targets` and `ignore` entries (an exact module name, a class name such as "Linear", or "re:" and a
// Python regular expression applied with re.match: anchored at the start of the name only), and the
// `modules_to_not_convert` lists of the fp8 / AWQ / GPTQ configs (substrings of the module path, as
// transformers applies them).
//
// Python's `re` and std::regex's ECMAScript grammar agree on a large common subset. A pattern is
// translated into that subset where the translation is exact (\A, \Z, {,n}, a literal "{" or "]"),
// and refused, with the reason word "UnsupportedPattern" and the construct named, where it cannot be:
// lookbehind, named groups and backreferences, inline or scoped flags, atomic groups and possessive
// quantifiers, conditionals, comments, \a \U \N{} octal escapes, unknown escapes of letters, POSIX-like
// "[:" inside a set. Names matched by a pattern must be printable ASCII (0x20-0x7E) and at most 1024
// bytes: there the two engines also agree on ".", "$", \w, \d, \s and \b (Python's are Unicode-aware,
// and its "$" also matches before a final newline). Every tensor name a release publishes is such a
// name; any other is refused rather than matched by guess.
#pragma once

#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::weights {

inline constexpr std::string_view kUnsupportedPattern = "UnsupportedPattern";

// One Python regular expression, compiled for re.match semantics.
class NamePattern {
 public:
  // Translates and compiles `python_regex` (without the "re:" prefix). Patterns over 512 bytes are refused.
  static Result<NamePattern> compile(std::string_view python_regex);

  // re.match(pattern, name) is not None. Refuses names that are not printable ASCII or over 1024 bytes.
  Result<bool> matches(std::string_view name) const;

  const std::string& source() const { return source_; }          // the Python pattern
  const std::string& ecmascript() const { return translated_; }  // what std::regex runs

 private:
  std::string source_;
  std::string translated_;
  std::shared_ptr<const std::regex> re_;
};

// The translation alone (exposed for tests): the ECMAScript pattern, or the refusal.
Result<std::string> translate_python_regex(std::string_view python_regex);

// A compressed-tensors target or ignore entry.
class ModuleRule {
 public:
  enum class Kind { kExact, kPattern, kLinearClass };

  // "re:<pattern>" -> kPattern; "Linear" -> kLinearClass (every linear module: see is_linear_module in
  // description.h); a name with a dot, or lower-case, or "lm_head" -> kExact; any other class name
  // ("Embedding", "DeepseekV3MoE") cannot be evaluated from tensor names and is refused.
  static Result<ModuleRule> parse(std::string_view entry);

  // Whether the rule selects `module` (a module name, no ".weight"); `is_linear` tells what class it is.
  Result<bool> matches(std::string_view module, bool is_linear) const;

  Kind kind() const { return kind_; }
  const std::string& text() const { return text_; }  // the entry as written

 private:
  Kind kind_ = Kind::kExact;
  std::string text_;
  std::string name_;  // kExact
  std::shared_ptr<const NamePattern> pattern_;
};

// A list of rules; `first_match` says which one selects a module (for error messages).
struct ModuleRules {
  std::vector<ModuleRule> rules;

  static Result<ModuleRules> parse(const std::vector<std::string>& entries);
  // The first rule that selects `module`, or null.
  Result<const ModuleRule*> first_match(std::string_view module, bool is_linear) const;
};

// transformers' modules_to_not_convert: an entry excludes every module whose dotted path contains it.
bool contains_any(std::string_view module, const std::vector<std::string>& substrings);

}  // namespace infergate::weights
