// The no-follow tree walk and the descriptor-relative opens it is built on.
#include "infergate/agent/hashing/tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;

int retry_openat(int dirfd, const char* name, int flags) {
  int fd;
  do {
    fd = ::openat(dirfd, name, flags);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string p(dir);
  p.push_back('/');
  p.append(name);
  return p;
}

// O_NOFOLLOW|O_DIRECTORY on a symlink fails with ENOTDIR (not ELOOP): look at the entry itself.
bool is_symlink_at(int dirfd, const char* name) {
  struct stat st {};
  return ::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

Error special_file(std::string_view path, mode_t mode) {
  const char* kind = S_ISFIFO(mode)   ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "not a regular file";
  return refusal(Reason::kSpecialFile, std::string(path) + " is " + kind + " (never opened)")
      .with_detail("file", std::string(path));
}

// openat2 with RESOLVE_BENEATH: the kernel resolves every link on the way and refuses (EXDEV) any
// step out of root_fd, and "/proc/self/..."-style magic links (ELOOP). glibc 2.36 has no wrapper.
int open_resolved_beneath(int root_fd, const std::string& path) {
  struct open_how how {};
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = ::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how);
  } while (fd < 0 && errno == EINTR);
  return static_cast<int>(fd);
}

Error link_refused(const std::string& path, int err) {
  std::string why = err == EXDEV    ? "points outside the artifact directory"
                    : err == ENOENT ? "points to nothing"
                    : err == ENOSYS ? "cannot be resolved safely here (no openat2)"
                                    : "cannot be resolved (" + errno_text(err) + ")";
  return refusal(Reason::kSymlink, path + " is a symbolic link that " + why + " (never followed)")
      .with_detail("file", path);
}

struct Walker {
  const WalkLimits& limits;
  const WalkFilter& filter;
  int root_fd;
  std::vector<FileInfo> files;
  size_t seen = 0;

  // A link the filter lets us look through: walked as its target when that is a regular file
  // beneath the root.
  Status resolve_link(const std::string& path) {
    int fd = open_resolved_beneath(root_fd, path);
    if (fd < 0) return link_refused(path, errno);
    UniqueFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return file_errno_error("stat", path, errno);
    if (S_ISDIR(st.st_mode)) {
      return refusal(Reason::kSymlink, path +
                                           " is a symbolic link to a directory (never followed: the "
                                           "model signing format does not cover what lies below it)")
          .with_detail("file", path);
    }
    if (!S_ISREG(st.st_mode)) return special_file(path, st.st_mode);
    FileInfo f = FileInfo::from_stat(path, st);
    f.via_link = true;
    files.push_back(std::move(f));
    return ok_status();
  }

  Status walk(int dirfd, const std::string& dir_path, size_t depth) {
    if (depth > limits.max_depth) {
      return refusal(Reason::kLimitExceeded,
                     dir_path + ": deeper than " + std::to_string(limits.max_depth) + " directories")
          .with_detail("file", dir_path);
    }
    // fdopendir takes ownership of its descriptor: give it a duplicate so that ours stays ours.
    int dup_fd = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return file_errno_error("read directory", dir_path.empty() ? "." : dir_path, errno);
    DIR* d = ::fdopendir(dup_fd);
    if (d == nullptr) {
      int err = errno;
      ::close(dup_fd);
      return file_errno_error("read directory", dir_path.empty() ? "." : dir_path, err);
    }
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        int err = errno;
        if (err != 0) {
          ::closedir(d);
          return file_errno_error("read directory", dir_path.empty() ? "." : dir_path, err);
        }
        break;
      }
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      if (++seen > limits.max_files) {
        ::closedir(d);
        return refusal(Reason::kLimitExceeded,
                       "the tree holds more than " + std::to_string(limits.max_files) + " entries");
      }
      names.emplace_back(n);
    }
    ::closedir(d);
    // Sorted, so that the first problem reported is the same on every run.
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      std::string path = join(dir_path, name);
      if (filter.skip && filter.skip(path)) continue;
      struct stat st {};
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return file_errno_error("stat", path, errno);
      }
      if (S_ISLNK(st.st_mode) && filter.resolve_links) {
        INFERGATE_RETURN_IF_ERROR(resolve_link(path));
        continue;
      }
      if (S_ISLNK(st.st_mode)) {
        return refusal(Reason::kSymlink, path + " is a symbolic link (never followed)")
            .with_detail("file", path);
      }
      if (S_ISREG(st.st_mode)) {
        files.push_back(FileInfo::from_stat(path, st));
        continue;
      }
      if (!S_ISDIR(st.st_mode)) return special_file(path, st.st_mode);
      int sub = retry_openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        int err = errno;
        // Swapped for a link or a file since the stat above.
        if (err == ENOTDIR || err == ELOOP) {
          return refusal(Reason::kFileChanged, path + " was replaced while the tree was walked")
              .with_detail("file", path);
        }
        return file_errno_error("open directory", path, err);
      }
      UniqueFd guard(sub);
      struct stat again {};
      if (::fstat(sub, &again) != 0) return file_errno_error("stat", path, errno);
      if (again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
        return refusal(Reason::kFileChanged, path + " was replaced while the tree was walked")
            .with_detail("file", path);
      }
      INFERGATE_RETURN_IF_ERROR(walk(sub, path, depth + 1));
    }
    return ok_status();
  }
};

}  // namespace

