#!/usr/bin/env bash
# Runs pytest layer by layer. A layer that collects no test is a failure (exit 5 is not "ok").
# Each layer prints its 30 slowest tests, so a CI log says where its time went.
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
for layer in "$@"; do
  echo "=== pytest layer: ${layer}"
  marks="${layer}"
  # The Kueue e2e needs Kueue built (about 13 min cold): `make e2e-kueue` runs it; the real
  # kubelet's e2e needs the node built and runs kube-scheduler: `make e2e-kubelet` runs it.
  [[ $layer == e2e ]] && marks="e2e and not kueue and not kubelet"
  .venv/bin/python -m pytest "tests/${layer}" -m "${marks}" -ra -q --durations=30
  code=$?
  if [[ $code -eq 5 ]]; then
    echo "layer ${layer}: no tests collected; that is a failure" >&2
    rc=1
  elif [[ $code -ne 0 ]]; then
    rc=$code
  fi
done
exit $rc
