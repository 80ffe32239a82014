//go:build tools

// Package tools pins Kueue, the job queueing controller of the Kueue e2e (tests/e2e/kueue/build.sh).
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
