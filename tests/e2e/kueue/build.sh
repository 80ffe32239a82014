#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy into a cache
# outside the clone, keyed by version, so a warm machine skips the build; beside it, from the
# same module's config/: its CRDs (crds/, the plain bases: no conversion webhook) and its
# webhook configurations (webhooks.yaml, before kustomize names them). The e2e harness
# (tests/e2e/harness/kueue.py) starts it against the loopback control plane.
# Prints the cache folder (bin/kueue, crds/, webhooks.yaml) on the last line of stdout.
# Only the Kueue e2e needs it: the fast layers of `make test` never run this.
# GOFLAGS from the caller are kept (e.g. GOFLAGS=-p=1 on a crowded machine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require sigs.k8s.io\/kueue/ {print $3}' "$here/go.mod")"
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/kueue/${VERSION}"
bin="$cache/bin/kueue"
ready() { [[ -x "$bin" && -s "$cache/webhooks.yaml" && -s "$cache/crds/kueue.x-k8s.io_clusterqueues.yaml" ]]; }
if ready; then
  echo "kueue: cached in $cache" >&2
  echo "$cache"
  exit 0
fi
mkdir -p "$cache/bin"
# One build at a time per cache: a second run waits, then finds what the first built.
exec 9>"$cache/.build.lock"
flock 9
if ready; then
  echo "kueue: cached in $cache (built by another run meanwhile)" >&2
  echo "$cache"
  exit 0
fi
export CGO_ENABLED=0 GOFLAGS="-mod=mod ${GOFLAGS:-}"
if [[ ! -x "$bin" ]]; then
  echo "kueue: building ${VERSION} from the Go module proxy (cold: about 13 min on 2 shared cores)" >&2
  start=$(date +%s)
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" sigs.k8s.io/kueue/cmd/kueue) \
    || { echo "kueue build FAILED (see output above)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
  echo "kueue: built in $(( $(date +%s) - start )) s at $bin" >&2
fi
module_dir="$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)" \
  || { echo "kueue: cannot find the module's folder for its config" >&2; exit 1; }
rm -rf "$cache/crds.tmp" && mkdir -p "$cache/crds.tmp"
cp "$module_dir"/config/components/crd/bases/*.yaml "$cache/crds.tmp/"
chmod u+w "$cache"/crds.tmp/*.yaml
rm -rf "$cache/crds" && mv "$cache/crds.tmp" "$cache/crds"
cp "$module_dir/config/components/webhook/manifests.yaml" "$cache/webhooks.yaml.tmp"
chmod u+w "$cache/webhooks.yaml.tmp"
mv "$cache/webhooks.yaml.tmp" "$cache/webhooks.yaml"
echo "$cache"
