#!/usr/bin/env bash
# Runs pytest layer by layer. A layer that collects no test is a failure (exit 5 is not "ok").
# Each layer prints its 30 slowest tests, so a CI log says where its time went.
#
#   scripts/pytest-layer.sh unit integration          # one after the other
#   scripts/pytest-layer.sh --lanes integration "e2e e2e-kubelet"
#
# With --lanes each argument is a lane: the layers of one lane run one after the other, the
# lanes run side by side. Most of the integration and e2e layers' time is waiting (a world
# re-forming, the HPA's 15 s sync), not CPU, so side by side they take little more than the
# longest lane. The first lane prints as it goes; each other lane writes its own log, printed
# whole when it ends (a CI log stays readable). Every lane runs to its end; the exit status is
# the first failing layer's.
#
# Layers: unit, integration, e2e (the pod runner's e2e), e2e-kubelet (the e2e tests that a real
# kubelet + containerd runs: `-m kubelet`, a pytest session and control plane of its own), and
# e2e-kueue (outside `make test`: Kueue's cold build takes about 13 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."

run_layer() {
  local layer=$1 folder marks code
  echo "=== pytest layer: ${layer}"
  case $layer in
    e2e) folder=e2e; marks="e2e and not kueue and not kubelet" ;;
    e2e-kubelet) folder=e2e; marks="e2e and kubelet" ;;
    e2e-kueue) folder=e2e; marks="e2e and kueue" ;;
    *) folder=$layer; marks=$layer ;;
  esac
  .venv/bin/python -m pytest "tests/${folder}" -m "${marks}" -ra -q --durations=30
  code=$?
  if [[ $code -eq 5 ]]; then
    echo "layer ${layer}: no tests collected; that is a failure" >&2
    return 1
  fi
  return $code
}

run_lane() {
  local rc=0 layer code
  for layer in $1; do
    run_layer "$layer"
    code=$?
    [[ $code -ne 0 && $rc -eq 0 ]] && rc=$code
  done
  return $rc
}

if [[ ${1:-} != --lanes ]]; then
  run_lane "$*"
  exit $?
fi
shift
logs=$(mktemp -d "${TMPDIR:-/tmp}/edl-lanes.XXXXXX")
pids=()
# Each other lane runs in a session of its own, so that an interrupted run stops it whole.
trap 'exit 130' INT TERM
trap 'for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null; done; rm -rf "$logs"' EXIT
for ((i = 2; i <= $#; i++)); do
  setsid bash "$0" ${!i} >"${logs}/lane-${i}.log" 2>&1 &
  pids+=("$!")
  echo "=== lane ${i} (${!i}) runs beside lane 1; its log: ${logs}/lane-${i}.log"
done
run_lane "$1"
rc=$?
for ((i = 2; i <= $#; i++)); do
  wait "${pids[$((i - 2))]}"
  code=$?
  [[ $code -ne 0 && $rc -eq 0 ]] && rc=$code
  echo "=== lane ${i} (${!i}) ended with status ${code}; its output follows"
  cat "${logs}/lane-${i}.log"
done
exit $rc
