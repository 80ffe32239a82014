# The two commands a newcomer needs: `make demo` (the main job) and `make test` (everything).
# Both are idempotent on a fresh machine: they install what they need and reuse caches.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EDL_CACHE_DIR ?= $(HOME)/.cache/edl
export EDL_CACHE_DIR
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo demo-cluster test venv system-deps controlplane helm monitoring-crds openapi-schemas images dist lint unit integration e2e e2e-kueue e2e-kubelet node bench bench-scale kwok kueue s3gateway clean

venv: $(STAMP)
$(STAMP): pyproject.toml scripts/install-torch.sh
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@bash scripts/install-torch.sh $(VENV)
	$(BIN)/python -m pip install -q -e '.[adapter,sim,paddle,torch,gpu,s3,fsspec,dev]'
	@rm -f $(VENV)/.installed-* && touch $@

# Debian packages the tests need: prometheus (server + promtool).
system-deps:
	@bash scripts/install-system-deps.sh

# kube-apiserver, kube-controller-manager and etcd built from the Go module proxy (cached).
controlplane:
	@bash tests/e2e/controlplane/build.sh >/dev/null

# Container images (adapter, Paddle CPU trainer, PyTorch CPU trainer from the machine's torch
# install) with podman, buildah or docker; see docs/install.md. No untagged images are left.
# BASE_IMAGE=... builds on that image instead of the local Debian base; IMAGE_REPO=... names them;
# EDL_IMAGES="adapter trainer trainer-gpu" adds the GPU trainer. Unchanged images are not rebuilt.
images:
	@bash scripts/build-images.sh

# helm built from the Go module proxy (version pinned in scripts/helm/go.mod, cached by version),
# for the chart tests (charts/).
helm:
	@bash scripts/build-helm.sh >/dev/null

# versitygw, the S3-compatible server of the object-storage checkpoint tests (cached by version).
s3gateway:
	@bash tests/integration/s3gateway/build.sh >/dev/null

# prometheus-operator's PodMonitor/ServiceMonitor/PrometheusRule CRDs and cert-manager's
# Certificate/Issuer CRDs from their Go modules (cached), for the e2e schema checks of
# manifests/monitoring and the Helm chart.
monitoring-crds:
	@bash scripts/fetch-prometheus-operator-crds.sh >/dev/null
	@bash scripts/fetch-cert-manager-crds.sh >/dev/null

# The OpenAPI schemas of the oldest and newest Kubernetes releases claimed (docs/install.md),
# from k8s.io/kubernetes on the Go module proxy (cached), for the version-contract test.
openapi-schemas: venv
	@$(BIN)/python -m tests.support.openapi_schemas >/dev/null

# Release artifacts into dist/ (docs/release.md): the sdist and wheel of edl-k8s (python -m build),
# both charts packaged by helm (.tgz), CycloneDX SBOMs of the base install and of each extra in
# SBOM_EXTRAS (default adapter; cyclonedx-bom pinned in scripts/sbom/, cached), IMAGES (this
# version's images and their ids; IMAGES=1 runs `make images` first) and SHA256SUMS over them.
DIST ?= dist
dist: venv
	@bash scripts/build-dist.sh $(BIN)/python $(DIST)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: venv system-deps helm openapi-schemas
	@bash scripts/pytest-layer.sh unit

integration: venv system-deps s3gateway
	@bash scripts/pytest-layer.sh integration

e2e: venv system-deps controlplane helm monitoring-crds
	@bash scripts/pytest-layer.sh e2e

# Kueue v0.17's manager, CRDs and webhook configurations from the Go module proxy (cached by
# version; cold about 13 min on 2 shared cores, so apart from `make e2e`), for the e2e beside it.
kueue:
	@bash tests/e2e/kueue/build.sh >/dev/null

# The e2e node: kubelet (the control plane's version) and containerd v2 with its runc shim and
# ctr, from the Go module proxy (cached by version), runc from Debian (tests/e2e/node/build.sh).
node:
	@bash tests/e2e/node/build.sh >/dev/null

# Pods run by real kubelets + containerd (three nodes on loopback addresses) from EDL's images
# (tests/e2e/install/test_kubelet_pod.py, test_kubelet_install.py, test_kubelet_helm.py,
# tests/e2e/agent/test_kubelet_*.py; docs/development.md, "The e2e node"). The other e2e tests still use the pod runner.
e2e-kubelet: venv system-deps controlplane node
	@bash scripts/pytest-layer.sh e2e-kubelet

# The sizer beside Kueue on the real control plane (tests/e2e/metrics_adapter/test_kueue.py).
e2e-kueue: venv system-deps controlplane kueue
	@bash scripts/pytest-layer.sh e2e-kueue

# Two lanes side by side (scripts/pytest-layer.sh): the integration layer, and the unit, e2e and
# kubelet e2e layers one after the other; most of both lanes' time is waiting, not CPU.
test: venv system-deps controlplane node helm monitoring-crds openapi-schemas s3gateway lint
	@bash scripts/pytest-layer.sh --lanes integration "unit e2e e2e-kubelet"

# The whole loop on this machine, no cluster (about 3 minutes warm, 6 cold on 2 shared cores;
# README): examples/demo/.
# It installs only what the demo imports (EDL with its adapter, Paddle for the digits example,
# matplotlib for its plot): no PyTorch, no test tools. A venv that `make venv` filled already has them.
DEMO_STAMP := $(VENV)/.demo-installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
$(DEMO_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[adapter,sim,paddle]'
	@rm -f $(VENV)/.demo-installed-* && touch $@

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/python -m examples.demo

# The same story on a real control plane and three real kubelet nodes (containerd), every pod
# from EDL's trainer image: control plane and node built from the Go module proxy on first use
# (cached), the image by the demo (`make images` for the trainer only, skipped when up to date).
demo-cluster: venv controlplane node
	$(BIN)/python -m examples.demo.on_cluster

# bench_adapter_peer.py also builds prometheus-adapter (bench/peer/build.sh, cached) and the control plane.
# bench_scale.py is apart (make bench-scale): it fills a control plane with 150,000 pods.
bench: venv system-deps
	@for b in bench/bench_*.py; do [ "$$b" = bench/bench_scale.py ] && continue; \
	  echo "== $$b"; $(BIN)/python $$b || exit 1; done

# kwok, the fake kubelet of the scale bench, built from the Go module proxy (cached by version).
kwok:
	@bash bench/kwok/build.sh >/dev/null

# The sizer at 500-5,000 nodes / 150,000 pods / 1,000 jobs and one job's membership at 100-1,000
# members, on the real control plane with kwok (docs/sizing.md#at-scale; about an hour on 2
# shared cores). BENCH_SCALE_ARGS="--steps 500:100 --no-membership" runs a part.
bench-scale: venv controlplane kwok
	$(BIN)/python bench/bench_scale.py $(BENCH_SCALE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache dist
