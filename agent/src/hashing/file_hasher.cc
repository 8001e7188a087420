// One file's SHA-256 through a read-only mapping. A page that cannot be brought in raises SIGBUS: the
// file was truncated under the mapping, or the storage failed to read it (EIO). A per-thread guard turns
// that into a refusal instead of a crash, and the file's state afterwards says which of the two it was:
// FileChanged when its size or times moved, IoError when it is still the file it was.
#include "infergate/agent/hashing/file_hasher.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <vector>

namespace infergate::agent {
namespace {

// The guard: while a thread hashes a mapping, t_guard points at its jump buffer; a SIGBUS in that
// thread jumps back. SIGBUS is synchronous (raised by the faulting access itself, inside SHA-256's
// block function, which holds no locks), so leaving the handler by siglongjmp is safe here.
thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int /*sig*/, siginfo_t* /*info*/, void* /*context*/) {
  if (t_guard != nullptr) siglongjmp(*t_guard, 1);
  // Not one of ours: put the previous disposition back; the faulting access repeats and meets it.
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
}

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

Error changed(const FileInfo& f, const std::string& why) {
  return refusal(Reason::kFileChanged, f.path + " changed while it was verified: " + why)
      .with_detail("file", f.path);
}

Error cancelled() { return Error(ErrorCode::kCancelled, "cancelled"); }

bool is_cancelled(const HashOptions& o) {
  return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed);
}

void account(const HashOptions& o, const FileInfo& f, uint64_t chunk, uint64_t done) {
  if (o.bytes_hashed != nullptr) o.bytes_hashed->fetch_add(chunk, std::memory_order_relaxed);
  if (o.after_chunk) o.after_chunk(f, done);
}

// 0: hashed; 1: a page of the mapping could not be read (SIGBUS: truncated, or an I/O error); 2: cancelled;
// 3: mmap failed (errno in *err; the caller falls back to reads). Only plain data lives across sigsetjmp (no
// destructors to skip).
// [begin, begin + size) of the file: mappings start on a page boundary at or before `begin`.
int hash_mapped(int fd, const FileInfo& f, uint64_t begin, uint64_t size, Sha256& h, const HashOptions& o,
                int* err) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  sigjmp_buf jump;
  void* volatile window = nullptr;
  volatile size_t window_len = 0;
  if (sigsetjmp(jump, 1) != 0) {
    t_guard = nullptr;
    if (window != nullptr) ::munmap(window, window_len);
    return 1;
  }
  uint64_t done = 0;
  while (done < size) {
    uint64_t pos = begin + done;
    uint64_t lead = pos % page;  // bytes mapped before `pos` to keep the mapping page-aligned
    size_t len = static_cast<size_t>(std::min<uint64_t>(kHashWindowBytes, size - done));
    void* p =
        ::mmap(nullptr, len + lead, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(pos - lead));
    if (p == MAP_FAILED) {
      *err = errno;
      return done == 0 ? 3 : -*err;
    }
    window = p;
    window_len = len + lead;
    ::madvise(p, len + lead, MADV_SEQUENTIAL);
    if (done + len < size) {
      // Start reading the next window while this one is hashed (a no-op when it is cached).
      ::posix_fadvise(fd, static_cast<off_t>(pos + len),
                      static_cast<off_t>(std::min<uint64_t>(kHashWindowBytes, size - done - len)),
                      POSIX_FADV_WILLNEED);
    }
    const char* data = static_cast<const char*>(p) + lead;
    for (size_t off = 0; off < len;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kHashChunkBytes, len - off));
      t_guard = &jump;
      h.update(data + off, n);
      t_guard = nullptr;
      off += n;
      done += n;
      account(o, f, n, done);
      if (is_cancelled(o)) {
        ::munmap(p, len + lead);
        return 2;
      }
    }
    window = nullptr;
    ::munmap(p, len + lead);
  }
  return 0;
}

// The fallback for files that cannot be mapped: large sequential reads into one buffer.
Status hash_read(int fd, const FileInfo& f, uint64_t begin, uint64_t size, Sha256& h, const HashOptions& o) {
  std::vector<char> buf(kHashChunkBytes);
  uint64_t done = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(begin + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return file_errno_error("read", f.path, errno);
    }
    if (n == 0) return changed(f, "it ended early");
    h.update(buf.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
    account(o, f, static_cast<uint64_t>(n), done);
    if (is_cancelled(o)) return cancelled();
  }
  return ok_status();
}

}  // namespace

Result<Sha256Digest> hash_file(int root_fd, const FileInfo& file, const HashOptions& options,
                               const ByteRange& range) {
  install_sigbus_guard();
  if (range.offset > file.size || range.length.value_or(0) > file.size - range.offset) {
    return changed(file, "the range to hash lies beyond its end");
  }
  const uint64_t begin = range.offset;
  const uint64_t size = range.length.value_or(file.size - range.offset);
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_walked(root_fd, file));
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0) return file_errno_error("stat", file.path, errno);
  if (!S_ISREG(before.st_mode)) {
    return refusal(Reason::kSpecialFile, file.path + " is no longer a regular file (never read)")
        .with_detail("file", file.path);
  }
  if (!same_file_state(file, before)) return changed(file, "it is not the file the walk found");

  Sha256 h;
  int err = 0;
  int rc = size == 0 ? 0 : hash_mapped(fd.get(), file, begin, size, h, options, &err);
  if (rc == 1) {
    struct stat now {};
    if (::fstat(fd.get(), &now) != 0) return file_errno_error("stat", file.path, errno);
    if (!same_file_state(before, now)) return changed(file, "it shrank while it was hashed");
    // Same size and times, yet a page could not be read: the storage failed (EIO under the mapping).
    return file_errno_error("read", file.path, EIO);
  }
  if (rc == 2) return cancelled();
  if (rc < 0) return file_errno_error("map", file.path, -rc);
  if (rc == 3) {
    // Not mappable (some network and FUSE file systems): read it instead.
    h.reset();
    INFERGATE_RETURN_IF_ERROR(hash_read(fd.get(), file, begin, size, h, options));
  }
  // Whatever was read must still be the whole file, unchanged: a file that grew, or was rewritten in
  // place while we read it, has a new size, mtime or ctime.
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0) return file_errno_error("stat", file.path, errno);
  if (!same_file_state(before, after)) return changed(file, "its size or times changed while it was hashed");
  if (h.size() != size) return changed(file, "fewer bytes were read than its size");
  return h.finish();
}

}  // namespace infergate::agent
