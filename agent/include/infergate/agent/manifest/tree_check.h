// The artifact tree against its manifest: building SHA256SUMS from a tree, and checking a tree
// against SHA256SUMS (and, when verifying, against the signed file sizes).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "infergate/agent/hashing/parallel_hasher.h"
#include "infergate/agent/hashing/tree.h"
#include "infergate/common/manifest.h"
#include "infergate/common/result.h"

namespace infergate::agent {

struct TreeOptions {
  unsigned threads = 0;  // 0: available_cpus()
  WalkLimits limits;
  std::atomic<uint64_t>* bytes_hashed = nullptr;
  // Called once the walk is done and before any byte is hashed, with the bytes about to be hashed.
  std::function<void(uint64_t total_bytes)> before_hashing;
  std::function<void(const FileInfo& file, uint64_t hashed)> after_chunk;
};

struct TreeSummary {
  uint64_t files = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> sizes;  // canonical path -> size, for every listed file
};

// The files the manifest rule covers: every regular file of the tree except the top-level SHA256SUMS,
// release.dsse.json and model.sig (an OMS bundle, which may sit beside our release). A file named
// SHA256SUMS deeper in the tree is refused (UnlistedFile): `find ... ! -name SHA256SUMS` would leave
// it out, so no manifest could ever cover it.
Result<std::vector<FileInfo>> manifest_files(int root_fd, const WalkLimits& limits = {});

// The hasher's options for a tree check (threads, progress).
ParallelHashOptions parallel_hash_options(const TreeOptions& options);

// One merge of the walked files with the listed paths, both sorted by path (byte order): MissingFile
// for the first listed path without a file, then UnlistedFile for the first file that is not listed
// and not `may_be_unlisted` (which may be empty); `listed_in` names the list in messages.
// on_match(file, index into listed) is called for every pair, in order.
Status match_listed(std::vector<FileInfo>& files, const std::vector<std::string_view>& listed,
                    std::string_view listed_in, const std::function<bool(const FileInfo&)>& may_be_unlisted,
                    const std::function<void(FileInfo& file, size_t listed_index)>& on_match);

// Hashes every covered file and returns the manifest (sorted as sha256sum prints it). Refuses what
// the walk refuses (symlinks, special files) so that every manifest we write can also be verified.
Result<Manifest> build_manifest(int root_fd, const TreeOptions& options = {});

// Checks the tree against `manifest`, in this order, stopping at the first refusal:
//   the walk (Symlink, SpecialFile, LimitExceeded, PermissionDenied, IoError), then
//   MissingFile (a listed file absent, in path order), UnlistedFile (a covered file not listed), then
//   SizeMismatch for every file against `signed_sizes` (when given) before any byte is hashed, then
//   DigestMismatch / FileChanged while hashing in parallel.
Result<TreeSummary> check_tree(int root_fd, const Manifest& manifest,
                               const std::optional<std::map<std::string, uint64_t>>& signed_sizes,
                               const TreeOptions& options = {});

}  // namespace infergate::agent
