#!/usr/bin/env bash
# Verification speed, measured against baselines taken in the same run (warm page cache):
#   - infergate-agent verify vs `sha256sum --check` over a >= 2 GiB directory of several shards;
#   - the same vs the machine's limit: cores x `openssl speed -evp sha256` at 16 KiB blocks (one core);
#   - a single large file (one SHA-256, one core) vs one core's openssl figure;
#   - the same directory signed in the OpenSSF model signing format (OMS, model.sig): whole files and
#     64 MiB shards, each run interleaved with our format's verify; medians, ranges and their ratio.
# Targets on 2-core machines: >= 8x sha256sum, >= 85% of the limit, single file >= 90% of one core,
# OMS (whole files) within 5% of our format.
# The generated data is removed at the end. Usage:
#   bench/agent/verify_bench.sh          (SHARDS=8 SHARD_MIB=256 SINGLE_MIB=1024 RUNS=3 BENCH_DIR=/tmp)
#   INFERGATE_AGENT=path/to/infergate-agent bench/agent/verify_bench.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

shards=${SHARDS:-8}
shard_mib=${SHARD_MIB:-256}
single_mib=${SINGLE_MIB:-1024}
runs=${RUNS:-3}
cores=$(nproc)

agent=${INFERGATE_AGENT:-$here/build/bin/infergate-agent}
if [ ! -x "$agent" ]; then
  echo "building infergate-agent ..." >&2
  cmake -S "$here" -B "$here/build" >/dev/null
  cmake --build "$here/build" --target infergate-agent -j"$cores" >/dev/null
fi

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/infergate-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

