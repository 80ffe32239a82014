#!/usr/bin/env bash
# Builds the e2e node: kubelet (k8s.io/kubernetes cmd/kubelet, the control plane's version, from
# tests/e2e/controlplane/k8s) and containerd v2 with its runc shim and the ctr client
# (github.com/containerd/containerd/v2, pinned in tests/e2e/node/containerd/go.mod), and the
# pods' sandbox process `pause` (tests/e2e/node/pause: the harness puts it into an image), from the
# Go module proxy into a cache outside the clone, keyed by both versions, so a warm machine
# skips the build. runc is the system's (Debian's /usr/sbin/runc; installed with apt-get when
# missing, as scripts/install-system-deps.sh does).
# The e2e harness (tests/e2e/harness/kubelet_node.py) starts them; only `make e2e-kubelet` needs it.
# Prints the bin directory on the last line of stdout.
# GOFLAGS from the caller are kept (e.g. GOFLAGS=-p=1 on a crowded machine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
k8s_dir="$here/../controlplane/k8s"
K8S_VERSION="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$k8s_dir/go.mod")"
CONTAINERD_VERSION="$(awk '/^require github.com\/containerd\/containerd\/v2/ {print $3}' "$here/containerd/go.mod")"
PAUSE_SUM="$(cat "$here/pause/main.go" "$here/pause/go.mod" | sha1sum | cut -c1-8)"
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/node/k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_pause-${PAUSE_SUM}"
bin="$cache/bin"
BINARIES=(kubelet containerd containerd-shim-runc-v2 ctr pause)
ready() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}
need_runc() {
  [[ -x /usr/sbin/runc ]] || command -v runc >/dev/null 2>&1 && return 0
  echo "node: installing runc from Debian" >&2
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends runc >/dev/null
}
if ready; then
  need_runc
  echo "node: cached in $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
# One build at a time per cache: a second run waits, then finds what the first built.
exec 9>"$cache/.build.lock"
flock 9
need_runc
if ready; then
  echo "node: cached in $bin (built by another run meanwhile)" >&2
  echo "$bin"
  exit 0
fi
step() { echo "node: $*" >&2; }
fail() { echo "node build FAILED at step: $1 (see output above)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod ${GOFLAGS:-}"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ld="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ctd_ld="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
start=$(date +%s)
if [[ ! -x "$bin/kubelet" ]]; then
  step "building kubelet ${K8S_VERSION}"
  (cd "$k8s_dir" && go build -trimpath -ldflags "$ld" -o "$bin/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet) \
    || fail "go build kubelet"
  mv "$bin/kubelet.tmp" "$bin/kubelet"
fi
for cmd in containerd containerd-shim-runc-v2 ctr; do
  [[ -x "$bin/${cmd}" ]] && continue
  step "building ${cmd} ${CONTAINERD_VERSION}"
  (cd "$here/containerd" && go build -trimpath -ldflags "$ctd_ld" -o "$bin/${cmd}.tmp" \
    "github.com/containerd/containerd/v2/cmd/${cmd}") || fail "go build ${cmd}"
  mv "$bin/${cmd}.tmp" "$bin/${cmd}"
done
if [[ ! -x "$bin/pause" ]]; then
  step "building pause (the pods' sandbox process)"
  (cd "$here/pause" && go build -trimpath -ldflags "-s -w" -o "$bin/pause.tmp" .) || fail "go build pause"
  mv "$bin/pause.tmp" "$bin/pause"
fi
step "built in $(( $(date +%s) - start )) s into $bin"
echo "$bin"
