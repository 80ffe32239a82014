#!/usr/bin/env bash
# Builds the local Debian base image for images/Containerfile with mmdebstrap (no registry is
# needed: only Debian's archive), caches its tarball in $EDL_CACHE_DIR/images keyed by the
# recipe, and imports it into the builder's storage once. Prints the image reference on the
# last line of stdout.   usage: build-base-image.sh BUILDER
set -euo pipefail
builder="${1:?usage: build-base-image.sh podman|buildah|docker}"
SUITE=bookworm
MIRROR="${EDL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${EDL_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
PACKAGES=python3,python3-venv,ca-certificates
# What an image never needs: docs, man pages, translations (dpkg path excludes, as slim images do).
EXCLUDES=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/lintian/*')
RECIPE_VERSION=1  # bump when anything below changes the image
recipe="v${RECIPE_VERSION} ${SUITE} ${PACKAGES} ${MIRROR} ${SECURITY} ${EXCLUDES[*]}"
key="$(printf '%s' "$recipe" | sha256sum | cut -c1-12)"
ref="localhost/edl-base:${SUITE}-${key}"
cache="${EDL_CACHE_DIR:-$HOME/.cache/edl}/images"
tarball="$cache/edl-base-${SUITE}-${key}.tar"

exists() {
  case "$builder" in
    podman) podman image exists "$ref" ;;
    buildah) buildah inspect --type image "$ref" >/dev/null 2>&1 ;;
    docker) docker image inspect "$ref" >/dev/null 2>&1 ;;
  esac
}

if exists; then
  echo "base image: $ref (cached)" >&2
  echo "$ref"
  exit 0
fi
if [[ ! -s "$tarball" ]]; then
  command -v mmdebstrap >/dev/null 2>&1 || {
    echo "base image: mmdebstrap is missing (apt-get install mmdebstrap), or set BASE_IMAGE" >&2
    exit 1
  }
  mkdir -p "$cache"
  dpkgopts=()
  for p in "${EXCLUDES[@]}"; do dpkgopts+=(--dpkgopt="path-exclude=$p"); done
  start=$(date +%s)
  echo "base image: mmdebstrap ${SUITE} (${PACKAGES})" >&2
  mmdebstrap --quiet --variant=minbase --include="$PACKAGES" "${dpkgopts[@]}" \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --format=tar "$SUITE" "$tarball.tmp" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY $SUITE-security main" >&2
  mv "$tarball.tmp" "$tarball"
  echo "base image: rootfs built in $(( $(date +%s) - start )) s ($(du -h "$tarball" | cut -f1))" >&2
fi
case "$builder" in
  podman) podman import --quiet --change 'CMD ["/usr/bin/python3"]' "$tarball" "$ref" >/dev/null ;;
  buildah)
    # buildah has no import: make a container from scratch, unpack the rootfs, commit it.
    ctr="$(buildah from scratch)"
    mnt="$(buildah mount "$ctr")"
    tar -C "$mnt" -xf "$tarball"
    buildah umount "$ctr" >/dev/null
    buildah config --cmd '["/usr/bin/python3"]' "$ctr"
    buildah commit --quiet --rm "$ctr" "$ref" >/dev/null ;;
  docker) docker import --change 'CMD ["/usr/bin/python3"]' "$tarball" "$ref" >/dev/null ;;
esac
echo "base image: imported $ref" >&2
echo "$ref"
