// Package clustertest holds what the tests run against a real cluster
// (hack/kind) share (test/cluster/faults, test/cluster/chartinstall).
package clustertest

import (
	"testing"
	"time"
)

// WaitUntil polls check every 250 ms until it returns nil, and fails the
// test with check's last error when timeout passes first.
func WaitUntil(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
