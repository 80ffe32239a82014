#!/usr/bin/env bash
# Builds versitygw (an Apache-2.0 S3-compatible server; its posix backend keeps each object as a
# file) from the Go module proxy into a cache outside the clone, keyed by version, so a warm
# machine skips the build. The object-storage checkpoint tests run it on 127.0.0.1
# (tests/support/s3_gateway.py). Prints the binary's path on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require github.com\/versity\/versitygw/ {print $3}' "$here/go.mod")"
bin="${EDL_CACHE_DIR:-$HOME/.cache/edl}/versitygw/${VERSION}/bin/versitygw"
if [[ -x "$bin" ]]; then
  echo "versitygw: cached at $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
# One build at a time per cache: a second run waits, then finds the first one's binary.
exec 9>"$(dirname "$bin")/.build.lock"
flock 9
if [[ -x "$bin" ]]; then
  echo "versitygw: cached at $bin (built by another run meanwhile)" >&2
  echo "$bin"
  exit 0
fi
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "versitygw: building ${VERSION} from the Go module proxy (cold: 3-6 min on 2 shared cores)" >&2
start=$(date +%s)
(cd "$here" && nice -n 19 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" \
  github.com/versity/versitygw/cmd/versitygw) \
  || { echo "versitygw build FAILED (see output above)" >&2; exit 1; }
mv "$bin.tmp" "$bin"
echo "versitygw: built in $(( $(date +%s) - start )) s at $bin" >&2
echo "$bin"
