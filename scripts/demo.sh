#!/usr/bin/env bash
# The README's first command: the whole infergate pipeline on this machine, no cluster.
#
#   scripts/demo.sh
#
# Installs the Debian dependencies (scripts/install-deps.sh), builds the three binaries, then:
# generates a small test model with outlier key channels; publishes and signs an fp16 release;
# quantizes it to int8 weights and signs that release; starts `infergate-operator local run` and
# applies an InferenceModel; rolls out int8 weights and int8 KV as two gated canary stages; offers a
# tampered release (refused by verification, rolled back); offers int4 KV with per-token keys (the
# quality gate fails, rolled back); and ends with the status table, the gate reports' paths and a
# curl line for the model that is still serving.
#
# Everything printed comes from the commands it runs and the status the operator writes; nothing is
# canned. The operator keeps serving after the script ends (the curl line works); the last lines say
# how to stop it. Environment:
#   DEMO_DIR        where everything goes (default: ./infergate-demo)
#   DEMO_PORT       the router's port (default: 8080)
#   BUILD_DIR       the build directory (default: build/ in the repository, shared with scripts/test.sh)
#   INFERGATE_WERROR=ON  compiler warnings are errors (CI)
#   DEMO_SKIP_DEPS=1   do not run scripts/install-deps.sh (CI, or a machine that already has them)
#   DEMO_SKIP_BUILD=1  use the binaries already in $BUILD_DIR/bin
#   DEMO_STOP=1     stop the operator at the end (tests)
#   DEMO_STAGE_TIMEOUT  seconds to wait for each rollout step (default: 600)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEMO_DIR=${DEMO_DIR:-$PWD/infergate-demo}
DEMO_PORT=${DEMO_PORT:-8080}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
STAGE_TIMEOUT=${DEMO_STAGE_TIMEOUT:-600}
PY=/usr/bin/python3
MODEL=demo

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
step() { echo; bold "==> $*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
die() { echo "demo: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
step "Dependencies and build"
if [ "${DEMO_SKIP_DEPS:-0}" != 1 ]; then
  run "$ROOT/scripts/install-deps.sh"
fi
if [ "${DEMO_SKIP_BUILD:-0}" != 1 ]; then
  run "$ROOT/scripts/configure.sh" "$BUILD_DIR"
  run cmake --build "$BUILD_DIR" -j"$(nproc)" --target infergate-agent infergate-runtime infergate-operator
fi
BIN=$BUILD_DIR/bin
for b in infergate-agent infergate-runtime infergate-operator; do
  [ -x "$BIN/$b" ] || die "$BIN/$b was not built"
done
AGENT=$BIN/infergate-agent RUNTIME=$BIN/infergate-runtime OPERATOR=$BIN/infergate-operator

# A demo directory of our own, from scratch. An operator left running by an earlier demo is stopped
# first (its pid is in the state directory's lock file).
STATE=$DEMO_DIR/state
if [ -f "$STATE/lock" ]; then
  old=$(cat "$STATE/lock" 2>/dev/null || true)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null && grep -q infergate-operator "/proc/$old/cmdline" 2>/dev/null; then
    echo "stopping the operator an earlier demo left running (pid $old)"
    kill -TERM "$old"
    for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.2; done
  fi
fi
rm -rf "$DEMO_DIR"
MANIFESTS=$DEMO_DIR/manifests
ARTIFACTS=$STATE/volumes/model-artifacts        # the "PVC" named model-artifacts
KEYS=$STATE/keys/model-signing-key              # the "Secret" named model-signing-key
mkdir -p "$MANIFESTS" "$ARTIFACTS" "$KEYS" "$DEMO_DIR/publisher"

# ---------------------------------------------------------------------------------------------
step "1. A test model with outlier key channels (Llama layout, fp16)"
run "$RUNTIME" make-test-model --out "$DEMO_DIR/publisher/fp16" --arch llama --layers 2 --hidden 128 \
  --heads 4 --kv-heads 2 --vocab 512 --outlier-channels 4 --seed 7 --max-position 8192
ls -l "$DEMO_DIR/publisher/fp16"

step "2. Publish and sign the fp16 release (version 1)"
run "$AGENT" keygen --out "$DEMO_DIR/publisher/release"
cp -r "$DEMO_DIR/publisher/fp16" "$ARTIFACTS/fp16"
run "$AGENT" manifest "$ARTIFACTS/fp16"
run "$AGENT" sign "$ARTIFACTS/fp16" --key "$DEMO_DIR/publisher/release.key" --name $MODEL --version 1 --expires 30d
cp "$DEMO_DIR/publisher/release.pub.pem" "$KEYS/release.pub.pem"

step "3. Quantize to int8 weights and sign that release (version 2)"
run "$RUNTIME" quantize --model "$ARTIFACTS/fp16" --out "$ARTIFACTS/int8" --weight-format int8
rm -f "$ARTIFACTS/int8/SHA256SUMS" "$ARTIFACTS/int8/release.dsse.json"   # the fp16 release's, if copied
run "$AGENT" manifest "$ARTIFACTS/int8"
run "$AGENT" sign "$ARTIFACTS/int8" --key "$DEMO_DIR/publisher/release.key" --name $MODEL --version 2 --expires 30d
echo "\$ $AGENT verify $ARTIFACTS/int8 --public-key $KEYS/release.pub.pem --expect-name $MODEL --min-version 1"
"$AGENT" verify "$ARTIFACTS/int8" --public-key "$KEYS/release.pub.pem" --expect-name $MODEL --min-version 1 \
  | $PY -c 'import json,sys; r=json.load(sys.stdin); print("verified:", r.get("reason"), r.get("releaseDigest"))'

# ---------------------------------------------------------------------------------------------
write_model() {  # write_model PATH WEIGHTS KV [MAX_MEAN_KL]
  cat >"$MANIFESTS/$MODEL.yaml.tmp" <<EOF
apiVersion: serving.infergate.dev/v1alpha1
kind: InferenceModel
metadata:
  name: $MODEL
spec:
  replicas: 2
  artifact:
    volume: {persistentVolumeClaim: {claimName: model-artifacts}}
    path: $1
    trust: {publicKeySecretRef: {name: model-signing-key}, expectName: $MODEL, minVersion: 1}
  serving:
    weightFormat: $2
    kvCacheDtype: $3
    maxContextLength: 8192
    maxConcurrency: 4
  rollout:
    stageOrder: [weights, kvCache, capacity]
    canary: {replicas: 1, analysisSeconds: 15}
    gates:
      quality: {suite: default, minTop1Agreement: 0.8, maxMeanKL: ${4:-0.015}, timeoutSeconds: 600}
      # Loose on purpose: on a shared 2-core machine the two tracks' latencies vary several-fold from
      # load alone; the gate still measures and reports both, and any error rate above 5% fails it.
      performance: {maxTTFTP95Ratio: 25.0, maxTPOTP95Ratio: 25.0, maxErrorRate: 0.05}
    autoRollback: true
EOF
  mv "$MANIFESTS/$MODEL.yaml.tmp" "$MANIFESTS/$MODEL.yaml"   # the operator sees whole files only
  echo "--- $MANIFESTS/$MODEL.yaml: artifact.path=$1 weightFormat=$2 kvCacheDtype=$3"
}

status_json() { "$OPERATOR" local get models $MODEL --state "$STATE" -o json 2>/dev/null || echo "{}"; }

# Follows the rollout: prints each change of stage, phase and gate result as the operator writes it,
# until the Python condition on the status holds (or the timeout). `s` is status, `h` its history.
follow() {  # follow DESCRIPTION CONDITION
  local what=$1 cond=$2 deadline=$((SECONDS + STAGE_TIMEOUT)) last="" now
  while :; do
    now=$(status_json | $PY -c '
import json, sys
o = json.load(sys.stdin); s = o.get("status", {}) or {}
st = s.get("stage") or {}
gates = ", ".join("%s=%s" % (g.get("gate"), g.get("outcome")) for g in st.get("gateResults", []) or [])
ready = [c.get("status") for c in s.get("conditions", []) if c.get("type") == "Ready"]
line = "stable: %-24s" % ((s.get("stable") or {}).get("summary", "-"))
if st: line += " | stage %s %s %s" % (st.get("name"), st.get("phase"), ("(" + gates + ")") if gates else "")
line += " | ready=%s" % (ready[0] if ready else "-")
print(line)
')
    if [ "$now" != "$last" ]; then echo "  [$(date +%T)] $now"; last=$now; fi
    if status_json | $PY -c "
import json, sys
o = json.load(sys.stdin); s = o.get('status', {}) or {}; h = s.get('history', []) or []
sys.exit(0 if ($cond) else 1)" 2>/dev/null; then
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "demo: timed out waiting for: $what" >&2
      "$OPERATOR" local get --state "$STATE" -o wide || true
      "$OPERATOR" local get pods --state "$STATE" -o wide || true
      tail -n 30 "$DEMO_DIR/operator.log" >&2 || true
      exit 1
    fi
    sleep 1
  done
}

last_outcome() {  # the newest history entry, as people read it
  status_json | $PY -c '
import json, sys
h = (json.load(sys.stdin).get("status", {}) or {}).get("history", []) or []
if h:
    e = h[-1]
    print("  history: stage=%s outcome=%s reason=%s" % (e.get("stage"), e.get("outcome"), e.get("reason")))
    if e.get("message"): print("  message:", e.get("message"))'
}

step "4. Start the local operator and apply the InferenceModel (fp16 weights, fp16 KV)"
echo "\$ $OPERATOR local run --manifests $MANIFESTS --state $STATE --router-address 127.0.0.1:$DEMO_PORT &"
setsid "$OPERATOR" local run --manifests "$MANIFESTS" --state "$STATE" --router-address "127.0.0.1:$DEMO_PORT" \
  --grace-period 5 >"$DEMO_DIR/operator.log" 2>&1 &
OP_PID=$!
TRAFFIC_PID=""
DONE=0
# Whatever ends the script early (a failure, Ctrl-C) stops what it started; a finished demo leaves
# the operator serving.
on_exit() {
  [ -n "$TRAFFIC_PID" ] && kill "$TRAFFIC_PID" 2>/dev/null
  if [ $DONE != 1 ]; then
    echo "demo: stopped early; the operator's log is $DEMO_DIR/operator.log" >&2
    stop_operator
  fi
  return 0
}
# SIGTERM (the operator stops its pods: SIGTERM, SIGKILL after the grace period), then wait for it.
stop_operator() {
  kill -TERM $OP_PID 2>/dev/null || return 0
  for _ in $(seq 150); do kill -0 $OP_PID 2>/dev/null || return 0; sleep 0.2; done
  echo "demo: the operator did not stop within 30 s; killing it" >&2
  kill -KILL $OP_PID 2>/dev/null || true
}
trap on_exit EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do [ -f "$STATE/router.json" ] && break; sleep 0.2; done
kill -0 $OP_PID 2>/dev/null || { cat "$DEMO_DIR/operator.log" >&2; die "the operator did not start"; }
OP_PID=$(cat "$STATE/lock")   # the operator's own pid (it writes it into its lock file)
write_model fp16 fp16 fp16
follow "the fp16 model to serve" \
  "(s.get('stable') or {}).get('summary','').startswith('fp16/fp16') and any(c.get('type')=='Ready' and c.get('status')=='True' for c in s.get('conditions',[]))"
run "$OPERATOR" local get --state "$STATE"
run "$OPERATOR" local get pods --state "$STATE"

# Traffic through the router during the rollouts, so the performance gate has requests to compare
# (both tracks get their share: the router splits by ready replicas).
traffic() {
  while :; do
    curl -s -o /dev/null --max-time 30 "http://127.0.0.1:$DEMO_PORT/v1/completions" \
      -H 'Content-Type: application/json' \
      -d "{\"model\":\"$MODEL\",\"prompt\":\"The quick brown fox\",\"max_tokens\":16,\"temperature\":0}" || true
    sleep 0.2
  done
}
traffic &
TRAFFIC_PID=$!

step "5. Roll out int8 weights and int8 KV: two canary stages, weights first"
write_model int8 int8 int8
follow "the weights stage to pass" "any(e.get('stage')=='weights' and e.get('outcome')=='Promoted' for e in h)"
last_outcome
follow "the kvCache stage to pass" \
  "any(e.get('stage')=='kvCache' and e.get('outcome')=='Promoted' for e in h) and (s.get('stable') or {}).get('summary','').startswith('int8/int8')"
last_outcome
run "$OPERATOR" local get --state "$STATE"

step "6. A tampered release (version 3): refused by verification, rolled back"
cp -r "$ARTIFACTS/int8" "$ARTIFACTS/int8-r3"
rm -f "$ARTIFACTS/int8-r3/release.dsse.json"
run "$AGENT" sign "$ARTIFACTS/int8-r3" --key "$DEMO_DIR/publisher/release.key" --name $MODEL --version 3 --expires 30d
shard=$(cd "$ARTIFACTS/int8-r3" && ls *.safetensors | head -n 1)
echo "flipping one byte in $shard after signing"
$PY - "$ARTIFACTS/int8-r3/$shard" <<'EOF'
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0xFF]))
EOF
write_model int8-r3 int8 int8
follow "the tampered release to be rolled back" "any(e.get('outcome')=='RolledBack' and e.get('stage')=='artifact' for e in h)"
last_outcome
run "$OPERATOR" local get events $MODEL --state "$STATE" | grep -iE 'digest|verif|rolled' | tail -n 5 || true

