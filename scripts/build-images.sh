#!/usr/bin/env bash
# `make images`: builds the adapter, the CPU trainer (Paddle) and the PyTorch CPU trainer image
# (and the GPU trainers with EDL_IMAGES="adapter trainer trainer-gpu trainer-torch-gpu": Paddle
# from Paddle's CUDA index, PyTorch from the machine's whole torch install) with podman,
# buildah or docker, whichever works here,
# installing podman + buildah + runc from Debian when none does. Without BASE_IMAGE it builds a
# local Debian base with mmdebstrap (no registry needed; cached in $EDL_CACHE_DIR/images).
# An image whose inputs have not changed since it was built is not rebuilt: each carries the
# label edl.build-key, a hash of everything that goes into it. The torch image takes torch from
# the machine's shared install (scripts/install-torch.sh, which `make venv` runs): no registry.
# The build stages of an image are tagged $REPO/edl-build:IMAGE-STAGE (the layer cache of the
# next build); a stage image one of these builds leaves untagged is removed, so no <none> image
# stays behind (only images made from images/Containerfile, by their labels, are touched).
# Prints one line per image: NAME REFERENCE (e.g. "adapter localhost/edl:0.1.0").
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES="${EDL_IMAGES:-adapter trainer trainer-torch}"
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
  images/pyproject-deps.py images/adapter-rootfs.py images/torch-site.py agent metrics_adapter edl_common edl_sizing examples)
inputs_key() {
  { echo "$1 $2 $(image_id "$base")"
    { git ls-files -co --exclude-standard -- "${CONTEXT[@]}" 2>/dev/null \
        || find "${CONTEXT[@]}" -type f; } | grep -v -e '__pycache__' -e '\.pyc$' | sort \
      | while read -r f; do if [[ -f "$f" ]]; then sha1sum "$f"; fi; done
  } | sha256sum | cut -c1-16
}

CACHE="${EDL_CACHE_DIR:-$HOME/.cache/edl}"
TORCH_PIN="$(python3 -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(next(r for r in x["optional-dependencies"]["torch"] if r.startswith("torch")))')"
TORCH_INSTALL="$CACHE/torch/${TORCH_PIN/==/-}-cp311"  # the images' Python is 3.11
TORCH_SITE="$CACHE/images/torch-site-${TORCH_PIN/==/-}-cp311"
TORCH_GPU_SITE="$CACHE/images/torch-gpu-site-${TORCH_PIN/==/-}-cp311"

torch_site() {  # the trainer-torch images' torch trees (hard links into the shared install)
  if [[ ! -f "$TORCH_INSTALL/.complete" ]]; then
    if [[ -x .venv/bin/python ]]; then
      bash scripts/install-torch.sh .venv >&2
    else
      echo "images: trainer-torch needs torch from scripts/install-torch.sh (run make venv first): $TORCH_INSTALL is missing" >&2
      exit 1
    fi
  fi
  if [[ ! -f "$TORCH_SITE/torch/__init__.py" || "$TORCH_INSTALL/.complete" -nt "$TORCH_SITE" ]]; then
    python3 images/torch-site.py "$TORCH_INSTALL" "$TORCH_SITE" >/dev/null
  fi
}

torch_gpu_site() {  # the whole install: CUDA libraries, NCCL, triton (the driver is the node's)
  torch_site
  if [[ ! -f "$TORCH_GPU_SITE/torch/__init__.py" || "$TORCH_INSTALL/.complete" -nt "$TORCH_GPU_SITE" ]]; then
    python3 images/torch-site.py --gpu "$TORCH_INSTALL" "$TORCH_GPU_SITE" >/dev/null
  fi
}

stages_of() {  # the build stages below image target $1 (tagged as the next build's cache)
  case "$1" in
    adapter) echo "deps adapter-deps app adapter-rootfs" ;;
    trainer) echo "deps trainer-deps app runtime" ;;
    trainer-torch) echo "deps torch-deps app runtime" ;;
  esac
}

run_build() {  # builder-specific build of images/Containerfile with arguments "$@"
  case "$builder" in
    podman) podman build --isolation "${EDL_BUILD_ISOLATION:-chroot}" --network host "$@" . >&2 ;;
    buildah) buildah bud --isolation "${EDL_BUILD_ISOLATION:-chroot}" --network host "$@" . >&2 ;;
    docker) DOCKER_BUILDKIT=1 docker build --network host "$@" . >&2 ;;
  esac
}

build() {  # NAME TARGET TAG [build args...]
  local name="$1" target="$2" ref="$3"; shift 3
  local key; key="$(inputs_key "$target" "$*")"
  if [[ "$(label_of "$ref")" == "$key" ]]; then
    echo "images: $ref is up to date" >&2
    echo "$name $ref"
    return
  fi
  if [[ "$name" == trainer-torch-gpu ]]; then
    torch_gpu_site
    set -- "$@" --build-context "torch=$TORCH_GPU_SITE"
  elif [[ "$target" == trainer-torch ]]; then
    torch_site
    set -- "$@" --build-context "torch=$TORCH_SITE"
  fi
  # pip in the build uses the host's CA bundle (a proxy's CA, say) as a secret, never a layer.
  local ca="${EDL_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  [[ -s "$ca" ]] && set -- "$@" --secret "id=ca,src=$ca"
  local common=(-f images/Containerfile --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$VERSION"
    --build-arg "VCS_REF=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" "$@")
  local args=("${common[@]}" --target "$target" -t "$ref" --label "edl.build-key=$key"
    --build-arg "BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
  local start previous; start=$(date +%s)
  previous="$(image_id "$ref")"
  echo "images: building $ref (target $target, base $base) with $builder" >&2
  local stage stage_ref stage_previous
  for stage in $(stages_of "$target"); do  # each stage tagged (its cached layers: seconds)
    stage_ref="$REPO/edl-build:$name-$stage"
    stage_previous="$(image_id "$stage_ref")"
    run_build "${common[@]}" --target "$stage" -t "$stage_ref"
    if [[ -n "$stage_previous" && "$stage_previous" != "$(image_id "$stage_ref")" ]]; then
      "$builder" rmi "$stage_previous" >/dev/null 2>&1 || true
    fi
  done
  run_build "${args[@]}"
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
    trainer-torch) build trainer-torch trainer-torch "$REPO/edl-trainer-torch:$VERSION" ;;
    trainer-torch-gpu) build trainer-torch-gpu trainer-torch "$REPO/edl-trainer-torch:$VERSION-gpu" \
      --build-arg "TORCH_EXTRAS=torch gpu s3" ;;
    *) echo "images: unknown image '$image' (adapter, trainer, trainer-gpu, trainer-torch, trainer-torch-gpu)" >&2
      exit 2 ;;
  esac
done

# Stage images of these builds that no tag holds any more (podman and buildah list them as
# <none>): only images made from images/Containerfile (label edl.stage, or edl.build-key, which
# podman also puts on the stages of a final build), never anyone else's. An image a container
# still runs from stays (podman refuses; that container is somebody's).
case "$builder" in
  podman | buildah)
    for label in edl.stage edl.build-key; do
      leftovers="$("$builder" images -q --filter dangling=true --filter "label=$label" 2>/dev/null || true)"
      if [[ -n "$leftovers" ]]; then
        # shellcheck disable=SC2086  # one id per word
        "$builder" rmi $leftovers >/dev/null 2>&1 || true
      fi
    done ;;
esac
