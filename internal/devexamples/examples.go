// Package devexamples holds the commands `leaseguard dev` prints and the
// README shows, with what each must print, so that a test runs every one
// of them against the dev control plane: an example that does not do what
// it says is a failing test, not a puzzled user.
package devexamples

import (
	"regexp"
	"strings"
)

// The demo of `leaseguard dev`: the designated manager of the shared
// MultiClusterLease and the lease it renews.
const (
	Namespace = "cnrm-system"
	Manager   = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"
	MCL       = "kcc-leader"
)

// Example is one kubectl command and what it prints.
type Example struct {
	// Comment says what the command shows.
	Comment string
	// Args follow kubectl (and its kubeconfig).
	Args []string
	// Want matches kubectl's combined output; Denied says it exits non-zero.
	Want   *regexp.Regexp
	Denied bool
}

const teamB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b"

// spec write: a field change, so that the write is a lease write (an apply
// of an unchanged sample would send nothing, and metadata alone is free).
const specWrite = `{"spec":{"leaseDurationSeconds":30}}`

// Examples are the commands, in the order they are printed.
func Examples() []Example {
	q := regexp.QuoteMeta
	return []Example{
		{
			Comment: "denied: another namespace-mode manager is not the designated one",
			Args:    []string{"--as", teamB, "-n", Namespace, "patch", "multiclusterlease", MCL, "--type", "merge", "-p", specWrite, "--dry-run=server"},
			Want: regexp.MustCompile(`^Error from server \(Forbidden\): admission webhook "validate.leases.leaseguard.io" denied the request: ` +
				q("leaseguard: rule kcc-mcl: "+teamB+" is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-team-a, stale in ") + `\d+s\)\n$`),
			Denied: true,
		},
		{
			Comment: "denied: not a manager at all",
			Args:    []string{"--as", "system:serviceaccount:default:intruder", "-n", Namespace, "patch", "multiclusterlease", MCL, "--type", "merge", "-p", specWrite, "--dry-run=server"},
			Want: regexp.MustCompile(`^Error from server \(Forbidden\): admission webhook "validate.leases.leaseguard.io" denied the request: ` +
				q("leaseguard: rule kcc-mcl: system:serviceaccount:default:intruder is not a manager of multiclusterlease cnrm-system/kcc-leader (managers: system:serviceaccount:cnrm-system:cnrm-controller-manager-*, system:serviceaccount:*:cnrm-controller-manager-*)") + `\n$`),
			Denied: true,
		},
		{
			Comment: "admitted: the manager of team-a writes its own bound Lease from its pod",
			Args: []string{"--as", Manager, "--as-user-extra", "authentication.kubernetes.io/pod-name=cnrm-controller-manager-team-a-0",
				"apply", "--dry-run=server", "-f", "config/samples/lease-team-a.yaml"},
			Want: regexp.MustCompile(`^` + q("lease.coordination.k8s.io/kcc-leader-team-a created (server dry run)") + `\n$`),
		},
		{
			Comment: "admitted with a warning (the bound-lease rule is in warn mode): team-b writes team-a's Lease",
			Args: []string{"--as", teamB, "--as-user-extra", "authentication.kubernetes.io/pod-name=cnrm-controller-manager-team-b-0",
				"apply", "--dry-run=server", "-f", "config/samples/lease-team-a.yaml"},
			Want: regexp.MustCompile(q("Warning: leaseguard: rule kcc-namespace-leases: "+teamB+" may not write lease cnrm-system/kcc-leader-team-a (bound lease: kcc-leader-team-b)") +
				`\n` + q("lease.coordination.k8s.io/kcc-leader-team-a created (server dry run)") + `\n$`),
		},
	}
}

// Command renders the example as a shell command after kubectl (e.g.
// "kubectl --kubeconfig dev.kubeconfig", or "$kubectl"), one option per
// continued line where it is long.
func (e Example) Command(kubectl string) string {
	var b strings.Builder
	b.WriteString(kubectl)
	line := len(kubectl)
	for i := 0; i < len(e.Args); i++ {
		word := quote(e.Args[i])
		// Keep an option with its value.
		if strings.HasPrefix(e.Args[i], "-") && !strings.Contains(e.Args[i], "=") && i+1 < len(e.Args) && !strings.HasPrefix(e.Args[i+1], "-") {
			word += " " + quote(e.Args[i+1])
			i++
		}
		if line+1+len(word) > 100 {
			b.WriteString(" \\\n   ")
			line = 3
		}
		b.WriteString(" " + word)
		line += 1 + len(word)
	}
	return b.String()
}

// quote quotes a shell word that needs it.
func quote(s string) string {
	if strings.ContainsAny(s, ` "{}*$`) {
		return "'" + s + "'"
	}
	return s
}
