//go:build tools

// Package tools pins the control-plane commands the e2e tests build, and the kubelet of the
// e2e node (tests/e2e/node/build.sh) at the same version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
