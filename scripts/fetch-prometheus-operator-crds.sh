#!/usr/bin/env bash
# prometheus-operator's CRDs for PodMonitor, ServiceMonitor and PrometheusRule, exactly as its
# Go module ships them (example/prometheus-operator-crd/), for the e2e schema check of
# manifests/monitoring. Cached under $EDL_CACHE_DIR/prometheus-operator-crds/<version>/. Prints that folder.
set -euo pipefail
exec bash "$(dirname "$0")/fetch-go-module-crds.sh" prometheus-operator-crds \
  github.com/prometheus-operator/prometheus-operator "${PROMETHEUS_OPERATOR_VERSION:-v0.89.0}" \
  'example/prometheus-operator-crd/monitoring.coreos.com_{kind}.yaml' \
  podmonitors servicemonitors prometheusrules
