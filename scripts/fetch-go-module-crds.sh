#!/usr/bin/env bash
# CRD files exactly as a Go module ships them, fetched once with `go mod download` and cached under
# $EDL_CACHE_DIR/<name>/<version>/ (keyed by version). Prints that folder.
# Usage: fetch-go-module-crds.sh NAME MODULE VERSION PATH_PATTERN KIND...
#   PATH_PATTERN is the file's path inside the module with {kind} for each KIND, e.g.
#   deploy/crds/cert-manager.io_{kind}.yaml
set -euo pipefail
name="$1" module="$2" version="$3" pattern="$4"
shift 4
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/${name}/${version}"
if [[ -f "${cache}/.complete" ]]; then
  echo "${cache}"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# Outside any go.mod, so the download does not touch a module of this repository.
info=$(cd "${work}" && GOFLAGS=-mod=mod go mod download -json "${module}@${version}") || {
  echo "fetch ${name}: go mod download ${module}@${version} failed:" >&2
  echo "${info:-}" >&2
  exit 1
}
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"${info}")
if [[ -z "${dir}" ]]; then
  echo "fetch ${name}: no module folder in: ${info}" >&2
  exit 1
fi
mkdir -p "${work}/crds"
for kind in "$@"; do
  cp "${dir}/${pattern//\{kind\}/${kind}}" "${work}/crds/"
done
touch "${work}/crds/.complete"
mkdir -p "$(dirname "${cache}")"
rm -rf "${cache}.partial"
mv "${work}/crds" "${cache}.partial"
mv -T "${cache}.partial" "${cache}" 2>/dev/null || test -f "${cache}/.complete"
echo "${cache}"
