// SHA256SUMS manifests: a strict parser that accepts what GNU coreutils' sha256sum writes, and a
// writer that produces exactly what `find . -type f ! -name SHA256SUMS -print0 | LC_ALL=C sort -z |
// xargs -0 sha256sum` prints. Used by the agent (manifest, sign, verify) and by the runtime's
// hash-while-load, which looks up the digest of each file it loads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/common/sha256.h"

namespace infergate {

// The manifest's own file name, and the signed release statement written after it. Neither is ever
// listed in a manifest (the first cannot hash itself, the second is written after the manifest).
inline constexpr std::string_view kManifestFileName = "SHA256SUMS";
inline constexpr std::string_view kReleaseFileName = "release.dsse.json";
// The OpenSSF model signing format's bundle (a Sigstore bundle), never part of a manifest either.
inline constexpr std::string_view kBundleFileName = "model.sig";

// Caps that keep a hostile manifest from costing unbounded memory.
inline constexpr size_t kMaxManifestBytes = 16u << 20;
inline constexpr size_t kMaxManifestPathBytes = 4096;
inline constexpr size_t kMaxPathComponentBytes = 255;

struct ManifestEntry {
  std::string path;  // canonical relative path: "shards/model-00001.safetensors" (no "./")
  Sha256Digest digest;
  friend bool operator==(const ManifestEntry&, const ManifestEntry&) = default;
};

// A parsed manifest. Entries are kept sorted by path (byte order), one per path.
//
// Accepted lines (always strict: one bad line refuses the whole manifest):
//   <64 hex> SP SP <name> LF          coreutils' default ("text") form
//   <64 hex> SP '*' <name> LF         coreutils' binary marker (it changes nothing on GNU)
//   SHA256 (<name>) = <64 hex> LF     coreutils' --tag (BSD) form
// Either form may start with '\', in which case the name is escaped as coreutils escapes it:
// "\\" for a backslash, "\n" for a newline, "\r" for a carriage return; any other escape is refused.
// A line may end in CR LF; the last line may lack its LF. Hex digits may be of either case.
// Refused, each with its reason word:
//   ManifestMalformed  any other line shape (empty lines, comments, a 63- or 65-digit digest, a
//                      non-hex character, a NUL byte, one space instead of two), a name that is the
//                      top-level SHA256SUMS, release.dsse.json or model.sig
//   UnsafePath         an absolute name, a "." or ".." component, an empty component ("a//b"), a
//                      trailing "/", a name that is not UTF-8 (names travel in JSON), a name over
//                      kMaxManifestPathBytes or a component over 255 bytes
//   DuplicateEntry     the same path twice ("./a" and "a" are the same path), same digest or not
//   ManifestTooLarge   more than kMaxManifestBytes of text (checked before anything else)
// A name may start with one "./" (find prints names that way); it is not part of the path.
// An empty text is a valid, empty manifest: whether that is acceptable is the caller's decision.
class Manifest {
 public:
  static Result<Manifest> parse(std::string_view text);
  // Builds a manifest from entries whose paths are canonical (see canonical_manifest_path).
  // Refuses duplicates and non-canonical paths with the reasons above.
  static Result<Manifest> from_entries(std::vector<ManifestEntry> entries);

  const std::vector<ManifestEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // The entry for a canonical path, or nullptr. O(log n).
  const ManifestEntry* find(std::string_view path) const;

  // The manifest in coreutils' default form, one line per entry in byte order of "./<path>":
  // byte-for-byte what `find . -type f ... | LC_ALL=C sort -z | xargs -0 sha256sum` prints for the
  // same files. Names holding '\', LF or CR are escaped, and their line starts with '\'.
  std::string to_text() const;

 private:
  std::vector<ManifestEntry> entries_;
};

// The canonical form of a manifest name: strips one leading "./" and checks the rest (UnsafePath
// as above). "./a/b" -> "a/b"; "a//b", "../x", "/etc/passwd", "a/./b", "" -> error.
Result<std::string> canonical_manifest_path(std::string_view name);

// One manifest line for `path` (canonical), exactly as sha256sum prints "./<path>", with its LF.
std::string manifest_line(std::string_view path, const Sha256Digest& digest);

}  // namespace infergate
