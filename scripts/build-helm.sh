#!/usr/bin/env bash
# Builds helm from the Go module proxy (the version pinned in scripts/helm/go.mod) into a cache outside
# the clone, keyed by version, so a warm machine skips the build. Prints the binary's path on the last
# line of stdout. `make helm` and the chart tests call it.
set -euo pipefail
here="$(cd "$(dirname "$0")/helm" && pwd)"
HELM_VERSION="$(awk '/^require helm.sh\/helm\/v3/ {print $3}' "$here/go.mod")"
bin="${EDL_CACHE_DIR:-$HOME/.cache/edl}/helm/${HELM_VERSION}/bin"
if [[ -x "$bin/helm" ]]; then
  echo "helm: cached in $bin" >&2
  echo "$bin/helm"
  exit 0
fi
command -v go >/dev/null || { echo "helm: building needs Go (https://go.dev/dl/); none on PATH" >&2; exit 1; }
mkdir -p "$bin"
# One build at a time per cache (two clones building at once would race on helm.tmp): the second
# waits, then finds the binary the first built.
exec 9>"$bin/../.build.lock"
flock 9
if [[ -x "$bin/helm" ]]; then
  echo "helm: cached in $bin (built by another run meanwhile)" >&2
  echo "$bin/helm"
  exit 0
fi
echo "helm: building ${HELM_VERSION} from the Go module proxy" >&2
start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS=-mod=mod
# As helm's own Makefile: the Kubernetes version `helm template` and `helm lint` assume without a
# cluster is the client-go minor helm is built with (else 1.20).
kminor="$(awk '/k8s.io\/client-go / {print $2}' "$here/go.mod" | cut -d. -f2)"
ld="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/chartutil pkg/lint/rules; do
  ld+=" -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1 -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${kminor}"
done
(cd "$here" && go build -trimpath -ldflags "$ld" -o "$bin/helm.tmp" helm.sh/helm/v3/cmd/helm) \
  || { echo "helm build FAILED (go build helm.sh/helm/v3/cmd/helm, see output above)" >&2; exit 1; }
mv "$bin/helm.tmp" "$bin/helm"
echo "helm: built in $(( $(date +%s) - start )) s into $bin" >&2
echo "$bin/helm"
