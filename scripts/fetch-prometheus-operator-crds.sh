#!/usr/bin/env bash
# prometheus-operator's CRDs for PodMonitor, ServiceMonitor and PrometheusRule, exactly as its
# Go module ships them (example/prometheus-operator-crd/), for the e2e schema check of
# manifests/monitoring. Fetched once with `go mod download`, cached under
# $EDL_CACHE_DIR/prometheus-operator-crds/<version>/. Prints that folder.
set -euo pipefail
VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.89.0}"
MODULE=github.com/prometheus-operator/prometheus-operator
KINDS=(podmonitors servicemonitors prometheusrules)
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/prometheus-operator-crds/${VERSION}"
if [[ -f "${cache}/.complete" ]]; then
  echo "${cache}"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# Outside any go.mod, so the download does not touch a module of this repository.
info=$(cd "${work}" && GOFLAGS=-mod=mod go mod download -json "${MODULE}@${VERSION}") || {
  echo "fetch-prometheus-operator-crds: go mod download ${MODULE}@${VERSION} failed:" >&2
  echo "${info:-}" >&2
  exit 1
}
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"${info}")
if [[ -z "${dir}" ]]; then
  echo "fetch-prometheus-operator-crds: no module folder in: ${info}" >&2
  exit 1
fi
mkdir -p "${work}/crds"
for kind in "${KINDS[@]}"; do
  cp "${dir}/example/prometheus-operator-crd/monitoring.coreos.com_${kind}.yaml" "${work}/crds/"
done
touch "${work}/crds/.complete"
mkdir -p "$(dirname "${cache}")"
rm -rf "${cache}.partial"
mv "${work}/crds" "${cache}.partial"
mv -T "${cache}.partial" "${cache}" 2>/dev/null || test -f "${cache}/.complete"
echo "${cache}"
