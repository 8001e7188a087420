#!/usr/bin/env bash
# Our CPU engine against llama.cpp from Debian's packages, side by side in one run: sets up the chroot
# (setup-llama-cpp.sh, once), builds our runtime and peer_probe in the README's build, then runs
# peer_bench.py, which checks that both engines compute the same function and prints the table of
# ratios. Needs root (chroot). Not part of CI: a full run of the default 1.1B shape takes about an hour
# on 2 cores; --shape small takes minutes.
# Usage: bench/peer/peer-bench.sh [peer_bench.py arguments: --shape small|1b|7b --rounds N --only TEXT ...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
chroot_dir=$("$root/bench/peer/setup-llama-cpp.sh")
build=${INFERGATE_BUILD_DIR:-$root/build}
[ -f "$build/CMakeCache.txt" ] || "$root/scripts/configure.sh" "$build"
cmake --build "$build" -j"$(nproc)" --target infergate-runtime infergate-agent peer_probe >&2
exec /usr/bin/python3 "$root/bench/peer/peer_bench.py" --chroot "$chroot_dir" --bin "$build/bin" "$@"
