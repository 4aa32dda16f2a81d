// Package twoclusters runs two Config Connector installations in namespace
// mode, one per kind cluster, that contend for one global lock through the
// same GCS emulator, as two clusters of one project do (package
// kccworkload's workload in each: the managers on the real lock, each
// cluster's MultiClusterLease controller; the emulator lives in the first
// cluster and the second reaches it through a NodePort). It checks that
// exactly one installation is active at every sample, and that when every
// manager of the active one stops, the other takes over within the
// protocol's bound, guarded by leaseguard (in both clusters) and, beside
// it, unguarded.
//
// `make test-e2e-kind` (and make test's kind stage) runs it after the fault
// tests; alone it needs clustertest.TargetFromEnv's environment,
// CLUSTER_B_KUBECONFIG (the second cluster, leaseguard installed by the
// same chart and policy, the MultiClusterLease CRD applied) and
// CLUSTER_KCC_IMAGE loaded into both; with CLUSTER_KCC_KEEP=1 both
// workloads stay up afterwards.
package twoclusters

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

// Look is one sample of both installations, taken at once.
type Look struct {
	At time.Time
	// First and Second are the first cluster's and the second cluster's
	// managers, by system namespace and reconciled namespace.
	First, Second kccworkload.Sample
}

// Figures are what a window's looks say of one system namespace (guarded
// or unguarded) across both clusters.
type Figures struct {
	Looks int
	// Both counts looks where managers of both clusters led at once: the
	// global lock's one promise broken; FirstBoth describes the first.
	Both      int
	FirstBoth string
	// FirstActive counts looks where every namespace led in the first
	// cluster and none in the second; SecondActive the other way round.
	FirstActive, SecondActive int
	// FirstNeither describes the first look in which neither cluster was
	// active nor both led: namespaces without a leader.
	FirstNeither string
	// Takeover is the time from the stop to the first look in which every
	// namespace of the second cluster led; 0 when none did.
	Takeover time.Duration
}

func leaders(s kccworkload.Sample, system string, reconciled []string) int {
	n := 0
	for _, ns := range reconciled {
		if s.Leading[system][ns] {
			n++
		}
	}
	return n
}

func notLeading(s kccworkload.Sample, system string, reconciled []string) []string {
	var out []string
	for _, ns := range reconciled {
		if !s.Leading[system][ns] {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// Judge reads one system namespace's figures from looks (in time order);
// stopped is when the first cluster's managers were stopped (zero: no stop
// in the window).
func Judge(looks []Look, system string, reconciled []string, stopped time.Time) Figures {
	f := Figures{Looks: len(looks)}
	for _, l := range looks {
		first, second := leaders(l.First, system, reconciled), leaders(l.Second, system, reconciled)
		switch {
		case first > 0 && second > 0:
			f.Both++
			if f.FirstBoth == "" {
				f.FirstBoth = fmt.Sprintf("%s: %d namespaces led in the first cluster and %d in the second", l.At.Format("15:04:05.000"), first, second)
			}
		case first == len(reconciled) && second == 0:
			f.FirstActive++
		case second == len(reconciled) && first == 0:
			f.SecondActive++
			if !stopped.IsZero() && f.Takeover == 0 && l.At.After(stopped) {
				f.Takeover = l.At.Sub(stopped)
			}
		default:
			if f.FirstNeither == "" {
				f.FirstNeither = fmt.Sprintf("%s: %d of %d namespaces led in the first cluster (not: %s), %d in the second",
					l.At.Format("15:04:05.000"), first, len(reconciled), strings.Join(notLeading(l.First, system, reconciled), ", "), second)
			}
		}
	}
	return f
}
