// Model directory access: openat with O_NOFOLLOW, mmap, or read-while-hashing into anonymous memory.
#include "infergate/runtime/model/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace infergate::runtime::model {
namespace fs = std::filesystem;

namespace {
constexpr size_t kReadChunk = 8u << 20;
}

MappedFile::MappedFile(MappedFile&& o) noexcept : addr_(o.addr_), size_(o.size_), copied_(o.copied_) {
  o.addr_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    this->~MappedFile();
    addr_ = o.addr_;
    size_ = o.size_;
    copied_ = o.copied_;
    o.addr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (addr_ && size_) munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

Status check_plain_name(std::string_view name, std::string_view what) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(what) + ": '" + std::string(name) +
                     "' is not a plain file name in the model directory",
                 "UnsafePath")
        .with_detail("file", std::string(name));
  }
  return ok_status();
}

Result<ModelDirectory> ModelDirectory::open(const fs::path& dir, DirectoryOptions options) {
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  if (options.refuse_symlinks) flags |= O_NOFOLLOW;
  int fd = ::open(dir.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP || (err == ENOTDIR && options.refuse_symlinks && fs::is_symlink(dir))) {
      return Error(ErrorCode::kPermissionDenied,
                   dir.string() + ": the model directory is a symlink; symlinks are refused", "Symlink")
          .with_detail("file", dir.string());
    }
    return errno_error("opening model directory " + dir.string(), err);
  }
  ModelDirectory d;
  d.path_ = dir;
  d.dir_fd_ = UniqueFd(fd);
  d.options_ = options;
  d.files_read_ = std::make_shared<FilesRead>();
  return d;
}

bool ModelDirectory::exists(std::string_view name) const {
  struct stat st;
  return fstatat(dir_fd_.get(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<std::vector<std::string>> ModelDirectory::list() const {
  int fd = ::openat(dir_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("listing " + path_.string(), errno);
  DIR* d = fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return errno_error("listing " + path_.string(), err);
  }
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Result<UniqueFd> ModelDirectory::open_file(std::string_view name, uint64_t* size) const {
  INFERGATE_RETURN_IF_ERROR(check_plain_name(name, path_.string()));
  std::string n(name);
  // O_NONBLOCK so that a FIFO is refused rather than waited on.
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  if (options_.refuse_symlinks) flags |= O_NOFOLLOW;
  int fd = ::openat(dir_fd_.get(), n.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP) {
      return Error(ErrorCode::kPermissionDenied,
                   n + ": is a symlink; symlinks in a model directory are refused", "Symlink")
          .with_detail("file", n);
    }
    return errno_error("opening " + n, err);
  }
  UniqueFd f(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return errno_error("stat " + n, errno);
  if (!S_ISREG(st.st_mode)) {
    return Error(ErrorCode::kInvalidArgument, n + ": not a regular file", "NotRegularFile")
        .with_detail("file", n);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return f;
}

Result<MappedFile> ModelDirectory::map(std::string_view name) const {
  return map_capped(name, UINT64_MAX, options_.hasher);
}

Result<MappedFile> ModelDirectory::map(std::string_view name, LoadHasher* hasher) const {
  return map_capped(name, UINT64_MAX, hasher);
}

std::vector<std::string> ModelDirectory::files_read() const {
  std::lock_guard<std::mutex> lock(files_read_->mu);
  return files_read_->names;
}

Result<MappedFile> ModelDirectory::map_capped(std::string_view name, uint64_t max_bytes,
                                              LoadHasher* hasher) const {
  uint64_t size = 0;
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_file(name, &size));
  std::string n(name);
  if (size > max_bytes) {
    return Error(ErrorCode::kResourceExhausted,
                 n + ": " + std::to_string(size) + " bytes is more than the limit of " +
                     std::to_string(max_bytes),
                 "FileTooLarge")
        .with_detail("file", n);
  }
  MappedFile out;
  {
    std::lock_guard<std::mutex> lock(files_read_->mu);
    files_read_->names.push_back(n);
  }
  if (size > SIZE_MAX / 2) return Error(ErrorCode::kInvalidArgument, n + ": file too large", "FileTooLarge");
  if (!hasher) {
    if (size == 0) return out;
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) return errno_error("mapping " + n, errno);
    out.addr_ = p;
    out.size_ = size;
    return out;
  }
  if (Status s = hasher->begin_file(n, size); !s.ok()) return std::move(s).error().context(n);
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return errno_error("allocating " + std::to_string(size) + " bytes for " + n, errno);
    // No MADV_HUGEPAGE: it halves the page faults but, with THP defrag on "madvise", the first large
    // load stalled for seconds in compaction (measured on a busy 24 GiB machine).
    out.addr_ = p;
    out.size_ = size;
    out.copied_ = true;
  }
  // Reading and hashing overlap: this thread reads chunk k+1 while a helper hands chunk k to the
  // hasher (in order, one call at a time), so the load costs about max(read, hash), not the sum.
  uint8_t* dst = static_cast<uint8_t*>(out.addr_);
  std::mutex mu;
  std::condition_variable cv;
  uint64_t readable = 0;  // bytes read so far (guarded by mu)
  bool finished = false;  // no more bytes will come (guarded by mu)
  std::thread feeder([&] {
    uint64_t fed = 0;
    while (true) {
      uint64_t upto;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return readable > fed || finished; });
        upto = readable;
        if (upto == fed && finished) return;
      }
      hasher->update({dst + fed, static_cast<size_t>(upto - fed)});
      fed = upto;
    }
  });
  auto publish = [&](uint64_t n_read, bool last) {
    {
      std::lock_guard<std::mutex> lock(mu);
      readable = n_read;
      finished = finished || last;
    }
    cv.notify_one();
  };
  uint64_t done = 0;
  Status read_status;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kReadChunk, size - done));
    ssize_t r = ::read(fd.get(), dst + done, want);
    if (r < 0) {
      if (errno == EINTR) continue;
      read_status = errno_error("reading " + n, errno);
      break;
    }
    if (r == 0) {
      read_status = Error(ErrorCode::kDataLoss,
                          n + ": file shrank while being read (" + std::to_string(done) + " of " +
                              std::to_string(size) + " bytes)",
                          "FileChanged")
                        .with_detail("file", n);
      break;
    }
    done += static_cast<uint64_t>(r);
    publish(done, false);
  }
  publish(done, true);
  feeder.join();
  if (!read_status.ok()) return std::move(read_status).error();
  uint8_t extra;
  ssize_t r;
  do {
    r = ::read(fd.get(), &extra, 1);
  } while (r < 0 && errno == EINTR);
  if (r != 0) {
    return Error(ErrorCode::kDataLoss, n + ": file grew while being read", "FileChanged")
        .with_detail("file", n);
  }
  if (Status s = hasher->end_file(); !s.ok()) return std::move(s).error().context(n);
  if (out.addr_) mprotect(out.addr_, out.size_, PROT_READ);
  return out;
}

Result<std::string> ModelDirectory::read(std::string_view name, size_t max_bytes) const {
  INFERGATE_ASSIGN_OR_RETURN(MappedFile f, map_capped(name, max_bytes, options_.hasher));
  auto b = f.bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace infergate::runtime::model
