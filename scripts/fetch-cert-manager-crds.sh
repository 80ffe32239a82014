#!/usr/bin/env bash
# cert-manager's CRDs for Certificate and Issuer, exactly as its Go module ships them
# (deploy/crds/), for the e2e schema check of the Helm chart's tls.mode=certManager.
# Cached under $EDL_CACHE_DIR/cert-manager-crds/<version>/. Prints that folder.
set -euo pipefail
exec bash "$(dirname "$0")/fetch-go-module-crds.sh" cert-manager-crds \
  github.com/cert-manager/cert-manager "${CERT_MANAGER_VERSION:-v1.21.2}" \
  'deploy/crds/cert-manager.io_{kind}.yaml' certificates issuers
