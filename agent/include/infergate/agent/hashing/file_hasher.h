// Hashing one file of the artifact safely and fast: opened beneath the root without following links
// or blocking, checked to be the file the walk saw, hashed through a read-only mapping (no copy out of
// the page cache), and refused if it changed while it was hashed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>

#include "infergate/agent/hashing/tree.h"
#include "infergate/common/result.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {

// Bytes handed to SHA-256 per call, and how often progress and cancellation are looked at.
inline constexpr uint64_t kHashChunkBytes = 1u << 20;
// Bytes mapped at a time: bounded so that a huge shard does not need a huge mapping.
inline constexpr uint64_t kHashWindowBytes = 16u << 20;

struct HashOptions {
  // Incremented by the size of every chunk hashed (progress). May be null.
  std::atomic<uint64_t>* bytes_hashed = nullptr;
  // When it becomes true, hashing stops at the next chunk with a Cancelled error. May be null.
  const std::atomic<bool>* cancel = nullptr;
  // Called after each chunk with the file and how many of its bytes are hashed so far. May be empty.
  std::function<void(const FileInfo& file, uint64_t hashed)> after_chunk;
};

// The bytes of a file one digest covers: all of it, or [offset, offset + length) (an OMS shard).
struct ByteRange {
  uint64_t offset = 0;
  std::optional<uint64_t> length;  // unset: to the end of the file
};

// Hashes `file` (found by walk_tree beneath root_fd), or the `range` of it (which must lie within the
// size the walk saw; the whole file is still checked for changes).
// Refuses: SpecialFile (it is no longer a regular file), FileChanged (another inode, or its size,
// mtime or ctime differ from the walk's or change while it is hashed, or it shrinks under the
// mapping), Symlink, MissingFile, PermissionDenied, IoError. Cancelled errors carry no reason.
// Thread-safe: any number of files may be hashed at once from different threads.
Result<Sha256Digest> hash_file(int root_fd, const FileInfo& file, const HashOptions& options = {},
                               const ByteRange& range = {});

}  // namespace infergate::agent
