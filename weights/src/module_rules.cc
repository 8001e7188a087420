// Python re.match patterns over std::regex, and compressed-tensors' target / ignore entries.
#include "infergate/weights/module_rules.h"

#include <cctype>

namespace infergate::weights {
namespace {

constexpr size_t kMaxPatternBytes = 512;
constexpr size_t kMaxNameBytes = 1024;

Error unsupported(std::string_view pattern, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument,
               "pattern 're:" + std::string(pattern.substr(0, 200)) + "': " + why +
                   " cannot be evaluated exactly as Python's re.match would",
               std::string(kUnsupportedPattern))
      .with_detail("pattern", std::string(pattern.substr(0, 200)));
}

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool printable_ascii(char c) { return c >= 0x20 && c <= 0x7E; }

// ECMAScript's syntax characters outside a set: these keep their backslash, others lose it.
bool ecma_special(char c) { return std::string_view("^$\\.*+?()[]{}|/").find(c) != std::string_view::npos; }

// A Python repeat "{m}", "{m,}", "{,n}" or "{m,n}" at p[i] == '{': its end (one past '}') and the
// canonical ECMAScript form, or 0 when the brace is a literal (as Python reads it).
size_t parse_repeat(std::string_view p, size_t i, std::string* out, bool* bad_order) {
  size_t j = i + 1;
  std::string lo, hi;
  while (j < p.size() && is_digit(p[j])) lo += p[j++];
  bool comma = false;
  if (j < p.size() && p[j] == ',') {
    comma = true;
    ++j;
    while (j < p.size() && is_digit(p[j])) hi += p[j++];
  }
  if (j >= p.size() || p[j] != '}' || (lo.empty() && hi.empty()) || lo.size() > 6 || hi.size() > 6) return 0;
  *bad_order = !lo.empty() && !hi.empty() && std::stol(lo) > std::stol(hi);
  if (!comma) {
    *out = "{" + lo + "}";
  } else {
    *out = "{" + (lo.empty() ? std::string("0") : lo) + "," + hi + "}";
  }
  return j + 1;
}

}  // namespace

Result<std::string> translate_python_regex(std::string_view p) {
  if (p.size() > kMaxPatternBytes) return unsupported(p, "a pattern over 512 bytes");
  std::string out;
  bool in_set = false;
  // 0: the last token was not a repeat; 1: it was a repeat; 2: a repeat made lazy with "?".
  int repeat = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (!printable_ascii(c)) return unsupported(p, "a character outside printable ASCII");
    if (in_set) {
      if (c == ']') {
        out += ']';
        in_set = false;
      } else if (c == '[') {
        out += "\\[";  // Python: a literal; std::regex would start a POSIX class at "[:"
      } else if (c == '\\') {
        if (i + 1 >= p.size()) return unsupported(p, "a trailing backslash");
        const char e = p[++i];
        if (std::string_view("dDwWsSntrfv").find(e) != std::string_view::npos) {
          out += '\\';
          out += e;
        } else if (e == 'x' && i + 2 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2])) {
          out += p.substr(i - 1, 4);
          i += 2;
        } else if (is_ascii_letter(e) || is_digit(e)) {
          return unsupported(p, std::string("the escape \\") + e + " inside a set");
        } else if (std::string_view("]\\^-[").find(e) != std::string_view::npos) {
          out += '\\';
          out += e;
        } else {
          out += e;
        }
      } else {
        out += c;
      }
      continue;
    }
    const int prev_repeat = repeat;
    repeat = 0;
    switch (c) {
      case '\\': {
        if (i + 1 >= p.size()) return unsupported(p, "a trailing backslash");
        const char e = p[++i];
        if (e == 'A') {
          out += '^';
        } else if (e == 'Z') {
          out += '$';  // without the multiline flag both mean the very end
        } else if (std::string_view("dDwWsSbBntrfv").find(e) != std::string_view::npos) {
          out += '\\';
          out += e;
        } else if (e == 'x' && i + 2 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2])) {
          out += p.substr(i - 1, 4);
          i += 2;
        } else if (is_digit(e)) {
          return unsupported(p, std::string("the backreference or octal escape \\") + e);
        } else if (is_ascii_letter(e)) {
          return unsupported(p, std::string("the escape \\") + e);
        } else if (ecma_special(e)) {
          out += '\\';
          out += e;
        } else {
          out += e;
        }
        break;
      }
      case '(': {
        if (i + 1 < p.size() && p[i + 1] == '?') {
          const std::string_view rest = p.substr(i + 2);
          if (rest.starts_with(":") || rest.starts_with("=") || rest.starts_with("!")) {
            out += p.substr(i, 3);
            i += 2;
          } else if (rest.starts_with("P<")) {
            const size_t close = p.find('>', i + 4);
            if (close == std::string_view::npos) return unsupported(p, "an unterminated group name");
            out += '(';  // a named group matches as a plain one (backreferences are refused)
            i = close;
          } else if (rest.starts_with("<=") || rest.starts_with("<!")) {
            return unsupported(p, "lookbehind (?" + std::string(rest.substr(0, 2)) + "...)");
          } else if (rest.starts_with("P=")) {
            return unsupported(p, "the named backreference (?P=...)");
          } else if (rest.starts_with("#")) {
            return unsupported(p, "a comment group (?#...)");
          } else if (rest.starts_with(">")) {
            return unsupported(p, "an atomic group (?>...)");
          } else if (rest.starts_with("(")) {
            return unsupported(p, "a conditional group (?(...)...)");
          } else {
            return unsupported(p, "the inline flag or group (?" + std::string(rest.substr(0, 2)) + "...)");
          }
        } else {
          out += '(';
        }
        break;
      }
      case '[': {
        out += '[';
        in_set = true;
        if (i + 1 < p.size() && p[i + 1] == '^') {
          out += '^';
          ++i;
        }
        if (i + 1 < p.size() && p[i + 1] == ']') {
          out += "\\]";  // Python: a "]" first in a set is a literal
          ++i;
        }
        break;
      }
      case ']': out += "\\]"; break;
      case '}': out += "\\}"; break;
      case '{': {
        std::string rep;
        bool bad_order = false;
        const size_t end = parse_repeat(p, i, &rep, &bad_order);
        if (end == 0) {
          out += "\\{";  // Python: not a repeat, so a literal brace
          break;
        }
        if (bad_order) return unsupported(p, "a repeat {m,n} with m > n");
        if (prev_repeat != 0) return unsupported(p, "a repeat of a repeat");
        out += rep;
        i = end - 1;
        repeat = 1;
        break;
      }
      case '*':
      case '+':
      case '?':
        if (prev_repeat == 1 && c == '?') {
          out += '?';
          repeat = 2;
        } else if (prev_repeat == 1 && c == '+') {
          return unsupported(p, "a possessive repeat (Python 3.11's *+, ++, ?+, {m,n}+)");
        } else if (prev_repeat != 0) {
          return unsupported(p, "a repeat of a repeat");
        } else {
          out += c;
          repeat = 1;
        }
        break;
      default: out += c; break;
    }
  }
  if (in_set) return unsupported(p, "an unterminated set [...");
  return out;
}

