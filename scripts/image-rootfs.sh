#!/usr/bin/env bash
# Lays out the root filesystem of a slim runtime image: the given binaries (stripped of debug info) in
# OUT/usr/local/bin and every shared library they load in OUT/usr/local/lib/infergate, except those the
# base image provides (glibc, libstdc++, libgcc_s; more with --exclude). Images set
# LD_LIBRARY_PATH=/usr/local/lib/infergate. A library ldd cannot find fails the build, unless it is
# named with --allow-missing (the NVIDIA driver's libcuda, which the container runtime mounts at start).
# Used by the Dockerfiles' build stage; tested by tests/charts/dockerfile_test.py.
# Usage: scripts/image-rootfs.sh [--exclude REGEX]... [--allow-missing SONAME]... OUT BINARY...
set -euo pipefail

# Provided by every base we use (distroless cc-debian12, nvidia/cuda on Ubuntu 24.04).
exclude='^(linux-vdso\.so|linux-gate\.so|ld-linux[^ ]*\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so)'
allow_missing=()
while [ $# -gt 0 ]; do
  case "$1" in
    --exclude) exclude="$exclude|$2"; shift 2 ;;
    --allow-missing) allow_missing+=("$2"); shift 2 ;;
    --) shift; break ;;
    -*) echo "image-rootfs: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: $0 [--exclude REGEX]... [--allow-missing SONAME]... OUT BINARY..." >&2
  exit 2
fi
out=$1
shift
bin_dir="$out/usr/local/bin"
lib_dir="$out/usr/local/lib/infergate"
mkdir -p "$bin_dir" "$lib_dir"

for bin in "$@"; do
  if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
    echo "image-rootfs: $bin is not an executable file" >&2
    exit 1
  fi
  install -m 0755 "$bin" "$bin_dir/"
  strip --strip-debug "$bin_dir/$(basename "$bin")" 2>/dev/null || true

  # ldd prints "soname => /path (addr)", "soname => not found" or "/path (addr)".
  while read -r soname arrow path _; do
    [ -n "$soname" ] || continue
    if [ "$arrow" != "=>" ]; then continue; fi  # the loader itself or the vDSO
    if [[ "$soname" =~ $exclude ]]; then continue; fi
    if [ "$path" = "not" ]; then
      allowed=0
      for a in "${allow_missing[@]+"${allow_missing[@]}"}"; do [ "$a" = "$soname" ] && allowed=1; done
      if [ $allowed = 0 ]; then
        echo "image-rootfs: $bin needs $soname, which is not installed" >&2
        exit 1
      fi
      continue
    fi
    cp -L "$path" "$lib_dir/$soname"
    chmod 0644 "$lib_dir/$soname"
  done < <(ldd "$bin")
done
echo "image-rootfs: $(ls "$bin_dir" | wc -l) binaries, $(ls "$lib_dir" | wc -l) libraries in $out" >&2
