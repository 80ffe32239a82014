#!/usr/bin/env bash
# Installs the Debian packages the tests need, once: prometheus (server and promtool),
# openssh-server (the SFTP server of the fsspec checkpoint tests; each test starts its own sshd
# on 127.0.0.1 as the current user, never the system's) and shellcheck (bench/gpu_check.sh's
# lint, tests/unit/install/test_gpu_check.py).
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
if ((${#need[@]} == 0)); then exit 0; fi
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
echo "system deps: installing ${need[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
installed() { [[ " ${need[*]} " == *" $1 "* ]]; }
# The package's postinst may start a Prometheus on :9090; tests start their own on free ports.
# Only right after installing it: later, a prometheus running is another suite's.
if installed prometheus; then
  $SUDO systemctl stop prometheus >/dev/null 2>&1 || true
  pkill -x prometheus >/dev/null 2>&1 || true
fi
# openssh-server's postinst may start the system's sshd on :22; the tests need none of it.
if installed openssh-server; then
  $SUDO systemctl stop ssh.service ssh.socket >/dev/null 2>&1 || true
  $SUDO service ssh stop >/dev/null 2>&1 || true
fi