Result<NamePattern> NamePattern::compile(std::string_view python_regex) {
  INFERGATE_ASSIGN_OR_RETURN(std::string translated, translate_python_regex(python_regex));
  NamePattern np;
  np.source_ = std::string(python_regex);
  np.translated_ = translated;
  try {
    np.re_ = std::make_shared<const std::regex>(translated, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return unsupported(python_regex, std::string("std::regex refuses it (") + e.what() + "), so it");
  }
  return np;
}

Result<bool> NamePattern::matches(std::string_view name) const {
  if (name.size() > kMaxNameBytes) {
    return Error(
        ErrorCode::kInvalidArgument,
        "module name of " + std::to_string(name.size()) + " bytes is too long to match 're:" + source_ + "'",
        std::string(kUnsupportedPattern));
  }
  for (char c : name) {
    if (!printable_ascii(c)) {
      return Error(ErrorCode::kInvalidArgument,
                   "module name '" + std::string(name.substr(0, 200)) +
                       "' is not printable ASCII: 're:" + source_ + "' cannot be applied to it exactly",
                   std::string(kUnsupportedPattern))
          .with_detail("tensor", std::string(name.substr(0, 200)));
    }
  }
  try {
    return std::regex_search(name.begin(), name.end(), *re_, std::regex_constants::match_continuous);
  } catch (const std::regex_error& e) {  // libstdc++ reports a too complex match this way
    return Error(ErrorCode::kInvalidArgument,
                 "matching 're:" + source_ + "' against '" + std::string(name) + "' failed: " + e.what(),
                 std::string(kUnsupportedPattern));
  }
}

Result<ModuleRule> ModuleRule::parse(std::string_view entry) {
  ModuleRule r;
  r.text_ = std::string(entry);
  if (entry.starts_with("re:")) {
    INFERGATE_ASSIGN_OR_RETURN(NamePattern p, NamePattern::compile(entry.substr(3)));
    r.kind_ = Kind::kPattern;
    r.pattern_ = std::make_shared<const NamePattern>(std::move(p));
    return r;
  }
  if (entry == "Linear") {
    r.kind_ = Kind::kLinearClass;
    return r;
  }
  if (!entry.empty() && entry.find('.') == std::string_view::npos && entry[0] >= 'A' && entry[0] <= 'Z') {
    return Error(ErrorCode::kInvalidArgument,
                 "entry '" + std::string(entry.substr(0, 200)) +
                     "' names a module class; only Linear can be told from tensor names",
                 std::string(kUnsupportedPattern))
        .with_detail("pattern", std::string(entry.substr(0, 200)));
  }
  r.kind_ = Kind::kExact;
  r.name_ = std::string(entry);
  return r;
}

Result<bool> ModuleRule::matches(std::string_view module, bool is_linear) const {
  switch (kind_) {
    case Kind::kExact: return module == name_;
    case Kind::kLinearClass: return is_linear;
    case Kind::kPattern: return pattern_->matches(module);
  }
  return false;
}

Result<ModuleRules> ModuleRules::parse(const std::vector<std::string>& entries) {
  ModuleRules out;
  for (const std::string& e : entries) {
    INFERGATE_ASSIGN_OR_RETURN(ModuleRule r, ModuleRule::parse(e));
    out.rules.push_back(std::move(r));
  }
  return out;
}

Result<const ModuleRule*> ModuleRules::first_match(std::string_view module, bool is_linear) const {
  for (const ModuleRule& r : rules) {
    INFERGATE_ASSIGN_OR_RETURN(bool m, r.matches(module, is_linear));
    if (m) return &r;
  }
  return static_cast<const ModuleRule*>(nullptr);
}

bool contains_any(std::string_view module, const std::vector<std::string>& substrings) {
  for (const std::string& s : substrings) {
    if (!s.empty() && module.find(s) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace infergate::weights
