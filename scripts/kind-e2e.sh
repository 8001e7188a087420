#!/usr/bin/env bash
# End-to-end on a kind cluster: build the images, install the chart, publish a signed release to a PVC,
# serve it, roll out int8 weights and an int8 KV cache as gated stages, then show a tampered release
# being refused. What docs/quickstart-kind.md walks through by hand, and what
# .github/workflows/kind-e2e.yaml runs on users' forks. It needs Docker, kind, kubectl and helm, so it
# does not run in this repository's own CI (no Docker engine there).
#
# Usage: scripts/kind-e2e.sh            (KEEP_CLUSTER=1 keeps the cluster afterwards; CLUSTER=name)
# Exit: 0 every step behaved as documented; 1 a step failed (diagnostics are printed and written to
# $OUT_DIR, default ./out/kind-e2e); 2 a tool is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

cluster=${CLUSTER:-infergate-e2e}
ns_op=infergate-system
ns=models
out_dir=${OUT_DIR:-$here/out/kind-e2e}
work=$(mktemp -d)
version=$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' charts/infergate/Chart.yaml)
images=(operator agent runtime)

for tool in docker kind kubectl helm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "kind-e2e: $tool is not installed" >&2
    exit 2
  fi
done

step() { printf '\n=== %s\n' "$*"; }

diagnostics() {
  mkdir -p "$out_dir"
  {
    kubectl get im,deploy,pods,jobs,svc -A -o wide || true
    kubectl -n "$ns" describe im || true
    kubectl -n "$ns" describe pods || true
    kubectl get events -A --sort-by=.lastTimestamp || true
    kubectl -n "$ns_op" logs deploy/infergate-operator --tail=500 || true
  } >"$out_dir/diagnostics.txt" 2>&1
  tail -n 200 "$out_dir/diagnostics.txt"
  echo "kind-e2e: diagnostics in $out_dir/diagnostics.txt" >&2
}

cleanup() {
  rc=$?
  if [ $rc -ne 0 ]; then diagnostics; fi
  rm -rf "$work"
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; fi
  exit $rc
}
trap cleanup EXIT

# Runs one of our images as the calling user with the work directory mounted: the publisher's tools.
publish() {
  local image=$1
  shift
  docker run --rm --user "$(id -u):$(id -g)" -v "$work:/work" "infergate/$image:$version" "$@"
}

# Copies a release directory from the work directory into the PVC, as uid 65532 under the restricted
# Pod Security Standard (the loader pod exists only for the copy).
load_release() {
  local rel=$1
  kubectl -n "$ns" apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: release-loader}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: loader
    image: busybox:1.36.1
    command: [sleep, "3600"]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
    volumeMounts: [{name: artifacts, mountPath: /artifacts}]
  volumes:
  - name: artifacts
    persistentVolumeClaim: {claimName: verified-model-artifacts}
YAML
  kubectl -n "$ns" wait --for=condition=Ready pod/release-loader --timeout=180s
  kubectl -n "$ns" exec release-loader -- mkdir -p "/artifacts/$(dirname "$rel")"
  kubectl -n "$ns" cp "$work/$rel" "release-loader:/artifacts/$rel"
  kubectl -n "$ns" delete pod release-loader --wait=true
}

wait_for() {  # wait_for TIMEOUT JSONPATH VALUE: until the model's field has that value
  kubectl -n "$ns" wait im/tiny-llama --for=jsonpath="$2"="$3" --timeout="$1"
}

step "build the images (tag $version)"
docker build -f operator/Dockerfile -t "infergate/operator:$version" .
docker build -f agent/Dockerfile -t "infergate/agent:$version" .
docker build -f runtime/Dockerfile -t "infergate/runtime:$version" .

step "create the kind cluster '$cluster' and load the images"
kind get clusters 2>/dev/null | grep -qx "$cluster" || kind create cluster --name "$cluster" --wait 120s
for i in "${images[@]}"; do kind load docker-image --name "$cluster" "infergate/$i:$version"; done

step "helm install"
helm install infergate charts/infergate --namespace "$ns_op" --create-namespace \
  --set fullnameOverride=infergate --set "rbac.trustSecretNamespaces={$ns}" --wait --timeout 5m

step "publish a signed release: a generated fp16 model, version 1"
mkdir -p "$work/src" "$work/keys"
publish runtime make-test-model --arch llama --out /work/src/tiny-llama
publish agent keygen --out /work/keys/release
mkdir -p "$work/tiny-llama" && cp -r "$work/src/tiny-llama" "$work/tiny-llama/r1"
publish agent manifest /work/tiny-llama/r1
publish agent sign /work/tiny-llama/r1 --key /work/keys/release.key --name tiny-llama --version 1 --expires 7d
publish agent verify /work/tiny-llama/r1 --public-key /work/keys/release.pub.pem --expect-name tiny-llama

