package main

import (
	"strings"
	"testing"
)

// The no-op's process is started by the bench with a spec it wrote; one
// that is off must stop it with the variable named, never serve on a port
// nobody asked for.
func TestRunNoopServerRefusesABadSpec(t *testing.T) {
	for spec, want := range map[string]string{
		"8443":            "want <TLS port>,<count port>,<cert dir>",
		"8443,9000":       "want <TLS port>,<count port>,<cert dir>",
		"https,9000,/tmp": "the ports are not numbers",
		"8443,count,/tmp": "the ports are not numbers",
	} {
		err := runNoopServer(spec)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), noopServerEnv) {
			t.Errorf("runNoopServer(%q) = %v, want an error naming %s and saying %q", spec, err, noopServerEnv, want)
		}
	}
}
