// SHA256SUMS parsing (strict, coreutils-compatible) and writing (byte-for-byte coreutils output).
#include "infergate/common/manifest.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "infergate/common/encoding.h"

namespace infergate {
namespace {

constexpr std::string_view kTagPrefix = "SHA256 (";
constexpr std::string_view kTagInfix = ") = ";

Error malformed(size_t line_no, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument,
               "SHA256SUMS line " + std::to_string(line_no) + ": " + std::string(why), "ManifestMalformed");
}

// Removes coreutils' escapes; nullopt-like failure reported as false.
bool unescape(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 1 == in.size()) return false;
    switch (in[++i]) {
      case '\\': out->push_back('\\'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      default: return false;
    }
  }
  return true;
}

bool needs_escape(std::string_view name) { return name.find_first_of("\\\n\r") != std::string_view::npos; }

void append_escaped(std::string* out, std::string_view name) {
  for (char c : name) {
    switch (c) {
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      default: out->push_back(c);
    }
  }
}

bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_hex64(std::string_view s) { return s.size() == 64 && std::all_of(s.begin(), s.end(), is_hex_digit); }

Error unsafe_path(std::string_view name, const std::string& why) {
  // The name may hold control characters; keep the message printable and bounded.
  std::string shown;
  for (char c : name.substr(0, 200)) {
    shown.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (name.size() > 200) shown.append("...");
  return Error(ErrorCode::kInvalidArgument, "unsafe path \"" + shown + "\": " + why, "UnsafePath")
      .with_detail("file", shown);
}

}  // namespace

Result<std::string> canonical_manifest_path(std::string_view name) {
  std::string_view p = name;
  if (p.substr(0, 2) == "./") p.remove_prefix(2);
  if (p.empty()) return unsafe_path(name, "empty name");
  if (p.size() > kMaxManifestPathBytes) {
    return unsafe_path(name, "longer than " + std::to_string(kMaxManifestPathBytes) + " bytes");
  }
  if (p.front() == '/') return unsafe_path(name, "absolute path");
  if (p.back() == '/') return unsafe_path(name, "ends with '/'");
  if (p.find('\0') != std::string_view::npos) return unsafe_path(name, "contains a NUL byte");
  // Names travel in JSON (the signed file sizes, the reports), which holds only Unicode text.
  if (!valid_utf8(p)) return unsafe_path(name, "not valid UTF-8");
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    std::string_view comp = p.substr(start, end - start);
    if (comp.empty()) return unsafe_path(name, "empty path component (\"//\")");
    if (comp == ".") return unsafe_path(name, "\".\" component");
    if (comp == "..") return unsafe_path(name, "\"..\" component");
    if (comp.size() > kMaxPathComponentBytes) {
      return unsafe_path(name,
                         "a component longer than " + std::to_string(kMaxPathComponentBytes) + " bytes");
    }
    start = end + 1;
  }
  return std::string(p);
}

