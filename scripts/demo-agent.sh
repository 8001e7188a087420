#!/usr/bin/env bash
# The agent demo: builds infergate-agent (installing what it needs), generates a small model
# directory, then keygen, manifest, sign and verify (passes), and shows a truncated file, a replaced
# file, an added file and a wrong key each refused with its reason. Every line of output comes from
# the real runs. Usage: scripts/demo-agent.sh   (INFERGATE_AGENT=path skips the build)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

agent=${INFERGATE_AGENT:-}
if [ -z "$agent" ]; then
  ./scripts/install-deps.sh
  cmake -S . -B build >/dev/null
  cmake --build build --target infergate-agent -j"$(nproc)" >/dev/null
  agent="$here/build/bin/infergate-agent"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/infergate-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
model="$work/glm-demo"
mkdir -p "$model"

bold="" plain=""
if [ -t 1 ]; then bold=$(tput bold 2>/dev/null || true) plain=$(tput sgr0 2>/dev/null || true); fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
show() { printf '$ %s\n' "$*" | sed -e "s|$agent|infergate-agent|g" -e "s|$work/||g"; }
run() { show "$@"; "$@" 2>&1 | sed "s|$work/||g"; }

# A safetensors shard: 8-byte little-endian header length, a JSON header, then the tensor bytes; each
# shard holds its own tensor (model.layers.N.weight), as a checkpoint's shards do.
shard() {
  local file=$1 elements=$2 layer=$3
  local header="{\"model.layers.$layer.weight\":{\"dtype\":\"F16\",\"shape\":[$elements],\"data_offsets\":[0,$((2 * elements))]}}"
  local n=${#header} i bytes=""
  for i in 0 1 2 3 4 5 6 7; do bytes+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  printf '%b' "$bytes" >"$file"
  printf '%s' "$header" >>"$file"
  head -c $((2 * elements)) /dev/urandom >>"$file"
}

# verify with the report written to a file; prints the exit code and the report line.
verify() {
  local label=$1
  shift
  local rc=0
  show infergate-agent verify "$@" --report report.json
  (cd "$work" && "$agent" verify "$@" --report report.json >/dev/null 2>&1) || rc=$?
  printf '%s -> exit %d: %s\n' "$label" "$rc" "$(cat "$work/report.json")"
}

step "1. A small model directory (Hugging Face layout, fp16 safetensors shards)"
printf '{"architectures":["GlmForCausalLM"],"torch_dtype":"float16","num_hidden_layers":2}\n' >"$model/config.json"
printf '{"model":{"type":"BPE","vocab":{}}}\n' >"$model/tokenizer.json"
shard "$model/model-00001-of-00002.safetensors" 2000000 0
shard "$model/model-00002-of-00002.safetensors" 1500000 1
(cd "$work" && find glm-demo -type f -printf '%10s  %p\n' | sort -k2)

step "2. keygen: an Ed25519 key pair"
cd "$work"
run "$agent" keygen --out release
ls -l release.key release.pub.pem | awk '{print $1, $NF}'

step "3. manifest: SHA256SUMS, exactly what find | sort | sha256sum prints"
run "$agent" manifest glm-demo
cat glm-demo/SHA256SUMS
show "(cd glm-demo && sha256sum --check SHA256SUMS)"
(cd glm-demo && sha256sum --check SHA256SUMS)

step "4. sign: a DSSE envelope around an in-toto release statement"
run "$agent" sign glm-demo --key release.key --name glm-demo --version 3 --expires 90d
printf 'the signed predicate: '
sed -n 's/.*"payload": "\([^"]*\)".*/\1/p' glm-demo/release.dsse.json | base64 -d | sed 's/.*"predicate":\({[^}]*}[^}]*}\).*/\1/'
echo

step "5. verify: the release as signed"
verify "verified" glm-demo --public-key release.pub.pem --expect-name glm-demo --min-version 3

cp -a glm-demo pristine
restore() { rm -rf "$work/glm-demo" && cp -a "$work/pristine" "$work/glm-demo"; }

step "6. A truncated shard (a copy that stopped half way)"
show truncate -s 1000000 glm-demo/model-00002-of-00002.safetensors
truncate -s 1000000 glm-demo/model-00002-of-00002.safetensors
verify "refused" glm-demo --public-key release.pub.pem
restore

step "7. A replaced shard (same size, other bytes)"
show "dd ... of=glm-demo/model-00001-of-00002.safetensors (16 bytes overwritten in the middle)"
head -c 16 /dev/urandom | dd of=glm-demo/model-00001-of-00002.safetensors bs=1 seek=2000000 conv=notrunc status=none
verify "refused" glm-demo --public-key release.pub.pem
restore

step "8. An added file (an injected chat template)"
show "echo '{{ system_prompt_override }}' > glm-demo/chat_template.jinja"
echo '{{ system_prompt_override }}' >glm-demo/chat_template.jinja
verify "refused" glm-demo --public-key release.pub.pem
restore

step "9. The right files, but a key that is not trusted"
run "$agent" keygen --out stranger
verify "refused" glm-demo --public-key stranger.pub.pem

step "10. And the untouched release still verifies"
verify "verified" glm-demo --public-key release.pub.pem
