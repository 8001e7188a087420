// Walking an artifact tree without ever following a symbolic link or opening anything that is not a
// regular file: every open is relative to a directory descriptor, with O_NOFOLLOW on each component
// and O_NONBLOCK so that a FIFO can never block us.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// The artifact directory, opened once. DIR's last component must not be a symbolic link (Symlink);
// the components above it are resolved by the kernel as usual (they are the mount, not the
// artifact). A missing DIR or one that is not a directory is ArtifactDirInvalid.
class ArtifactRoot {
 public:
  static Result<ArtifactRoot> open(const std::filesystem::path& dir);
  int fd() const { return fd_.get(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  ArtifactRoot(UniqueFd fd, std::filesystem::path path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::filesystem::path path_;
};

// A regular file found by the walk, with the identity that later opens are checked against.
struct FileInfo {
  std::string path;  // canonical relative path, '/'-separated
  uint64_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  struct timespec mtime {};
  struct timespec ctime {};
  // Reached through a symbolic link (only where a WalkFilter resolves links): `path` is the link's
  // name, the identity and size are its target's, and opens resolve it beneath the root.
  bool via_link = false;

  static FileInfo from_stat(std::string path, const struct stat& st);
};

// True when both stats describe the same, unchanged file: device, inode, size, mtime and ctime.
bool same_file_state(const struct stat& a, const struct stat& b);
bool same_file_state(const FileInfo& a, const struct stat& b);

struct WalkLimits {
  size_t max_files = 1'000'000;  // regular files and directories together
  size_t max_depth = 64;
};

// What a walk leaves out or looks through (the OMS format's ignore_paths and allow_symlinks).
struct WalkFilter {
  // Entries for which this is true are never looked at, nor anything below them. May be empty.
  std::function<bool(std::string_view path)> skip;
  // A symbolic link to a regular file that resolves beneath the root (openat2 RESOLVE_BENEATH, no
  // magic links) is walked as that file (FileInfo::via_link). A link to a directory, a dangling link
  // and one that leaves the root are still refused (Symlink); their targets are never read.
  bool resolve_links = false;
};

// Every regular file beneath the root, sorted by path (byte order). Refuses, naming the entry:
// Symlink (any symbolic link, never followed, unless the filter resolves it), SpecialFile (FIFO,
// socket, device), LimitExceeded, PermissionDenied and IoError (a directory that cannot be read).
Result<std::vector<FileInfo>> walk_tree(int root_fd, const WalkLimits& limits = {},
                                        const WalkFilter& filter = {});

// Opens a file the walk found: open_beneath for regular entries, a RESOLVE_BENEATH resolution for
// FileInfo::via_link ones (Symlink when the link now leaves the root).
Result<UniqueFd> open_walked(int root_fd, const FileInfo& file);

// Opens a canonical relative path beneath root_fd: each directory component with
// O_NOFOLLOW|O_DIRECTORY, the last with `flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`.
// Errors come from file_errno_error (a symlink anywhere on the way is Symlink).
Result<UniqueFd> open_beneath(int root_fd, std::string_view path, int flags = O_RDONLY);

// Reads a small regular file beneath the root (release.dsse.json, SHA256SUMS, quantization.json).
// A symlink is Symlink, anything but a regular file is SpecialFile, an absent file is MissingFile,
// and a file over max_bytes is refused with `too_large` before it is read.
Result<std::string> read_small_file(int root_fd, std::string_view path, size_t max_bytes, Reason too_large);

}  // namespace infergate::agent
