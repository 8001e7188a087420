// Reading the files of a model directory: memory-mapped (no copy) or, when a LoadHasher is given,
// each file read once front to back into anonymous memory while every byte is handed to the hasher,
// so that the bytes used are exactly the bytes hashed and nothing is read twice (several files may be
// read at once, each with its own hasher: LoadHasher::concurrent).
//
// Guarantees: only regular files are opened (a FIFO, socket or device is refused without blocking);
// with refuse_symlinks, the directory and every file are opened with O_NOFOLLOW (a symlink is refused,
// its target never opened); names are single path components. A file that changes size while it is
// being hashed is refused.
// Caveat: a mapped (unhashed) file that is truncated by someone else while mapped raises SIGBUS on
// access, as with any mmap reader; serve from a read-only volume, or hash while loading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/result.h"

namespace infergate::runtime::model {

// Receives the bytes of each file the loader reads, in order, each byte exactly once. The runtime's
// hash-while-load implements this with SHA-256 and compares against the verified manifest in
// end_file; an error from begin_file or end_file refuses the load. Calls never overlap, but update()
// runs on a helper thread (so hashing chunk k overlaps reading chunk k+1); begin_file and end_file run
// on the loading thread, before and after every update() of that file.
class LoadHasher {
 public:
  virtual ~LoadHasher() = default;
  // `name` is the file's path relative to the model directory, `size` its size when opened.
  virtual Status begin_file(std::string_view name, uint64_t size) = 0;
  virtual void update(std::span<const uint8_t> bytes) = 0;
  virtual Status end_file() = 0;
  // Another hasher for files read beside this one's: a loader that reads several files at once (the
  // shards of a checkpoint) gives each of its threads one, used as above, and what they check counts
  // as this hasher's. Null (the default): the loader reads its files one at a time.
  virtual std::unique_ptr<LoadHasher> concurrent() { return nullptr; }
};

// The bytes of one file: a read-only private mapping, or an anonymous mapping filled by read().
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  uint64_t size() const { return size_; }
  // True when the bytes were read (and hashed) into anonymous memory rather than mapped.
  bool copied() const { return copied_; }

 private:
  friend class ModelDirectory;
  void* addr_ = nullptr;
  size_t size_ = 0;
  bool copied_ = false;
};

struct DirectoryOptions {
  bool refuse_symlinks = true;
  LoadHasher* hasher = nullptr;  // not owned; may be null
};

// An open model directory. Files are opened relative to it (openat), by plain names.
class ModelDirectory {
 public:
  static Result<ModelDirectory> open(const std::filesystem::path& dir, DirectoryOptions options = {});

  const std::filesystem::path& path() const { return path_; }
  // True if `name` exists in the directory (as anything, a symlink included).
  bool exists(std::string_view name) const;
  // The names of the entries in the directory, sorted.
  Result<std::vector<std::string>> list() const;
  // The whole file, mapped or read-and-hashed.
  Result<MappedFile> map(std::string_view name) const;
  // The same, hashed by `hasher` instead of the directory's (one from its concurrent()), so that
  // several threads can read files at once.
  Result<MappedFile> map(std::string_view name, LoadHasher* hasher) const;
  // The directory's hasher (null when files are mapped).
  LoadHasher* hasher() const { return options_.hasher; }
  // A small file (JSON) as a string, refusing one larger than max_bytes; hashed like map().
  Result<std::string> read(std::string_view name, size_t max_bytes = 256u << 20) const;
  // Every file name handed to a hasher or mapped so far, in the order they were opened.
  std::vector<std::string> files_read() const;

 private:
  ModelDirectory() = default;
  Result<UniqueFd> open_file(std::string_view name, uint64_t* size) const;
  Result<MappedFile> map_capped(std::string_view name, uint64_t max_bytes, LoadHasher* hasher) const;

  struct FilesRead {
    std::mutex mu;
    std::vector<std::string> names;
  };
  std::filesystem::path path_;
  UniqueFd dir_fd_;
  DirectoryOptions options_;
  std::shared_ptr<FilesRead> files_read_;
};

// Refuses anything but a single, plain path component ("a.json"; not "", ".", "..", "a/b").
Status check_plain_name(std::string_view name, std::string_view what);

}  // namespace infergate::runtime::model
