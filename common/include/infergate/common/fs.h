// File utilities: owned descriptors, capped reads, atomic writes, temporary directories.
// Every function reports errors with the path it was working on; none throws.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Opens for reading with O_CLOEXEC (plus `extra_flags`, e.g. O_NOFOLLOW).
Result<UniqueFd> open_read(const std::filesystem::path& path, int extra_flags = 0);

// Reads a whole file; refuses one larger than max_bytes before reading it.
Result<std::string> read_file(const std::filesystem::path& path, size_t max_bytes = 64u << 20);

// Writes `content` to `path` atomically: a temporary file in the same directory, fsync, rename,
// fsync of the directory. A reader sees the old file or the new one, never a half-written one.
Status write_file_atomic(const std::filesystem::path& path, std::string_view content, mode_t mode = 0644);

// Writes all of `data` to fd, retrying short writes and EINTR.
Status write_all(int fd, std::string_view data, std::string_view what);
// Reads exactly `size` bytes at `offset` (pread), retrying short reads; fails on early EOF.
Status read_exact_at(int fd, void* buf, size_t size, uint64_t offset, std::string_view what);

// fsyncs a directory so that a rename inside it is durable.
Status fsync_dir(const std::filesystem::path& dir);

// A directory created under `parent` (or the system temp dir) and removed, recursively, on
// destruction unless released.
class TempDir {
 public:
  static Result<TempDir> create(std::string_view prefix = "infergate",
                                const std::filesystem::path& parent = {});
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir& operator=(TempDir&& o) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::filesystem::path& path() const { return path_; }
  // Keeps the directory: the caller now owns it.
  std::filesystem::path release();

 private:
  explicit TempDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

}  // namespace infergate
