// The artifact tree against an OMS statement's resources, with the fail-closed rules SHA256SUMS gets:
// every covered file listed, every listed file present, nothing changed, and links only as the
// statement's allow_symlinks says. Which files are covered is exactly what the format defines: every
// regular file except the paths in serialization.ignore_paths (and below them) and the bundle itself.
#pragma once

#include <string_view>
#include <vector>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/signing/oms_statement.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// The regular files the statement covers, sorted by path. With allow_symlinks, a link to a regular
// file beneath the root counts as that file (see WalkFilter); otherwise any link is refused (Symlink).
Result<std::vector<FileInfo>> oms_covered_files(int root_fd, const OmsSerialization& serialization,
                                                const WalkLimits& limits = {});

// Checks the tree, in this order, stopping at the first refusal:
//   the walk (Symlink, SpecialFile, LimitExceeded, PermissionDenied, IoError);
//   EmptyRelease when the statement lists nothing;
//   MissingFile (a listed file absent, in path order), UnlistedFile (a covered file not listed; under
//   shards an empty file has no shard, so it is covered without being listed, as the format defines);
//   SizeMismatch (shards: a file's size is not where its last shard ends) before any byte is hashed;
//   DigestMismatch / FileChanged while hashing files (or shards) in parallel, largest first.
// TreeSummary.sizes holds each listed file's size.
Result<TreeSummary> check_oms_tree(int root_fd, const OmsStatement& statement,
                                   const TreeOptions& options = {});

// The covered files' resources for signing: one per file (files) or per shard_size bytes of each
// non-empty file (shards), hashed in parallel and sorted as the reference implementation lists them.
Result<std::vector<OmsResource>> build_oms_resources(int root_fd, const OmsSerialization& serialization,
                                                     const TreeOptions& options, TreeSummary* summary);

}  // namespace infergate::agent
