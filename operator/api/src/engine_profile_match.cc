// Matching a user's engine.args against a profile's flags the way each engine's parser would, and
// reading an engine version from an image tag.
#include <algorithm>
#include <cctype>
#include <charconv>

#include "infergate/operator/api/engine_profile.h"

namespace infergate::op::api {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// The option name a token spells, as the parser reads it: `--max_model_len=8` -> `--max-model-len`.
std::string option_name(const ArgGrammar& g, std::string_view token) {
  std::string name(token);
  if (g.equals_form) {
    if (size_t eq = name.find('='); eq != std::string::npos) name.resize(eq);
  }
  if (g.underscores_are_dashes && starts_with(name, "--"))
    std::replace(name.begin() + 2, name.end(), '_', '-');
  return name;
}

// Whether the parser would read `token` as `spelling`.
bool matches(const ArgGrammar& g, std::string_view token, const std::string& spelling) {
  const std::string name = option_name(g, token);
  if (name == spelling) return true;
  const bool long_option = starts_with(spelling, "--");
  // argparse's allow_abbrev: a prefix of a long option (longer than the dashes) selects it when it is
  // unique among the parser's options. Any prefix is refused here: the parser knows more options than
  // this table, so "unique" cannot be decided, and an ambiguous prefix is an error in the engine anyway.
  if (long_option && g.abbreviations && name.size() > 3 && starts_with(name, "--") &&
      starts_with(spelling, name)) {
    return true;
  }
  // argparse reads `-tp8` as `-tp 8` (a short option with its value attached).
  if (!long_option && g.attached_short_values && token.size() > spelling.size() &&
      starts_with(token, spelling)) {
    return true;
  }
  return false;
}

std::optional<int> number(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  return v;
}

// "v0.10.1-cu126" / "0.10.1" / "v0.5.0rc2" -> {0,10,1} / {0,10,1} / {0,5,0}.
std::optional<EngineVersion> semver(std::string_view tag) {
  if (!tag.empty() && (tag[0] == 'v' || tag[0] == 'V')) tag.remove_prefix(1);
  EngineVersion v;
  int* parts[] = {&v.major, &v.minor, &v.patch};
  size_t i = 0;
  for (int k = 0; k < 3; ++k) {
    size_t j = i;
    while (j < tag.size() && std::isdigit(static_cast<unsigned char>(tag[j]))) ++j;
    auto n = number(tag.substr(i, j - i));
    if (!n) return k >= 2 ? std::optional<EngineVersion>(v) : std::nullopt;
    *parts[k] = *n;
    i = j;
    if (k < 2) {
      if (i >= tag.size() || tag[i] != '.') return k >= 1 ? std::optional<EngineVersion>(v) : std::nullopt;
      ++i;
    }
  }
  return v;
}

// "server-cuda-b6500", "b6500", "full-b6500" -> {0,6500,0}.
std::optional<EngineVersion> llamacpp_build(std::string_view tag) {
  for (size_t at = tag.find('b'); at != std::string_view::npos; at = tag.find('b', at + 1)) {
    if (at > 0 && tag[at - 1] != '-') continue;
    size_t j = at + 1;
    while (j < tag.size() && std::isdigit(static_cast<unsigned char>(tag[j]))) ++j;
    if (j == at + 1 || (j < tag.size() && tag[j] != '-')) continue;
    if (auto n = number(tag.substr(at + 1, j - at - 1))) return EngineVersion{0, *n, 0};
  }
  return std::nullopt;
}

}  // namespace

std::string EngineVersion::to_string() const {
  if (major == 0 && patch == 0 && minor > 100) return "b" + std::to_string(minor);  // a llama.cpp build
  return "v" + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::optional<EngineVersion> image_engine_version(EngineKind kind, std::string_view image) {
  image = image.substr(0, image.find('@'));  // "repo:tag@sha256:..." keeps its tag; a digest alone has none
  const size_t slash = image.rfind('/');
  const size_t colon = image.rfind(':');
  if (colon == std::string_view::npos || (slash != std::string_view::npos && colon < slash))
    return std::nullopt;
  const std::string_view tag = image.substr(colon + 1);
  if (kind == EngineKind::kLlamacpp) return llamacpp_build(tag);
  return semver(tag);
}

std::optional<ArgConflict> find_arg_conflict(const EngineProfile& profile,
                                             const std::vector<std::string>& args) {
  auto check = [&](const std::vector<OwnedFlag>& flags, bool unverified) -> std::optional<ArgConflict> {
    for (const auto& token : args) {
      if (token.empty() || token[0] != '-') continue;
      for (const auto& f : flags) {
        for (const auto& s : f.spellings) {
          if (matches(profile.grammar, token, s))
            return ArgConflict{token, f.spellings.front(), f.field, unverified};
        }
      }
    }
    return std::nullopt;
  };
  if (auto c = check(profile.owned, false)) return c;
  return check(profile.unverified_inputs, true);
}

const EngineProfile& engine_profile(EngineKind kind, std::optional<EngineVersion> version) {
  const EngineProfile* best = nullptr;
  for (const auto& p : engine_profiles()) {
    if (p.kind != kind) continue;
    if (!version || p.since <= *version) best = &p;  // rows are oldest first: the last that applies
  }
  if (!best) {  // older than every row: the oldest one
    for (const auto& p : engine_profiles()) {
      if (p.kind == kind) return p;
    }
  }
  return *best;
}

}  // namespace infergate::op::api
