#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and etcd from the Go module proxy into a
# cache outside the clone, keyed by version, so a warm machine skips the build.
# Prints the bin directory on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$here/k8s/go.mod")"
ETCD_VERSION="$(awk '/^require go.etcd.io\/etcd\/server\/v3/ {print $3}' "$here/etcd/go.mod")"
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/controlplane/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
bin="$cache/bin"
if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/kube-scheduler" && -x "$bin/etcd" ]]; then
  echo "control plane: cached in $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
# One build at a time per cache (two clones or worktrees building at once raced on the .tmp files):
# the second waits, then finds the binaries the first built.
exec 9>"$cache/.build.lock"
flock 9
if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/kube-scheduler" && -x "$bin/etcd" ]]; then
  echo "control plane: cached in $bin (built by another run meanwhile)" >&2
  echo "$bin"
  exit 0
fi
step() { echo "control plane: $*" >&2; }
fail() { echo "control plane build FAILED at step: $1 (see output above)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-mod=mod
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ld="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
start=$(date +%s)
if [[ ! -x "$bin/etcd" ]]; then
  step "building etcd ${ETCD_VERSION}"
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" .) || fail "go build etcd"
  mv "$bin/etcd.tmp" "$bin/etcd"
fi
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  [[ -x "$bin/${cmd}" ]] && continue
  step "building ${cmd} ${K8S_VERSION}"
  (cd "$here/k8s" && go build -trimpath -ldflags "$ld" -o "$bin/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}") \
    || fail "go build ${cmd}"
  mv "$bin/${cmd}.tmp" "$bin/${cmd}"
done
step "built in $(( $(date +%s) - start )) s into $bin"
echo "$bin"
