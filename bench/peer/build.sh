#!/usr/bin/env bash
# Builds prometheus-adapter (the peer of bench/bench_adapter_peer.py) from the Go module proxy
# into a cache outside the clone, keyed by version, so a warm machine skips the build.
# Prints the binary's path on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require sigs.k8s.io\/prometheus-adapter/ {print $3}' "$here/go.mod")"
bin="${EDL_CACHE_DIR:-$HOME/.cache/edl}/prometheus-adapter/${VERSION}/bin/prometheus-adapter"
if [[ -x "$bin" ]]; then
  echo "prometheus-adapter: cached at $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
echo "prometheus-adapter: building ${VERSION} from the Go module proxy (cold: about 6 min on 2 cores)" >&2
start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS=-mod=mod
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" sigs.k8s.io/prometheus-adapter/cmd/adapter) \
  || { echo "prometheus-adapter build FAILED (see output above)" >&2; exit 1; }
mv "$bin.tmp" "$bin"
echo "prometheus-adapter: built in $(( $(date +%s) - start )) s at $bin" >&2
echo "$bin"
