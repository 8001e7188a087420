#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries on THIS machine (no GPU needed) for the GPU machine,
# which has nvcc but none of our Debian libraries and no package registry: sm_90 code, with the CUDA
# runtime, GoogleTest, libstdc++ and libgcc linked statically, so only glibc and the NVIDIA driver
# are taken from that machine. Output: .gpu/bin/ (ignored by git, small enough to travel with a
# device run); the build tree stays in build-gpu/.
#
# Usage: scripts/gpu-build.sh            then, on the GPU machine: scripts/gpu-check.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
build=build-gpu
out=.gpu/bin
targets=(kernels_cuda_tests kernels_cuda_bench runtime_cuda_tests engine_cuda_bench)

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "gpu-build: no nvcc (looked on PATH and in /usr/local/cuda/bin)" >&2
  exit 1
fi
# 90-real: sm_90 machine code only, no PTX for later GPUs: the H200 runs it, and the four binaries
# (each carrying the kernels) stay well inside what a device run may carry (64 MiB with the tree).
cmake -S . -B "$build" -DINFERGATE_GPU_PORTABLE=ON -DINFERGATE_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CUDA_ARCHITECTURES=90-real >/dev/null
nice -n 10 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

mkdir -p "$out"
for t in "${targets[@]}"; do
  install -m 0755 "$build/bin/$t" "$out/$t"
  strip --strip-debug "$out/$t"
  # Nothing but the C library, the dynamic loader and (dlopened at run time) the driver may remain.
  extra=$(ldd "$out/$t" | awk '{print $1}' | grep -vE '^(linux-vdso|/lib64/ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so)' || true)
  if [ -n "$extra" ]; then
    echo "gpu-build: $t still needs shared libraries the GPU machine lacks: $extra" >&2
    exit 1
  fi
done
du -ch "$out"/* | tail -1 | awk -v d="$out" '{print "gpu-build: " d " holds " $1}'
