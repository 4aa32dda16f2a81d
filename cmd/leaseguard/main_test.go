package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/leaseguard/leaseguard/internal/cli"
)

// run runs `leaseguard args...` in process as main does.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cli.RunCaptured(newRootCommand(), args...)
}

// The server's binary has no top or vap: they are the kubectl plugin's,
// and asking for them says so, with exit 2 (usage), whatever flags follow.
func TestToolsAreInThePlugin(t *testing.T) {
	for _, args := range [][]string{{"top"}, {"top", "-A", "--once"}, {"vap", "--config", "policy.yaml", "--coalesce"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := run(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			for _, want := range []string{"not a command of the server's binary", "kubectl leaseguard " + args[0], "cmd/kubectl-leaseguard"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q lacks %q", stderr, want)
				}
			}
		})
	}
	stdout, _, code := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, cmd := range []string{"serve", "check", "manifests", "version"} {
		if !strings.Contains(stdout, "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, stdout)
		}
	}
	for _, cmd := range []string{"top", "vap"} {
		if strings.Contains(stdout, "\n  "+cmd+" ") {
			t.Errorf("--help lists %s:\n%s", cmd, stdout)
		}
	}
	if _, stderr, code := run(t, "bogus"); code != 2 || !strings.Contains(stderr, `unknown command "bogus"`) {
		t.Errorf("an unknown command: exit %d, %q", code, stderr)
	}
}

// `leaseguard version` and `leaseguard --version` print the version alone:
// the stamped one, else the one the build info gives.
func TestVersionCommand(t *testing.T) {
	stamped := version
	t.Cleanup(func() { version = stamped })
	for _, tc := range []struct{ stamped, want string }{{"v0.4.0", "v0.4.0"}, {"", cli.Version("")}} {
		version = tc.stamped
		for _, args := range [][]string{{"version"}, {"--version"}} {
			stdout, stderr, code := run(t, args...)
			if code != 0 || stdout != tc.want+"\n" || stderr != "" {
				t.Errorf("stamped %q, %v: exit %d, printed %q (stderr %q), want %q", tc.stamped, args, code, stdout, stderr, tc.want+"\n")
			}
		}
	}
	if want := cli.Version(""); !strings.HasPrefix(want, "devel") && !strings.HasPrefix(want, "v") {
		t.Errorf("unstamped version %q: neither devel... nor a module version", want)
	}
	// -v is not the version (nor a log level: that is serve's --zap-log-level).
	if _, _, code := run(t, "-v"); code != 2 {
		t.Errorf("-v: exit %d, want 2", code)
	}
}

// A regression test of the split between the server and the plugin: the
// server's binary links no terminal UI (charm.land/...) and no kubectl
// client options (k8s.io/cli-runtime). The dev build is checked too: it
// adds the local control plane, nothing of the plugin.
func TestServerLinksNoTools(t *testing.T) {
	if testing.Short() {
		t.Skip("go list: -short")
	}
	for _, tags := range []string{"", "dev"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -tags %q -deps ./cmd/leaseguard: %v\n%s", tags, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 100 || !contains(deps, "github.com/leaseguard/leaseguard/webhook/serve/server") {
			t.Fatalf("go list -deps printed %d packages, without webhook/serve/server: %s", len(deps), out)
		}
		for _, p := range deps {
			for _, banned := range []string{"charm.land/", "github.com/charmbracelet/", "k8s.io/cli-runtime/",
				"github.com/leaseguard/leaseguard/internal/top/topcmd", "github.com/leaseguard/leaseguard/internal/top/topui"} {
				if strings.HasPrefix(p, banned) {
					t.Errorf("cmd/leaseguard (tags %q) depends on %s", tags, p)
				}
			}
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// serve's usage mistakes exit 2 too, before anything starts.
func TestServeUsageExits2(t *testing.T) {
	for _, args := range [][]string{{"serve", "--cert-mode", "bogus"}, {"serve", "--bogus"}, {"serve", "extra"}} {
		if _, stderr, code := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
}

// The help says the time encoding the logs use when none is given:
// controller-runtime's own usage says epoch, its options use RFC 3339.
func TestZapTimeEncodingHelpSaysTheDefaultInUse(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	loggingFlags(fs, false)
	f := fs.Lookup("zap-time-encoding")
	if f == nil {
		t.Fatal("no --zap-time-encoding flag")
	}
	if !strings.Contains(f.Usage, "Defaults to 'rfc3339'.") || strings.Contains(f.Usage, "epoch'.") {
		t.Errorf("--zap-time-encoding usage %q, want it to name rfc3339 as the default", f.Usage)
	}
}
