// File utilities.
#include "infergate/common/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <vector>

namespace infergate {

namespace fs = std::filesystem;

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> open_read(const fs::path& path, int extra_flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno_error("open " + path.string(), errno);
  return UniqueFd(fd);
}

Status read_exact_at(int fd, void* buf, size_t size, uint64_t offset, std::string_view what) {
  auto* p = static_cast<char*>(buf);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + std::string(what), errno);
    }
    if (n == 0) return Error(ErrorCode::kDataLoss, "read " + std::string(what) + ": unexpected end of file");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}

Result<std::string> read_file(const fs::path& path, size_t max_bytes) {
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_read(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + path.string(), errno);
  if (!S_ISREG(st.st_mode)) return invalid_argument(path.string() + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Error(ErrorCode::kResourceExhausted,
                 path.string() + ": " + std::to_string(st.st_size) + " bytes is over the limit of " +
                     std::to_string(max_bytes),
                 "TooLarge");
  }
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  // Read until EOF rather than trusting st_size alone: the file may have changed.
  for (;;) {
    if (got == out.size()) {
      if (out.size() >= max_bytes + 1) break;
      out.resize(std::min(max_bytes + 1, out.size() * 2 + 4096));
    }
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + path.string(), errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    return Error(ErrorCode::kResourceExhausted,
                 path.string() + ": over the limit of " + std::to_string(max_bytes) + " bytes", "TooLarge");
  }
  out.resize(got);
  return out;
}

Status write_all(int fd, std::string_view data, std::string_view what) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write " + std::string(what), errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ok_status();
}

Status fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("open directory " + dir.string(), errno);
  UniqueFd guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) return errno_error("fsync " + dir.string(), errno);
  return ok_status();
}

Status write_file_atomic(const fs::path& path, std::string_view content, mode_t mode) {
  fs::path dir = path.parent_path();
  std::string tmpl =
      (dir.empty() ? fs::path(".") : dir).string() + "/." + path.filename().string() + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return errno_error("create temporary file for " + path.string(), errno);
  UniqueFd guard(fd);
  auto fail = [&](Error e) -> Status {
    ::unlink(name.data());
    return e;
  };
  if (::fchmod(fd, mode) != 0) return fail(errno_error("chmod " + path.string(), errno));
  if (auto st = write_all(fd, content, path.string()); !st.ok()) return fail(std::move(st).error());
  if (::fsync(fd) != 0) return fail(errno_error("fsync " + path.string(), errno));
  guard.reset();
  if (::rename(name.data(), path.c_str()) != 0)
    return fail(errno_error("rename into " + path.string(), errno));
  return fsync_dir(dir.empty() ? fs::path(".") : dir);
}

Result<TempDir> TempDir::create(std::string_view prefix, const fs::path& parent) {
  std::error_code ec;
  fs::path base = parent.empty() ? fs::temp_directory_path(ec) : parent;
  if (ec) base = "/tmp";
  std::string tmpl = (base / (std::string(prefix) + ".XXXXXX")).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr)
    return errno_error("create temporary directory in " + base.string(), errno);
  return TempDir(fs::path(name.data()));
}

TempDir& TempDir::operator=(TempDir&& o) noexcept {
  if (this != &o) {
    this->~TempDir();
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  // Make read-only trees removable (tests build such trees on purpose).
  for (auto it = fs::recursive_directory_iterator(path_, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  }
  ::chmod(path_.c_str(), 0700);
  fs::remove_all(path_, ec);
}

fs::path TempDir::release() {
  fs::path p = std::move(path_);
  path_.clear();
  return p;
}

}  // namespace infergate
