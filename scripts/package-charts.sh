#!/usr/bin/env bash
# Packages both charts into OUT_DIR with their default images named for the registry a publisher
# pushes to: image.repository becomes REPO/edl (the adapter's chart) and REPO/edl-trainer (the
# trainer's), the names `make images` tags under the same IMAGE_REPO. One setting names the
# images everywhere a release points at them; the charts in the tree keep `localhost/...`, what
# a local `make images` builds. The charts are linted (--strict) as packaged.
# Usage: package-charts.sh HELM OUT_DIR REPO
set -euo pipefail
helm="$1"
out="$2"
repo="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for chart in edl edl-trainer; do  # each chart's image is named as the chart is
  image="$repo/$chart"
  cp -r "$root/charts/$chart" "$stage/$chart"
  # The first `repository:` under the top-level `image:` key; anything else stays as written.
  awk -v image="$image" '
    /^image:/ { in_image = 1; print; next }
    /^[^ #]/ { in_image = 0 }
    in_image && !done && /^  repository:/ {
      $0 = "  repository: " image "  # the release'"'"'s IMAGE_REPO (docs/release.md)"; done = 1
    }
    { print }
    END { if (!done) { print "no image.repository in values.yaml" > "/dev/stderr"; exit 1 } }
  ' "$root/charts/$chart/values.yaml" >"$stage/$chart/values.yaml"
done
"$helm" lint --strict "$stage/edl" "$stage/edl-trainer" >/dev/null
"$helm" package "$stage/edl" "$stage/edl-trainer" --destination "$out" >/dev/null
