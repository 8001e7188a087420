// The release statement: an in-toto Statement v1 whose one subject is SHA256SUMS and whose predicate
// (type https://infergate.dev/release/v1) says which model, which version, which weight format, when
// it was made, until when it is valid, and the size of every listed file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "infergate/common/clock.h"
#include "infergate/common/result.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {

inline constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr std::string_view kReleasePredicateType = "https://infergate.dev/release/v1";
inline constexpr size_t kMaxNameBytes = 253;

struct ReleaseStatement {
  Sha256Digest manifest_digest;        // subject[0]: {"name": "SHA256SUMS", "digest": {"sha256": ...}}
  std::string name;                    // predicate.name
  int64_t version = 0;                 // predicate.version: a JSON integer >= 0, monotonic per name
  std::string weight_format;           // predicate.weightFormat: "int8", "int4", "fp16", "bf16", ...
  WallTime created_at;                 // predicate.createdAt (RFC 3339)
  std::optional<WallTime> expires_at;  // predicate.expiresAt (RFC 3339), optional
  // predicate.fileSizes: canonical path -> size in bytes, one per manifest entry. Signed, so that a
  // truncated or padded file is refused from its size alone, before any byte is hashed.
  std::map<std::string, uint64_t> file_sizes;
};

// A model name: 1 to 253 bytes of [A-Za-z0-9._:/@+-]. UsageError otherwise.
Status validate_release_name(std::string_view name);
// A weight format: 1 to 32 bytes of [a-z0-9_]. UsageError otherwise.
Status validate_weight_format(std::string_view format);

// Compact JSON; the bytes that are signed.
std::string serialize_statement(const ReleaseStatement& statement);

// Parses a statement payload. Refuses (StatementInvalid) anything that is not exactly such a
// statement: wrong _type or predicateType, not one subject named SHA256SUMS with a 64-hex sha256, a
// name or weight format outside the rules above, a version that is not a non-negative JSON integer,
// bad times (expiresAt not after createdAt), non-canonical or duplicate fileSizes paths, negative
// or non-integer sizes, duplicate JSON keys anywhere. Never crashes (fuzzed).
Result<ReleaseStatement> parse_statement(std::string_view payload);

}  // namespace infergate::agent
