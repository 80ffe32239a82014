//go:build tools

// Package tools pins kwok, the fake kubelet of bench/bench_scale.py's nodes and pods.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