step "7. int4 KV with per-token keys: the quality gate fails, rolled back"
# KV quantization should be nearly free (int8 KV measures a mean KL of about 5e-6 here), so the KV
# stage is gated tighter than the weights stage: per-token int4 keys measure about 0.012 on this model.
write_model int8 int8 int4 0.005
follow "the int4 KV stage to be rolled back" "any(e.get('outcome')=='RolledBack' and e.get('stage')=='kvCache' for e in h)"
last_outcome
kill $TRAFFIC_PID 2>/dev/null || true
TRAFFIC_PID=""
# The rolled-back canary's pods are stopping (SIGTERM, then SIGKILL after the grace period).
for _ in $(seq 60); do
  "$OPERATOR" local get pods --state "$STATE" | grep -q -- '-canary-' || break
  sleep 0.5
done

# ---------------------------------------------------------------------------------------------
step "8. Where it stands"
run "$OPERATOR" local get --state "$STATE" -o wide
run "$OPERATOR" local get pods --state "$STATE"
echo
bold "Gate reports (the quality check's result and log, per stage):"
found=0
for d in "$STATE"/jobs/*/*; do
  [ -d "$d" ] || continue
  found=1
  echo "  $d"
  [ -s "$d/termination-log" ] && echo "    result: $(head -c 300 "$d/termination-log")"
  echo "    log:    $d/log"
done
[ $found = 1 ] || echo "  (no quality check ran)"
echo "  status: $STATE/status/default_$MODEL.yaml"
echo "  events: $STATE/events.log"
echo
bold "The stable model is still serving. Try:"
CURL="curl -s http://127.0.0.1:$DEMO_PORT/v1/completions -H 'Content-Type: application/json' -d '{\"model\":\"$MODEL\",\"prompt\":\"The quick brown fox\",\"max_tokens\":16}'"
echo "  $CURL"
echo "  (The model is synthetic: step 1 generated it with random weights and a small tokenizer, so the"
echo "  text it returns is a random string of tokens. That is expected; what the demo shows is the"
echo "  pipeline around the model, not the model.)"
echo "  $(eval "$CURL" | head -c 400)"
echo
DONE=1
if [ "${DEMO_STOP:-0}" = 1 ]; then
  stop_operator
  echo "operator stopped"
else
  echo "The operator (pid $OP_PID) keeps running; its log is $DEMO_DIR/operator.log."
  echo "Watch it:  $OPERATOR local get --state $STATE   (and: local get pods | events | errors)"
  echo "Stop it:   kill $OP_PID"
fi
