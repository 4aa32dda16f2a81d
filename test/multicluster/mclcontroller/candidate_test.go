package mclcontroller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func mcl(spec map[string]any) *unstructured.Unstructured {
	u := newMCL()
	u.Object["spec"] = spec
	return u
}

func TestReadCandidate(t *testing.T) {
	c, err := readCandidate(mcl(map[string]any{
		"holderIdentity":       "cluster-a",
		"renewTime":            "2026-01-02T03:04:05.123456Z",
		"leaseDurationSeconds": int64(8),
		"retryPeriodSeconds":   int64(2),
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if c.holder != "cluster-a" || c.renewTime == nil || !c.renewTime.Equal(want) || c.leaseDuration != 8*time.Second ||
		c.retryPeriod != 2*time.Second || c.declaredLease == nil || *c.declaredLease != 8 {
		t.Fatalf("got %+v", c)
	}

	// The custom resource stores any date-time its schema accepts.
	for _, s := range []string{"2026-01-02t03:04:05+01:00", "2026-01-02T02:04:05z"} {
		c, err = readCandidate(mcl(map[string]any{"renewTime": s}))
		if err != nil || !c.renewTime.Equal(time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)) {
			t.Fatalf("renewTime %s: got %v, %v", s, c.renewTime, err)
		}
	}

	c, err = readCandidate(mcl(map[string]any{"holderIdentity": "cluster-a"}))
	if err != nil || c.renewTime != nil || c.leaseDuration != defaultLeaseDuration || c.retryPeriod != defaultRetryPeriod || c.declaredLease != nil {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
}

func TestReadCandidateRejectsAnUnreadableRenewTime(t *testing.T) {
	_, err := readCandidate(mcl(map[string]any{"renewTime": "yesterday"}))
	if err == nil || !strings.HasPrefix(err.Error(), `spec.renewTime "yesterday": `) {
		t.Fatalf("got %v, want an error naming spec.renewTime and its value", err)
	}
}
