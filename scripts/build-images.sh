#!/usr/bin/env bash
# `make images`: builds the adapter and the CPU trainer image (and the GPU trainer with
# EDL_IMAGES="adapter trainer trainer-gpu") with podman, buildah or docker, whichever works here,
# installing podman + buildah + runc from Debian when none does. Without BASE_IMAGE it builds a
# local Debian base with mmdebstrap (no registry needed; cached in $EDL_CACHE_DIR/images).
# An image whose inputs have not changed since it was built is not rebuilt: each carries the
# label edl.build-key, a hash of everything that goes into it.
# Prints one line per image: NAME REFERENCE (e.g. "adapter localhost/edl:0.1.0").
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES="${EDL_IMAGES:-adapter trainer}"
REPO="${IMAGE_REPO:-localhost}"
VERSION="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
GPU_PADDLE="${GPU_PADDLE_REQUIREMENT:-paddlepaddle-gpu==3.3.1}"
GPU_INDEX="${GPU_PADDLE_INDEX_URL:-https://www.paddlepaddle.org.cn/packages/stable/cu126/}"

need_mm=0
[[ -z "${BASE_IMAGE:-}" ]] && need_mm=1
builder="$(EDL_NEED_MMDEBSTRAP=$need_mm bash scripts/install-image-tools.sh | tail -n1)"
base="${BASE_IMAGE:-$(bash scripts/build-base-image.sh "$builder" | tail -n1)}"

label_of() {  # the edl.build-key label of image $1, or nothing
  case "$builder" in
    podman) podman image inspect --format '{{index .Labels "edl.build-key"}}' "$1" 2>/dev/null ;;
    buildah) buildah inspect --type image --format '{{index .OCIv1.Config.Labels "edl.build-key"}}' "$1" 2>/dev/null ;;
    docker) docker image inspect --format '{{index .Config.Labels "edl.build-key"}}' "$1" 2>/dev/null ;;
  esac || true
}

image_id() {  # the id of image $1, or nothing
  case "$builder" in
    podman) podman image inspect --format '{{.Id}}' "$1" 2>/dev/null ;;
    buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null ;;
    docker) docker image inspect --format '{{.Id}}' "$1" 2>/dev/null ;;
  esac || true
}

# Everything that goes into an image: the Containerfile, the files it copies, the base image.
CONTEXT=(images/Containerfile .dockerignore pyproject.toml README.md LICENSE images/constraints.txt
  images/pyproject-deps.py images/adapter-rootfs.py agent metrics_adapter edl_common edl_sizing examples)
inputs_key() {
  { echo "$1 $2 $(image_id "$base")"
    { git ls-files -co --exclude-standard -- "${CONTEXT[@]}" 2>/dev/null \
        || find "${CONTEXT[@]}" -type f; } | grep -v -e '__pycache__' -e '\.pyc$' | sort \
      | while read -r f; do if [[ -f "$f" ]]; then sha1sum "$f"; fi; done
  } | sha256sum | cut -c1-16
}

build() {  # NAME TARGET TAG [build args...]
  local name="$1" target="$2" ref="$3"; shift 3
  local key; key="$(inputs_key "$target" "$*")"
  if [[ "$(label_of "$ref")" == "$key" ]]; then
    echo "images: $ref is up to date" >&2
    echo "$name $ref"
    return
  fi
  local args=(-f images/Containerfile --target "$target" -t "$ref" --label "edl.build-key=$key"
    --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$VERSION"
    --build-arg "VCS_REF=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    --build-arg "BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$@")
  # pip in the build uses the host's CA bundle (a proxy's CA, say) as a secret, never a layer.
  local ca="${EDL_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  [[ -s "$ca" ]] && args+=(--secret "id=ca,src=$ca")
  local start previous; start=$(date +%s)
  previous="$(image_id "$ref")"
  echo "images: building $ref (target $target, base $base) with $builder" >&2
  case "$builder" in
    podman) podman build --isolation "${EDL_BUILD_ISOLATION:-chroot}" --network host "${args[@]}" . >&2 ;;
    buildah) buildah bud --isolation "${EDL_BUILD_ISOLATION:-chroot}" --network host "${args[@]}" . >&2 ;;
    docker) DOCKER_BUILDKIT=1 docker build --network host "${args[@]}" . >&2 ;;
  esac
  echo "images: built $ref in $(( $(date +%s) - start )) s" >&2
  # The image this one replaces holds a full copy of the venv: drop it (the stage cache stays).
  if [[ -n "$previous" && "$previous" != "$(image_id "$ref")" ]]; then
    "$builder" rmi "$previous" >/dev/null 2>&1 || true
  fi
  echo "$name $ref"
}

for image in $IMAGES; do
  case "$image" in
    adapter) build adapter adapter "$REPO/edl:$VERSION" ;;
    trainer) build trainer trainer "$REPO/edl-trainer:$VERSION" ;;
    trainer-gpu) build trainer-gpu trainer "$REPO/edl-trainer:$VERSION-gpu" \
      --build-arg "PADDLE_REQUIREMENT=$GPU_PADDLE" --build-arg "PADDLE_INDEX_URL=$GPU_INDEX" ;;
    *) echo "images: unknown image '$image' (adapter, trainer, trainer-gpu)" >&2; exit 2 ;;
  esac
done
