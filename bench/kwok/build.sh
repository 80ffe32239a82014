#!/usr/bin/env bash
# Builds kwok (the fake kubelet of bench/bench_scale.py: it keeps Node objects Ready and turns
# the pods bound to them Running) from the Go module proxy into a cache outside the clone, keyed
# by version, so a warm machine skips the build; beside it, stages.yaml: kwok's own "fast" node
# and pod stages from the same module (node-initialize, pod-ready, pod-complete, pod-delete).
# Prints the binary's path on the last line of stdout. Only the scale bench needs it: `make test`
# never runs this.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require sigs.k8s.io\/kwok/ {print $3}' "$here/go.mod")"
bin="${EDL_CACHE_DIR:-$HOME/.cache/edl}/kwok/${VERSION}/bin/kwok"
stages="$(dirname "$bin")/stages.yaml"
if [[ -x "$bin" && -s "$stages" ]]; then
  echo "kwok: cached at $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
exec 9>"$(dirname "$bin")/.build.lock"
flock 9
if [[ -x "$bin" && -s "$stages" ]]; then
  echo "kwok: cached at $bin (built by another run meanwhile)" >&2
  echo "$bin"
  exit 0
fi
export CGO_ENABLED=0 GOFLAGS=-mod=mod
if [[ ! -x "$bin" ]]; then
  echo "kwok: building ${VERSION} from the Go module proxy (needs Go >= 1.26; cold: about 8 min on 2 cores)" >&2
  start=$(date +%s)
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" sigs.k8s.io/kwok/cmd/kwok) \
    || { echo "kwok build FAILED (see output above)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
  echo "kwok: built in $(( $(date +%s) - start )) s at $bin" >&2
fi
module_dir="$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" \
  || { echo "kwok: cannot find the module's folder for its stages" >&2; exit 1; }
{
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml \
           pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$module_dir/kustomize/stage/$f"
  done
} > "$stages.tmp"
mv "$stages.tmp" "$stages"
echo "$bin"
