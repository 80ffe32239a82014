#!/usr/bin/env bash
# cert-manager's CRDs for Certificate and Issuer, exactly as its
# Go module ships them (deploy/crds/), for the e2e schema check of the Helm chart's
# tls.mode=certManager. Fetched once with `go mod download`, cached under
# $EDL_CACHE_DIR/cert-manager-crds/<version>/. Prints that folder.
set -euo pipefail
VERSION="${CERT_MANAGER_VERSION:-v1.21.2}"
MODULE=github.com/cert-manager/cert-manager
KINDS=(certificates issuers)
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/cert-manager-crds/${VERSION}"
if [[ -f "${cache}/.complete" ]]; then
  echo "${cache}"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# Outside any go.mod, so the download does not touch a module of this repository.
info=$(cd "${work}" && GOFLAGS=-mod=mod go mod download -json "${MODULE}@${VERSION}") || {
  echo "fetch-cert-manager-crds: go mod download ${MODULE}@${VERSION} failed:" >&2
  echo "${info:-}" >&2
  exit 1
}
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"${info}")
if [[ -z "${dir}" ]]; then
  echo "fetch-cert-manager-crds: no module folder in: ${info}" >&2
  exit 1
fi
mkdir -p "${work}/crds"
for kind in "${KINDS[@]}"; do
  cp "${dir}/deploy/crds/cert-manager.io_${kind}.yaml" "${work}/crds/"
done
touch "${work}/crds/.complete"
mkdir -p "$(dirname "${cache}")"
rm -rf "${cache}.partial"
mv "${work}/crds" "${cache}.partial"
mv -T "${cache}.partial" "${cache}" 2>/dev/null || test -f "${cache}/.complete"
echo "${cache}"
