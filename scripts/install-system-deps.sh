#!/usr/bin/env bash
# Installs the Debian packages the tests need (prometheus: server and promtool), once.
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
if ((${#need[@]} == 0)); then exit 0; fi
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
echo "system deps: installing ${need[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The package's postinst may start a Prometheus on :9090; tests start their own on free ports.
$SUDO systemctl stop prometheus >/dev/null 2>&1 || true
pkill -x prometheus >/dev/null 2>&1 || true
