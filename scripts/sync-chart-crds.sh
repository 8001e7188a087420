#!/usr/bin/env bash
# Copies the CustomResourceDefinitions from the top-level crds/ into the Helm chart's crds/, so that the
# chart installs exactly the schema the operator is built and tested against. Examples are not copied.
# tests/charts/crd_drift_test.py fails when the two differ; run this after changing crds/*.yaml.
# Usage: scripts/sync-chart-crds.sh [--check]   (--check: report drift, change nothing, exit 1 on drift)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$here/crds"
dst="$here/charts/infergate/crds"
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "sync-chart-crds: unknown argument '$1' (usage: $0 [--check])" >&2; exit 2 ;;
esac

shopt -s nullglob
sources=("$src"/*.yaml)
if [ ${#sources[@]} -eq 0 ]; then
  echo "sync-chart-crds: no CRD found in $src" >&2
  exit 1
fi

drift=0
for f in "${sources[@]}"; do
  name=$(basename "$f")
  if ! cmp -s "$f" "$dst/$name"; then
    drift=1
    if [ $check = 1 ]; then
      echo "sync-chart-crds: charts/infergate/crds/$name differs from crds/$name" >&2
    else
      mkdir -p "$dst"
      install -m 0644 "$f" "$dst/$name.tmp" && mv "$dst/$name.tmp" "$dst/$name"
      echo "sync-chart-crds: copied crds/$name" >&2
    fi
  fi
done
# A CRD removed from crds/ must leave the chart too, or Helm would keep installing it.
for f in "$dst"/*.yaml; do
  name=$(basename "$f")
  if [ ! -e "$src/$name" ]; then
    drift=1
    if [ $check = 1 ]; then
      echo "sync-chart-crds: charts/infergate/crds/$name has no counterpart in crds/" >&2
    else
      rm -f "$f"
      echo "sync-chart-crds: removed charts/infergate/crds/$name" >&2
    fi
  fi
done
if [ $check = 1 ] && [ $drift = 1 ]; then
  echo "sync-chart-crds: run scripts/sync-chart-crds.sh to update the chart" >&2
  exit 1
fi
exit 0
