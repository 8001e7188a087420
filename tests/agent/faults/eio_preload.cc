// An LD_PRELOAD library that makes one file's storage fail, for the agent's I/O-error tests. There is
// no device-mapper or FUSE here to build a real failing disk, so this fakes the two ways a failing disk
// shows itself to a process, for the file whose path ends in $INFERGATE_EIO_FILE:
//   INFERGATE_EIO_MODE=read  reads (read, pread) fail with EIO; mmap fails with ENODEV, as on a file
//                            system that cannot map, so the reader falls back to reads and meets the EIO;
//   INFERGATE_EIO_MODE=map   mmap succeeds but touching the mapping raises SIGBUS, which is what the
//                            kernel does when a mapped page cannot be read from the device. The file's
//                            size and times stay as they were, so this is not a truncation.
// The file is recognised by the path of the descriptor (/proc/self/fd), whichever call opened it.
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

namespace {

bool is_target(int fd) {
  const char* want = ::getenv("INFERGATE_EIO_FILE");
  if (want == nullptr || *want == '\0' || fd < 0) return false;
  char link[64];
  char path[PATH_MAX];
  ::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  size_t lw = ::strlen(want);
  size_t lp = static_cast<size_t>(n);
  return lp >= lw && ::strcmp(path + lp - lw, want) == 0 && (lp == lw || path[lp - lw - 1] == '/');
}

bool mode_is(const char* m) {
  const char* mode = ::getenv("INFERGATE_EIO_MODE");
  return mode != nullptr && ::strcmp(mode, m) == 0;
}

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

using read_fn = ssize_t (*)(int, void*, size_t);
using pread_fn = ssize_t (*)(int, void*, size_t, off_t);
using mmap_fn = void* (*)(void*, size_t, int, int, int, off_t);

// A mapping of `len` bytes that raises SIGBUS on first touch: an empty memory file mapped past its end.
void* failing_mapping(size_t len, int prot, mmap_fn real_mmap) {
  int mfd = ::memfd_create("infergate-eio", MFD_CLOEXEC);
  if (mfd < 0) return MAP_FAILED;
  void* p = real_mmap(nullptr, len, prot, MAP_SHARED, mfd, 0);
  int saved = errno;
  ::close(mfd);
  errno = saved;
  return p;
}

void* fake_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off, const char* name) {
  auto real = next<mmap_fn>(name);
  if (!(flags & MAP_ANONYMOUS) && is_target(fd)) {
    if (mode_is("read")) {
      errno = ENODEV;
      return MAP_FAILED;
    }
    if (mode_is("map")) return failing_mapping(len, prot, real);
  }
  return real(addr, len, prot, flags, fd, off);
}

ssize_t fake_pread(int fd, void* buf, size_t n, off_t off, const char* name) {
  if (mode_is("read") && is_target(fd)) {
    errno = EIO;
    return -1;
  }
  return next<pread_fn>(name)(fd, buf, n, off);
}

}  // namespace

extern "C" {

ssize_t read(int fd, void* buf, size_t n) {
  if (mode_is("read") && is_target(fd)) {
    errno = EIO;
    return -1;
  }
  return next<read_fn>("read")(fd, buf, n);
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) { return fake_pread(fd, buf, n, off, "pread"); }
ssize_t pread64(int fd, void* buf, size_t n, off_t off) { return fake_pread(fd, buf, n, off, "pread64"); }

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return fake_mmap(addr, len, prot, flags, fd, off, "mmap");
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return fake_mmap(addr, len, prot, flags, fd, off, "mmap64");
}

}  // extern "C"
