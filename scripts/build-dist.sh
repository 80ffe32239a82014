#!/usr/bin/env bash
# Builds the release artifacts into a folder (docs/release.md): the sdist and wheel of edl-k8s
# (`python -m build`, in an isolated build environment), both charts packaged by helm, a
# CycloneDX SBOM of the environment the wheel installs (base install, and one per extra named in
# SBOM_EXTRAS, default "adapter"), IMAGES (the images of this version and their ids; with
# IMAGES=1 `make images` builds them first), and SHA256SUMS over them all. IMAGE_REPO (default
# localhost) names the images, and the packaged charts' default images with them. The charts'
# version and appVersion must be pyproject.toml's version: a release is one version everywhere.
# Usage: build-dist.sh PYTHON OUT_DIR
set -euo pipefail
py="$1"
out="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version="$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
for chart in charts/edl charts/edl-trainer; do
  for key in version appVersion; do
    got="$(awk -v k="$key:" '$1 == k {gsub(/"/, "", $2); print $2}' "$chart/Chart.yaml")"
    if [[ "$got" != "$version" ]]; then
      echo "dist: $chart/Chart.yaml $key is '$got', pyproject.toml's version is '$version'" >&2
      exit 1
    fi
  done
done
mkdir -p "$out"
# Only what this script makes is replaced; anything else in the folder is left alone.
rm -f "$out"/edl_k8s-"$version"* "$out"/edl-"$version".tgz "$out"/edl-trainer-"$version".tgz \
  "$out"/SHA256SUMS "$out"/IMAGES
if [[ "${IMAGES:-}" == 1 ]]; then
  bash scripts/build-images.sh >/dev/null
fi
"$py" -m build --sdist --wheel --outdir "$out" . >"$out/.build.log" 2>&1 \
  || { cat "$out/.build.log" >&2; echo "dist: python -m build failed" >&2; exit 1; }
rm -f "$out/.build.log"
helm="$(bash scripts/build-helm.sh)"
repo="${IMAGE_REPO:-localhost}"
bash scripts/package-charts.sh "$helm" "$out" "$repo"

# The SBOMs: what `pip install` of this wheel puts into an environment, read back from that
# environment by cyclonedx-py (installed metadata: versions, licenses, purls), as a scanner
# (Trivy, Grype, Dependency-Track) reads an image. The venv has no pip of its own, so only the
# wheel's closure is listed; its dependencies come from pip's cache and the configured index.
wheel="$out/edl_k8s-$version-py3-none-any.whl"
cdx="$(bash scripts/install-sbom-tool.sh "$py" | tail -n1)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
sboms=()
for extra in "" ${SBOM_EXTRAS-adapter}; do
  name="edl_k8s-$version${extra:+-$extra}.cdx.json"
  "$py" -m venv --without-pip "$scratch/$extra-venv"
  "$py" -m pip --python "$scratch/$extra-venv/bin/python" install -q --disable-pip-version-check \
    "$wheel${extra:+[$extra]}" >&2 || { echo "dist: cannot install $wheel${extra:+[$extra]}" >&2; exit 1; }
  "$cdx" environment --pyproject pyproject.toml --mc-type library --output-reproducible \
    --of JSON -o "$out/$name" "$scratch/$extra-venv/bin/python"
  rm -rf "$scratch/$extra-venv"
  sboms+=("$name")
done

# IMAGES: each image of this version that the local image store holds, with its image id (the
# digest of its config, which a push keeps; the registry's manifest digest is known only after
# the push: `podman push --digestfile`). One line each: NAME REFERENCE IMAGE-ID.
builder=""
for b in podman docker; do command -v "$b" >/dev/null 2>&1 && { builder="$b"; break; }; done
{
  echo "# The images of edl-k8s $version: name, reference, image id (docs/release.md)."
  for pair in adapter:edl trainer:edl-trainer trainer-torch:edl-trainer-torch; do
    ref="$repo/${pair#*:}:$version"
    id=""
    if [[ -n "$builder" ]]; then
      id="$("$builder" image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)"
    fi
    if [[ -n "$id" ]]; then
      echo "${pair%%:*} $ref sha256:${id#sha256:}"
    else
      echo "dist: image $ref is not built (make images, or make dist IMAGES=1): left out of IMAGES" >&2
    fi
  done
} >"$out/IMAGES"
(
  cd "$out"
  sha256sum edl_k8s-"$version".tar.gz edl_k8s-"$version"-py3-none-any.whl \
    edl-"$version".tgz edl-trainer-"$version".tgz "${sboms[@]}" IMAGES >SHA256SUMS
)
echo "dist: $(cd "$out" && pwd):" >&2
sed 's/^/  /' "$out/SHA256SUMS" >&2