Result<ArtifactRoot> ArtifactRoot::open(const fs::path& dir) {
  if (dir.empty()) return refusal(Reason::kArtifactDirInvalid, "no artifact directory given");
  // Trailing slashes would make the kernel resolve a final symlink; strip them (but keep "/").
  std::string p = dir.string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  int fd = retry_openat(AT_FDCWD, p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP || (err == ENOTDIR && is_symlink_at(AT_FDCWD, p.c_str()))) {
      return refusal(Reason::kSymlink, p + " is a symbolic link; give the directory it points to")
          .with_detail("file", p);
    }
    if (err == EACCES || err == EPERM) return file_errno_error("open artifact directory", p, err);
    std::string why = err == ENOTDIR ? "not a directory" : errno_text(err);
    return refusal(Reason::kArtifactDirInvalid, "artifact directory " + p + ": " + why)
        .with_detail("file", p);
  }
  return ArtifactRoot(UniqueFd(fd), fs::path(p));
}

FileInfo FileInfo::from_stat(std::string path, const struct stat& st) {
  FileInfo f;
  f.path = std::move(path);
  f.size = static_cast<uint64_t>(st.st_size);
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.mtime = st.st_mtim;
  f.ctime = st.st_ctim;
  return f;
}

namespace {
bool same_ts(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
}  // namespace

bool same_file_state(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         same_ts(a.st_mtim, b.st_mtim) && same_ts(a.st_ctim, b.st_ctim);
}

bool same_file_state(const FileInfo& a, const struct stat& b) {
  return a.dev == b.st_dev && a.ino == b.st_ino && a.size == static_cast<uint64_t>(b.st_size) &&
         same_ts(a.mtime, b.st_mtim) && same_ts(a.ctime, b.st_ctim);
}

Result<std::vector<FileInfo>> walk_tree(int root_fd, const WalkLimits& limits, const WalkFilter& filter) {
  Walker w{limits, filter, root_fd, {}, 0};
  INFERGATE_RETURN_IF_ERROR(w.walk(root_fd, "", 0));
  std::sort(w.files.begin(), w.files.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  return std::move(w.files);
}

Result<UniqueFd> open_beneath(int root_fd, std::string_view path, int flags) {
  UniqueFd dir;  // invalid while we are at the root
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    bool last = slash == std::string_view::npos;
    std::string comp(path.substr(start, last ? std::string_view::npos : slash - start));
    if (comp.empty() || comp == "." || comp == "..") {
      return refusal(Reason::kUnsafePath, "not a canonical relative path: " + std::string(path))
          .with_detail("file", std::string(path));
    }
    int at = dir.valid() ? dir.get() : root_fd;
    int f = last ? flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC
                 : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = retry_openat(at, comp.c_str(), f);
    if (fd < 0) {
      int err = errno;
      std::string shown(last ? path : path.substr(0, slash));
      if (!last && err == ENOTDIR) {
        if (is_symlink_at(at, comp.c_str())) return file_errno_error("open", shown, ELOOP);
        return refusal(Reason::kMissingFile, shown + " is not a directory")
            .with_detail("file", std::string(path));
      }
      return file_errno_error("open", shown, err);
    }
    if (last) return UniqueFd(fd);
    dir.reset(fd);
    start = slash + 1;
  }
}

Result<UniqueFd> open_walked(int root_fd, const FileInfo& file) {
  if (!file.via_link) return open_beneath(root_fd, file.path);
  int fd = open_resolved_beneath(root_fd, file.path);
  if (fd < 0) return link_refused(file.path, errno);
  return UniqueFd(fd);
}

Result<std::string> read_small_file(int root_fd, std::string_view path, size_t max_bytes, Reason too_large) {
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_beneath(root_fd, path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return file_errno_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return special_file(path, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return refusal(too_large, std::string(path) + ": " + std::to_string(st.st_size) +
                                  " bytes is over the limit of " + std::to_string(max_bytes))
        .with_detail("file", std::string(path));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return file_errno_error("read", path, errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0) return file_errno_error("stat", path, errno);
  if (got != out.size() || !same_file_state(st, after)) {
    return refusal(Reason::kFileChanged, std::string(path) + " changed while it was read")
        .with_detail("file", std::string(path));
  }
  return out;
}

}  // namespace infergate::agent