Result<Manifest> Manifest::parse(std::string_view text) {
  if (text.size() > kMaxManifestBytes) {
    return Error(ErrorCode::kResourceExhausted,
                 "SHA256SUMS: " + std::to_string(text.size()) + " bytes is over the limit of " +
                     std::to_string(kMaxManifestBytes),
                 "ManifestTooLarge");
  }
  std::vector<ManifestEntry> entries;
  std::unordered_map<std::string, size_t> seen;  // path -> line number
  size_t pos = 0, line_no = 0;
  std::string name;
  while (pos < text.size()) {
    ++line_no;
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) return malformed(line_no, "empty line");
    if (line.find('\0') != std::string_view::npos) return malformed(line_no, "contains a NUL byte");

    bool escaped = line.front() == '\\';
    if (escaped) line.remove_prefix(1);
    std::string_view hex, raw_name;
    if (line.substr(0, kTagPrefix.size()) == kTagPrefix) {
      // BSD form: the name may itself hold ") = ", so the digest is taken from the end.
      if (line.size() < kTagPrefix.size() + kTagInfix.size() + 64 + 1) {
        return malformed(line_no, "a tagged line needs \"SHA256 (name) = <64 hex digits>\"");
      }
      hex = line.substr(line.size() - 64);
      std::string_view infix = line.substr(line.size() - 64 - kTagInfix.size(), kTagInfix.size());
      if (infix != kTagInfix || !is_hex64(hex)) {
        return malformed(line_no, "a tagged line needs \"SHA256 (name) = <64 hex digits>\"");
      }
      raw_name = line.substr(kTagPrefix.size(), line.size() - 64 - kTagInfix.size() - kTagPrefix.size());
    } else {
      size_t digits = 0;
      while (digits < line.size() && is_hex_digit(line[digits])) ++digits;
      if (digits != 64) {
        return malformed(line_no, digits < line.size() && digits < 64 && line[digits] != ' '
                                      ? "the digest holds a character that is not a hex digit"
                                      : "the digest has " + std::to_string(digits) + " hex digits, not 64");
      }
      if (line.size() < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) {
        return malformed(line_no, "expected \"<64 hex digits>  <name>\" or \"<64 hex digits> *<name>\"");
      }
      hex = line.substr(0, 64);
      raw_name = line.substr(66);
    }
    if (escaped) {
      if (!unescape(raw_name, &name)) return malformed(line_no, "invalid escape in the name");
    } else {
      name.assign(raw_name);
    }
    auto path = canonical_manifest_path(name);
    if (!path.ok()) return std::move(path).error().context("SHA256SUMS line " + std::to_string(line_no));
    if (*path == kManifestFileName || *path == kReleaseFileName || *path == kBundleFileName) {
      return malformed(line_no, "lists " + *path + ", which is never part of a manifest");
    }
    auto digest = Sha256Digest::from_hex(hex);
    if (!digest.ok()) return malformed(line_no, digest.error().message());
    auto [it, inserted] = seen.emplace(*path, line_no);
    if (!inserted) {
      return Error(ErrorCode::kInvalidArgument,
                   "SHA256SUMS line " + std::to_string(line_no) + ": \"" + *path +
                       "\" is already listed on line " + std::to_string(it->second),
                   "DuplicateEntry")
          .with_detail("file", *path);
    }
    entries.push_back(ManifestEntry{std::move(path).value(), *digest});
  }
  Manifest m;
  std::sort(entries.begin(), entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });
  m.entries_ = std::move(entries);
  return m;
}

Result<Manifest> Manifest::from_entries(std::vector<ManifestEntry> entries) {
  for (const auto& e : entries) {
    auto canonical = canonical_manifest_path(e.path);
    if (!canonical.ok()) return std::move(canonical).error();
    if (*canonical != e.path) return unsafe_path(e.path, "not canonical (it starts with \"./\")");
  }
  std::sort(entries.begin(), entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].path == entries[i - 1].path) {
      return Error(ErrorCode::kInvalidArgument, "\"" + entries[i].path + "\" is listed twice",
                   "DuplicateEntry")
          .with_detail("file", entries[i].path);
    }
  }
  Manifest m;
  m.entries_ = std::move(entries);
  return m;
}

const ManifestEntry* Manifest::find(std::string_view path) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), path,
                             [](const ManifestEntry& e, std::string_view p) { return e.path < p; });
  if (it == entries_.end() || it->path != path) return nullptr;
  return &*it;
}

std::string manifest_line(std::string_view path, const Sha256Digest& digest) {
  std::string out;
  out.reserve(path.size() + 72);
  bool esc = needs_escape(path);
  if (esc) out.push_back('\\');
  out.append(digest.hex()).append("  ./");
  if (esc) {
    append_escaped(&out, path);
  } else {
    out.append(path);
  }
  out.push_back('\n');
  return out;
}

std::string Manifest::to_text() const {
  // Sorting "./a" strings byte-wise equals sorting "a" byte-wise: the prefix is shared. std::string
  // compares like memcmp (unsigned bytes), which is what `LC_ALL=C sort` does.
  std::string out;
  for (const auto& e : entries_) out.append(manifest_line(e.path, e.digest));
  return out;
}

}  // namespace infergate
