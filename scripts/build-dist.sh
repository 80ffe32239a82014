#!/usr/bin/env bash
# Builds the release artifacts into a folder (docs/release.md): the sdist and wheel of edl-k8s
# (`python -m build`, in an isolated build environment), both charts packaged by helm, and
# SHA256SUMS over them. The charts' version and appVersion must be pyproject.toml's version: a
# release is one version everywhere. Usage: build-dist.sh PYTHON OUT_DIR
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
  "$out"/SHA256SUMS
"$py" -m build --sdist --wheel --outdir "$out" . >"$out/.build.log" 2>&1 \
  || { cat "$out/.build.log" >&2; echo "dist: python -m build failed" >&2; exit 1; }
rm -f "$out/.build.log"
helm="$(bash scripts/build-helm.sh)"
"$helm" lint --strict charts/edl charts/edl-trainer >/dev/null
"$helm" package charts/edl charts/edl-trainer --destination "$out" >/dev/null
(
  cd "$out"
  sha256sum edl_k8s-"$version".tar.gz edl_k8s-"$version"-py3-none-any.whl \
    edl-"$version".tgz edl-trainer-"$version".tgz >SHA256SUMS
)
echo "dist: $(cd "$out" && pwd):" >&2
sed 's/^/  /' "$out/SHA256SUMS" >&2
