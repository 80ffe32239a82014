//go:build tools

// Package tools pins the container runtime the e2e node runs: containerd, its runc shim and
// the ctr client (images are imported with it).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
