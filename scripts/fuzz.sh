#!/usr/bin/env bash
# Fuzzes the parsers that read untrusted bytes (SHA256SUMS; DSSE envelopes and release statements; OMS
# bundles with their statements, certificates, log proofs and trusted roots;
# safetensors headers; tokenizer.json) with libFuzzer + ASan + UBSan: configures a clang build in
# build-fuzz/ (every object there is compiled with ASan + UBSan), builds the fuzz targets and the unit
# tests of the code that reads untrusted input (common, agent, model), runs those unit tests under the
# sanitizers, then runs each fuzz target for a bounded time over its checked-in corpus, two at a time.
# New inputs and crash reproducers stay in build-fuzz/; the source tree is never written.
# Usage: scripts/fuzz.sh [seconds per target, default 60]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
seconds=${1:-60}
jobs=$(nproc)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ is missing; run scripts/install-deps.sh" >&2
  exit 1
fi
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DINFERGATE_FUZZ=ON -DINFERGATE_FUZZ_SECONDS="$seconds" \
  -DINFERGATE_CUDA=OFF -DINFERGATE_BUILD_BENCH=OFF -DINFERGATE_WERROR="${INFERGATE_WERROR:-OFF}" >/dev/null
sanitized_tests=(common_tests agent_unit_tests agent_cli_tests runtime_model_test)
cmake --build build-fuzz --target infergate_fuzz "${sanitized_tests[@]}" -j"$jobs"
# The unit tests of those libraries, under ASan + UBSan (any report fails the run).
for t in "${sanitized_tests[@]}"; do
  echo "fuzz: $t under ASan + UBSan" >&2
  build-fuzz/bin/"$t" --gtest_brief=1
done
ctest --test-dir build-fuzz -L fuzz -j"$jobs" --output-on-failure
