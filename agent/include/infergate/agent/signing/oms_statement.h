// The OpenSSF model signing (OMS) v1.0 statement: an in-toto Statement v1 whose one subject is the
// model (its name and a SHA-256 over every resource digest) and whose predicate
// (https://model_signing/signature/v1.0) lists every file, or every shard of every file, with its
// digest, and says how the model was serialized (whole files or shards, the hash, whether symbolic
// links were followed, which paths were left out).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {

inline constexpr std::string_view kOmsPredicateType = "https://model_signing/signature/v1.0";
inline constexpr size_t kMaxOmsResources = 1'000'000;
inline constexpr size_t kMaxOmsIgnorePaths = 1024;

enum class OmsMethod { kFiles, kShards };

struct OmsSerialization {
  OmsMethod method = OmsMethod::kFiles;
  uint64_t shard_size = 0;  // kShards: the size of every shard but a file's last (1 GB by default)
  bool allow_symlinks = false;
  // Paths relative to the model root, as written; a path and everything below it are not part of the
  // model (see oms_ignored). Entries that are absolute or hold ".." can never match and stay inert.
  std::vector<std::string> ignore_paths;
};

// One resource: a whole file (kFiles) or the bytes [start, end) of one (kShards, "path:start:end").
struct OmsResource {
  std::string path;  // canonical relative path
  uint64_t start = 0;
  uint64_t end = 0;  // kShards only
  Sha256Digest digest;
};

struct OmsStatement {
  std::string model_name;    // subject[0].name: informative in the format (the directory's name)
  Sha256Digest root_digest;  // subject[0].digest.sha256
  OmsSerialization serialization;
  std::vector<OmsResource> resources;  // in the order listed
};

// Parses an OMS v1.0 statement payload. Refuses (StatementInvalid unless said otherwise):
//   duplicate JSON keys anywhere; another _type or predicateType (v0.1 "Digests" statements too);
//   not exactly one subject with a name and a 64-hex sha256; a serialization method other than files
//   or shards; a hash_type other than sha256 (blake2b and blake3 bundles are refused, named);
//   allow_symlinks missing or not a boolean; a shard_size that is not a positive integer; more than
//   kMaxOmsIgnorePaths ignore paths or kMaxOmsResources resources; a resource whose algorithm is not
//   "sha256" (files) or "sha256-sharded-<shard_size>" (shards), whose digest is not 64 hex digits, or
//   whose name is not a canonical relative path (UnsafePath) or, for shards, "path:start:end" in
//   canonical decimal with start < end and end - start <= shard_size; the same resource twice
//   (DuplicateEntry); shards of a file that do not tile it from 0 in shard_size steps; and resource
//   digests that do not hash to the subject digest (the statement is not consistent with itself).
// Fields beyond serialization and resources are ignored, as v1.0 asks. Never crashes (fuzzed).
Result<OmsStatement> parse_oms_statement(std::string_view payload);

// SHA-256 over the resource digests' raw bytes, in order: the subject digest.
Sha256Digest oms_root_digest(const std::vector<OmsResource>& resources);

// Sorts resources as the reference implementation lists them: by path compared component by
// component, then by start offset.
void sort_oms_resources(std::vector<OmsResource>& resources);

// The statement as compact JSON (the signed payload); root_digest is written as given.
std::string serialize_oms_statement(const OmsStatement& statement);

// The resource name as the predicate writes it: "path" or "path:start:end".
std::string oms_resource_name(const OmsResource& r, OmsMethod method);

// True when `path` (canonical, relative) is an ignored path or lies below one: the path-prefix rule
// of the reference implementation, compared component by component.
bool oms_ignored(std::string_view path, const std::vector<std::string>& ignore_paths);

}  // namespace infergate::agent