kubectl create namespace "$ns"
kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted
kubectl -n "$ns" create secret generic model-signing-key --from-file=release.pub.pem="$work/keys/release.pub.pem"
kubectl -n "$ns" apply -f - <<YAML
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: verified-model-artifacts}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
YAML
load_release tiny-llama/r1

step "serve it"
kubectl -n "$ns" apply -f - <<YAML
apiVersion: serving.infergate.dev/v1alpha1
kind: InferenceModel
metadata: {name: tiny-llama}
spec:
  replicas: 1
  artifact:
    volume: {persistentVolumeClaim: {claimName: verified-model-artifacts}}
    path: tiny-llama/r1
    trust: {publicKeySecretRef: {name: model-signing-key}, expectName: tiny-llama, minVersion: 1}
  serving: {weightFormat: fp16, kvCacheDtype: fp16, maxContextLength: 2048, maxConcurrency: 4}
  resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {memory: 2Gi}}
  rollout:
    canary: {replicas: 1, analysisSeconds: 30}
YAML
kubectl -n "$ns" wait im/tiny-llama --for=condition=Ready --timeout=10m
kubectl -n "$ns" wait im/tiny-llama --for=condition=Verified --timeout=1m
kubectl -n "$ns" get im tiny-llama

step "roll out int8 weights (release version 2) and an int8 KV cache, as two gated stages"
publish runtime quantize --model /work/src/tiny-llama --out /work/tiny-llama/r2 --weight-format int8
publish agent manifest /work/tiny-llama/r2
publish agent sign /work/tiny-llama/r2 --key /work/keys/release.key --name tiny-llama --version 2 --expires 7d
load_release tiny-llama/r2
kubectl -n "$ns" patch im tiny-llama --type merge -p \
  '{"spec":{"artifact":{"path":"tiny-llama/r2","trust":{"minVersion":2}},"serving":{"weightFormat":"int8","kvCacheDtype":"int8"}}}'
wait_for 20m '{.status.stable.weightFormat}' int8
wait_for 20m '{.status.stable.kvCacheDtype}' int8
kubectl -n "$ns" get im tiny-llama
kubectl -n "$ns" get im tiny-llama -o jsonpath='{range .status.history[*]}{.stage}{"\t"}{.outcome}{"\t"}{.reason}{"\n"}{end}'

step "a tampered release (version 3, one byte flipped after signing) is refused; stable keeps serving"
cp -r "$work/tiny-llama/r2" "$work/tiny-llama/r3"
rm "$work/tiny-llama/r3/release.dsse.json"
publish agent manifest /work/tiny-llama/r3
publish agent sign /work/tiny-llama/r3 --key /work/keys/release.key --name tiny-llama --version 3 --expires 7d
shard=$(cd "$work/tiny-llama/r3" && ls ./*.safetensors | head -n 1)
printf '\x01' | dd of="$work/tiny-llama/r3/$shard" bs=1 seek=4096 count=1 conv=notrunc status=none
if publish agent verify /work/tiny-llama/r3 --public-key /work/keys/release.pub.pem >/dev/null; then
  echo "kind-e2e: the tampered release verified locally" >&2
  exit 1
fi
load_release tiny-llama/r3
kubectl -n "$ns" patch im tiny-llama --type merge -p '{"spec":{"artifact":{"path":"tiny-llama/r3","trust":{"minVersion":3}}}}'
# A new release is an artifact stage: its canary's init container refuses it, the stage fails at once
# and is rolled back, and the agent's reason and file are on the model.
kubectl -n "$ns" wait im/tiny-llama --for=condition=RolledBack --timeout=10m
conditions=$(kubectl -n "$ns" get im tiny-llama -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}')
echo "$conditions"
if ! grep -q DigestMismatch <<<"$conditions"; then
  echo "kind-e2e: no condition names the DigestMismatch" >&2
  exit 1
fi
stable=$(kubectl -n "$ns" get im tiny-llama -o jsonpath='{.status.stable.artifactPath}')
if [ "$stable" != tiny-llama/r2 ]; then
  echo "kind-e2e: stable moved to '$stable' after a refused release" >&2
  exit 1
fi
kubectl -n "$ns" wait deploy/tiny-llama --for=jsonpath='{.status.readyReplicas}'=1 --timeout=1m

step "kind-e2e: every step behaved as documented"
