#!/usr/bin/env bash
# Sets up llama.cpp, the engine a CPU user would pick instead of ours, from Debian's own packages and
# without touching the host system: a minimal Debian chroot (debootstrap) under a cache folder, with
# sid's llama.cpp-tools and python3-gguf installed inside it. Idempotent: a finished chroot is reused.
# The Debian mirror is the one the host's apt already uses. Needs root (debootstrap, chroot).
# Usage: bench/peer/setup-llama-cpp.sh [chroot directory, default $INFERGATE_PEER_CACHE/chroot]
# Prints the chroot directory on stdout when it is ready.
set -euo pipefail
cache=${INFERGATE_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate-peer}
root=${1:-$cache/chroot}
stamp="$root/.infergate-peer-ready"
packages=(llama.cpp-tools python3-gguf python3-numpy)

if [ -f "$stamp" ] && cmp -s "$stamp" <(printf '%s\n' "${packages[@]}"); then
  echo "$root"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "setup-llama-cpp: needs root (debootstrap and chroot)" >&2; exit 1; }

# The mirror apt already uses (deb822 .sources or a one-line sources.list), never a name of our own.
mirror=$(
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'; } |
    grep -v -- '-security' | head -n1
) || true
[ -n "$mirror" ] || { echo "setup-llama-cpp: found no Debian mirror in the host's apt sources" >&2; exit 1; }

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "setup-llama-cpp: installing debootstrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2
fi
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "setup-llama-cpp: debootstrap trixie into $root (a few minutes)" >&2
  rm -rf "$root.partial"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase trixie "$root.partial" "$mirror" >&2
  rm -rf "$root"
  mv "$root.partial" "$root"
fi
# llama.cpp is packaged in sid only; the sid index of a snapshot mirror may be past its Valid-Until.
echo "deb $mirror sid main" > "$root/etc/apt/sources.list.d/sid.list"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Check-Valid-Until=false update >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${packages[@]}" >&2
chroot "$root" llama-bench --version >&2 || chroot "$root" llama-cli --version >&2 || true
printf '%s\n' "${packages[@]}" > "$stamp"
echo "$root"
