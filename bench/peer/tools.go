//go:build tools

// Package tools pins the peer adapter bench/bench_adapter_peer.py measures EDL against.
package tools

import _ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
