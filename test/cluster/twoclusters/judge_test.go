package twoclusters

import (
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

func TestJudgeCountsTheActiveClusterOverlapsAndTheTakeover(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	reconciled := []string{"kcc-01", "kcc-02"}
	sample := func(a, b bool) kccworkload.Sample {
		return kccworkload.Sample{Leading: map[string]map[string]bool{"cnrm-system": {"kcc-01": a, "kcc-02": b}}}
	}
	look := func(s int, first, second kccworkload.Sample) Look {
		return Look{At: t0.Add(time.Duration(s) * time.Second), First: first, Second: second}
	}
	none, all, half := sample(false, false), sample(true, true), sample(true, false)
	looks := []Look{
		look(0, all, none),  // the first cluster active
		look(1, all, none),  // stopped just after this look
		look(2, half, none), // the first's managers ending
		look(3, none, none), // no one leads: the lock expiring
		look(4, none, half), // the second's first manager confirmed
		look(5, none, all),  // the second active: 3.5 s after the stop
		look(6, half, all),  // a stale first-cluster leader beside the second: both
	}
	stopped := t0.Add(1500 * time.Millisecond)
	f := Judge(looks, "cnrm-system", reconciled, stopped)
	if f.Looks != 7 || f.FirstActive != 2 || f.SecondActive != 1 || f.Both != 1 {
		t.Errorf("looks %d, first active %d, second active %d, both %d; want 7, 2, 1, 1", f.Looks, f.FirstActive, f.SecondActive, f.Both)
	}
	if f.Takeover != 3500*time.Millisecond {
		t.Errorf("takeover %s, want 3.5s", f.Takeover)
	}
	if want := "12:00:02.000: 1 of 2 namespaces led in the first cluster (not: kcc-02), 0 in the second"; f.FirstNeither != want {
		t.Errorf("first look with neither active %q, want %q", f.FirstNeither, want)
	}
	if !strings.HasPrefix(f.FirstBoth, "12:00:06.000: 1 namespaces led in the first cluster and 2 in the second") {
		t.Errorf("first overlap %q", f.FirstBoth)
	}
	// Without a stop, a second cluster active is counted but is no takeover;
	// nor is one before the stop.
	if f := Judge(looks, "cnrm-system", reconciled, time.Time{}); f.Takeover != 0 || f.SecondActive != 1 {
		t.Errorf("no stop: takeover %s, second active %d; want 0 and 1", f.Takeover, f.SecondActive)
	}
	if f := Judge(looks, "cnrm-system", reconciled, t0.Add(10*time.Second)); f.Takeover != 0 {
		t.Errorf("stop after every look: takeover %s, want 0", f.Takeover)
	}
	// Another system namespace, never sampled, leads nowhere.
	if f := Judge(looks, "cnrm-unguarded", reconciled, stopped); f.FirstActive != 0 || f.Both != 0 || f.Takeover != 0 {
		t.Errorf("an unsampled system: %+v", f)
	}
}
