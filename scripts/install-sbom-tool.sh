#!/usr/bin/env bash
# Installs CycloneDX's SBOM generator for Python (cyclonedx-bom, pinned in
# scripts/sbom/requirements.txt) into a venv of its own outside the clone, keyed by the pin, so a
# warm machine reuses it and the tool's dependencies never mix with the project's. Prints the
# `cyclonedx-py` path on the last line of stdout. `make dist` (scripts/build-dist.sh) calls it.
# Usage: install-sbom-tool.sh PYTHON
set -euo pipefail
py="$1"
here="$(cd "$(dirname "$0")/sbom" && pwd)"
pin="$(grep -E '^cyclonedx-bom==' "$here/requirements.txt")"
home="${EDL_CACHE_DIR:-$HOME/.cache/edl}/sbom/${pin/==/-}"
if [[ -f "$home/.complete" ]]; then
  echo "sbom: $pin cached in $home" >&2
  echo "$home/bin/cyclonedx-py"
  exit 0
fi
mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9  # two builds at once: one installs, the other waits and reuses it
if [[ ! -f "$home/.complete" ]]; then
  echo "sbom: installing $pin into $home" >&2
  rm -rf "$home"
  "$py" -m venv "$home"
  "$home/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
  touch "$home/.complete"
fi
echo "$home/bin/cyclonedx-py"
