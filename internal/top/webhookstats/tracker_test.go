package webhookstats

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/serve/leasestats"
)

const (
	userA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-a"
	userB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-b"
)

// Two replicas' /debug/leases are summed, and the window reports only what
// was judged since its oldest snapshot.
func TestTrafficWithinTheWindowAcrossReplicas(t *testing.T) {
	replicas := []*leasestats.Stats{leasestats.New(0, 0), leasestats.New(0, 0)}
	var urls []string
	for _, r := range replicas {
		srv := httptest.NewServer(r)
		defer srv.Close()
		u, err := ParseURL(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	shared := func(r int, user string, v policy.Verdict, n int) {
		for i := 0; i < n; i++ {
			replicas[r].Observe(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", user, v)
		}
	}
	shared(0, userA, policy.Allow, 100) // before the window
	tr := &Tracker{URLs: urls, Window: 30 * time.Second}
	ctx := context.Background()
	t0 := time.Now()
	if err := tr.Poll(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if tr.Traffic() != nil {
		t.Fatal("traffic from a single snapshot")
	}
	shared(0, userA, policy.Allow, 10)
	shared(1, userB, policy.Deny, 7)
	if err := tr.Poll(ctx, t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := tr.Traffic()[leasetraffic.Key{Resource: leaseobject.MultiClusterLeases, Namespace: "cnrm-system", Name: "kcc-leader"}]
	want := &leasetraffic.WebhookTraffic{Requests: 17, Verdicts: leasetraffic.WebhookVerdicts{Allow: 10, Deny: 7}}
	if got == nil || got.Requests != want.Requests || got.Verdicts != want.Verdicts || len(got.Users) != 2 {
		t.Fatalf("traffic %+v, want %+v from both users", got, want)
	}
	// 40s later the first snapshot has left the window.
	shared(1, userB, policy.Deny, 3)
	if err := tr.Poll(ctx, t0.Add(40*time.Second)); err != nil {
		t.Fatal(err)
	}
	got = tr.Traffic()[leasetraffic.Key{Resource: leaseobject.MultiClusterLeases, Namespace: "cnrm-system", Name: "kcc-leader"}]
	if got == nil || got.Requests != 3 || fmt.Sprint(got.Users) != fmt.Sprint([]leasetraffic.UserRequests{{User: userB, Requests: 3}}) {
		t.Fatalf("traffic of the last window %+v, want 3 denied requests of %s", got, userB)
	}
}

func TestBadSources(t *testing.T) {
	for _, bad := range []string{"127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if u, err := ParseURL("http://127.0.0.1:8080"); err != nil || u != "http://127.0.0.1:8080/debug/leases?limit=0" {
		t.Errorf("ParseURL = %q, %v", u, err)
	}
	notStats := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# HELP metrics")) }))
	defer notStats.Close()
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	for _, srv := range []*httptest.Server{notStats, missing} {
		u, _ := ParseURL(srv.URL)
		tr := &Tracker{URLs: []string{u}, Window: time.Minute}
		if err := tr.Poll(context.Background(), time.Now()); err == nil || tr.LastError() == nil {
			t.Errorf("%s: no error", srv.URL)
		}
	}
}

// Whatever answers at a --webhook-stats address is quoted in top's error,
// escaped and cut as the webhook quotes values: its body can neither act on
// the operator's terminal nor fill the status line.
func TestAFailedReplicasBodyIsQuotedEscapedAndCut(t *testing.T) {
	body := "\x1b]0;pwned\x1b\\\x1b[2J" + strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, body, http.StatusInternalServerError)
	}))
	defer srv.Close()
	u, err := ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	err = (&Tracker{URLs: []string{u}, Window: time.Second}).Poll(context.Background(), time.Now())
	want := "webhook stats " + u + `: HTTP 500: \x1b]0;pwned\x1b\\\x1b[2J` + strings.Repeat("x", 52) + "..." // 80 bytes, as a denial quotes a value
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
