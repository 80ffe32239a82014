#!/usr/bin/env bash
# Finds a container image builder (podman, buildah, or docker with a running daemon) and, when
# there is none, installs podman + buildah + runc from Debian. EDL_NEED_MMDEBSTRAP=1 also makes
# sure of mmdebstrap (for the local Debian base image), EDL_NEED_RUNC=1 of runc. Prints the
# builder's name on the last line of stdout. Without a builder and without apt-get, it says in
# one line what to install and exits 1.
set -euo pipefail

usable() {
  case "$1" in
    podman | buildah) command -v "$1" >/dev/null 2>&1 ;;
    docker) command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1 ;;
  esac
}

pick() {
  local preferred="${EDL_IMAGE_BUILDER:-}"
  if [[ -n "$preferred" ]]; then
    usable "$preferred" && { echo "$preferred"; return 0; }
    return 1
  fi
  for b in podman buildah docker; do
    usable "$b" && { echo "$b"; return 0; }
  done
  return 1
}

need=()
builder="$(pick || true)"
if [[ -z "$builder" ]]; then
  if [[ -n "${EDL_IMAGE_BUILDER:-}" && "${EDL_IMAGE_BUILDER}" != podman && "${EDL_IMAGE_BUILDER}" != buildah ]]; then
    echo "edl images: EDL_IMAGE_BUILDER=${EDL_IMAGE_BUILDER} is not usable here (for docker: is the daemon running?)" >&2
    exit 1
  fi
  need+=(podman buildah runc)
fi
if [[ "${EDL_NEED_MMDEBSTRAP:-0}" == 1 ]] && ! command -v mmdebstrap >/dev/null 2>&1; then
  need+=(mmdebstrap)
fi
# The e2e runs containers with runc (crun fails on hybrid cgroups here): EDL_NEED_RUNC=1.
if [[ "${EDL_NEED_RUNC:-0}" == 1 ]] && ! command -v runc >/dev/null 2>&1 && [[ ! " ${need[*]} " == *" runc "* ]]; then
  need+=(runc)
fi
if ((${#need[@]} > 0)); then
  if ! command -v apt-get >/dev/null 2>&1; then
    if [[ -z "$builder" ]]; then
      echo "edl images: no container builder found and no apt-get to install one: install podman (or buildah, or docker with a running daemon)$( [[ "${EDL_NEED_MMDEBSTRAP:-0}" == 1 ]] && echo " and mmdebstrap")" >&2
    else
      echo "edl images: mmdebstrap (for the local Debian base image) is missing and there is no apt-get: install mmdebstrap, or set BASE_IMAGE to an image you can pull" >&2
    fi
    exit 1
  fi
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  echo "edl images: installing ${need[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  builder="${builder:-$(pick)}"
fi
echo "$builder"
