// Command pause is the e2e node's sandbox process (what registry.k8s.io/pause runs): it holds
// a pod's namespaces, reaps the children it inherits and exits on SIGINT or SIGTERM.
// Built by tests/e2e/node/build.sh into the node's cache; the harness puts it into an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
