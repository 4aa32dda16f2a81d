// Command pause is the sandbox process of the cluster harness's pods (the
// image leaseguard.local/pause:3.10): it holds the pod's namespaces and
// waits to be told to stop, as Kubernetes' own pause container does. Being
// our own program, it needs no image from any registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of a pod with a shared process namespace, reap the orphans.
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