now() { date +%s.%N; }
# Pseudo-random bytes fast (AES-CTR keystream), so that generating 2 GiB takes seconds, not minutes.
random_bytes() { { openssl enc -aes-128-ctr -nosalt -pass pass:"$1" -in /dev/zero 2>/dev/null || true; } | head -c "$2"; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
# Best (shortest) wall time of RUNS runs of a command that must succeed.
best_of() {
  local best="" t0 t1 t
  for _ in $(seq "$runs"); do
    t0=$(now)
    "$@" >/dev/null 2>&1 || { echo "benchmark command failed: $*" >&2; exit 1; }
    t1=$(now)
    t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')
  done
  echo "$best"
}
# One core's openssl SHA-256 rate at 16 KiB blocks, in bytes/s (openssl prints thousands of bytes/s).
openssl_one_core() {
  openssl speed -seconds 3 -evp sha256 -bytes 16384 2>/dev/null |
    awk '$1 == "sha256" { v = $2; sub(/k$/, "", v); printf "%.0f", v * 1000 }'
}
openssl_all_cores() {
  openssl speed -multi "$cores" -seconds 3 -evp sha256 -bytes 16384 2>/dev/null |
    awk '$1 == "sha256" { v = $2; sub(/k$/, "", v); printf "%.0f", v * 1000 }'
}

echo "infergate-agent verification benchmark (warm page cache)"
echo "  machine: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the data ----
mkdir -p model single
printf '{"architectures":["LlamaForCausalLM"],"torch_dtype":"bfloat16"}\n' >model/config.json
printf '{"model":{"type":"BPE"}}\n' >model/tokenizer.json
for i in $(seq "$shards"); do
  random_bytes "shard$i" $((shard_mib << 20)) >"model/model-$(printf %05d "$i")-of-$(printf %05d "$shards").bin"
done
printf '{"torch_dtype":"bfloat16"}\n' >single/config.json
random_bytes single $((single_mib << 20)) >single/weights.bin
"$agent" keygen --out key >/dev/null 2>&1
for d in model single; do
  "$agent" manifest "$d" >/dev/null 2>&1
  "$agent" sign "$d" --key key.key --name bench --version 1 >/dev/null 2>&1
done
# The same bytes (hard links share the page cache) signed as OMS bundles: whole files, and shards.
"$agent" keygen --out omskey --type ecdsa-p256 >/dev/null 2>&1
for d in oms-files oms-shards; do
  mkdir "$d" && ln model/*.bin model/*.json "$d"/
done
"$agent" sign oms-files --key omskey.key --format oms >/dev/null 2>&1
"$agent" sign oms-shards --key omskey.key --format oms --shard-size $((64 << 20)) >/dev/null 2>&1
bytes=$(du -cb model/* | tail -1 | cut -f1)
single_bytes=$(du -cb single/* | tail -1 | cut -f1)
printf '  data: %d shards x %d MiB = %.2f GiB (+ config.json, tokenizer.json); single file %d MiB\n' \
  "$shards" "$shard_mib" "$(awk -v b="$bytes" 'BEGIN { print b / 2^30 }')" "$single_mib"

# ---- warm the page cache ----
cat model/* single/* >/dev/null
cat model/* single/* >/dev/null

# ---- baselines ----
one_core=$(openssl_one_core)
all_cores=$(openssl_all_cores)
limit=$((one_core * cores))
sum_time=$(RUNS=1 best_of sh -c 'cd model && sha256sum --quiet --check SHA256SUMS')

# ---- infergate ----
agent_time=$(best_of "$agent" verify model --public-key key.pub.pem)
single_time=$(best_of "$agent" verify single --public-key key.pub.pem)
one_core_after=$(openssl_one_core)
[ "$one_core_after" -gt "$one_core" ] && one_core=$one_core_after && limit=$((one_core * cores))

agent_rate=$(awk -v b="$bytes" -v s="$agent_time" 'BEGIN { print b / s }')
single_rate=$(awk -v b="$single_bytes" -v s="$single_time" 'BEGIN { print b / s }')
printf '  openssl speed -evp sha256, 16 KiB, one core:  %s GB/s (best of two measurements)\n' "$(gbps "$one_core" 1)"
printf '  machine limit = %d cores x one core:          %s GB/s   (openssl speed -multi %d: %s GB/s)\n' \
  "$cores" "$(gbps "$limit" 1)" "$cores" "$(gbps "$all_cores" 1)"
printf '  sha256sum --check:               %8.2f s   %s GB/s\n' "$sum_time" "$(gbps "$bytes" "$sum_time")"
printf '  infergate-agent verify:          %8.2f s   %s GB/s   (best of %d, whole process incl. signature)\n' \
  "$agent_time" "$(gbps "$bytes" "$agent_time")" "$runs"
printf '  single %d MiB file:             %8.2f s   %s GB/s\n' "$single_mib" "$single_time" \
  "$(gbps "$single_bytes" "$single_time")"
echo
awk -v a="$agent_time" -v s="$sum_time" 'BEGIN { printf "  RATIO agent vs sha256sum --check:         %5.1fx  (target >= 8x)\n", s / a }'
awk -v r="$agent_rate" -v l="$limit" -v m="$all_cores" 'BEGIN {
  printf "  RATIO agent vs machine limit:             %5.0f%%  (target >= 85%%; vs openssl -multi: %.0f%%)\n", 100 * r / l, 100 * r / m }'
awk -v r="$single_rate" -v c="$one_core" 'BEGIN {
  printf "  RATIO single file vs one core of openssl: %5.0f%%  (target >= 90%%)\n", 100 * r / c }'

# ---- OMS vs ours, interleaved: each round runs the three in turn ----
ours_t=() files_t=() shards_t=()
timed() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null 2>&1 || { echo "benchmark command failed: $*" >&2; exit 1; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }'
}
for _ in $(seq "$((runs < 5 ? 5 : runs))"); do
  ours_t+=("$(timed "$agent" verify model --public-key key.pub.pem)")
  files_t+=("$(timed "$agent" verify oms-files --format oms --public-key omskey.pub.pem)")
  shards_t+=("$(timed "$agent" verify oms-shards --format oms --public-key omskey.pub.pem)")
done
# "median min max" of the arguments.
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f %.3f", m, v[1], v[NR] }'; }
read -r om olo ohi <<<"$(stats "${ours_t[@]}")"
read -r fm flo fhi <<<"$(stats "${files_t[@]}")"
read -r sm slo shi <<<"$(stats "${shards_t[@]}")"
echo
printf '  verify, ours (release.dsse.json):    median %6.3f s  [%.3f .. %.3f]  %s GB/s\n' "$om" "$olo" "$ohi" "$(gbps "$bytes" "$om")"
printf '  verify --format oms, whole files:    median %6.3f s  [%.3f .. %.3f]  %s GB/s\n' "$fm" "$flo" "$fhi" "$(gbps "$bytes" "$fm")"
printf '  verify --format oms, 64 MiB shards:  median %6.3f s  [%.3f .. %.3f]  %s GB/s\n' "$sm" "$slo" "$shi" "$(gbps "$bytes" "$sm")"
awk -v o="$om" -v f="$fm" -v s="$sm" 'BEGIN {
  printf "  RATIO OMS (files) vs ours, medians:       %5.2fx  (target <= 1.05x)\n", f / o
  printf "  RATIO OMS (shards) vs ours, medians:      %5.2fx\n", s / o }'
