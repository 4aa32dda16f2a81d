package vap

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// The policies read the server's clock from managedFields, which clients
// may write too. A manager that writes twice within one second (so that
// the API server does not re-date its own entry) and adds an entry dated
// ahead must not make a fresh designation look stale: the clock is the
// writer's own entry, and an entry dated ahead is refused. Both API
// servers refuse the takeover.
func TestForgedManagedFieldsDoNotMoveTheClock(t *testing.T) {
	ctx := context.Background()
	mgrA, mgrB := leaseobject.Caller{Username: "user:mgr-a"}, leaseobject.Caller{Username: "user:mgr-b"}
	for name, ahead := range map[string]time.Duration{"far ahead": 5 * 365 * 24 * time.Hour, "within the clock skew": time.Second} {
		t.Run(name, func(t *testing.T) {
			for _, e := range []*env{webhookEnv, vapEnv} {
				for attempt := 0; ; attempt++ {
					out, sameSecond := forgedTakeover(ctx, t, e, mgrA, mgrB, ahead)
					if !sameSecond && attempt < 5 {
						continue // the two writes straddled a second: try again
					}
					if !sameSecond {
						t.Fatalf("%s: could not write twice within one second", e.name)
					}
					if out.Code != http.StatusForbidden {
						t.Errorf("%s: the forged takeover got HTTP %d %q", e.name, out.Code, out.Message)
					}
					// The webhook and the policies refuse it alike.
					if ahead > time.Minute && !strings.Contains(out.Message, "user:mgr-b dates a managedFields entry ahead of the server clock on lease team-auto/forged") {
						t.Errorf("%s: %s", e.name, out.Message)
					}
					if e == vapEnv && ahead < time.Minute && !strings.Contains(out.Message, "user:mgr-b may not take over the designation of lease team-auto/forged (designated: user:mgr-a, stale in ") {
						t.Errorf("%s: %s", e.name, out.Message)
					}
					break
				}
			}
		})
	}
}

// forgedTakeover stores a Lease designated to and held by mgrA, renewed
// now; mgrB labels it right after a second begins, then, within the same
// second, takes it over with a managedFields entry dated ahead.
func forgedTakeover(ctx context.Context, t *testing.T, e *env, mgrA, mgrB leaseobject.Caller, ahead time.Duration) (*outcome, bool) {
	t.Helper()
	const ns, name = "team-auto", "forged"
	if err := e.remove(ctx, leaseobject.Leases, ns, name); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.remove(ctx, leaseobject.Leases, ns, name) }()
	now := time.Now()
	old := &leaseobject.Object{Namespace: ns, Name: name, Designated: mgrA.Username, HasDesignation: true,
		Spec: leaseobject.Spec{Holder: "a", RenewTime: now, AcquireTime: now, LeaseDuration: 15 * time.Second}}
	st, err := e.store(ctx, leaseobject.Leases, old, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	labelled := deepCopy(st.obj)
	meta := labelled["metadata"].(map[string]any)
	meta["labels"] = map[string]any{"seen-by": "b"}
	delete(meta, "managedFields")
	body, _ := json.Marshal(labelled)
	path := objectPath(leaseobject.Leases, ns, name, "")
	out, err := e.do(ctx, mgrB, http.MethodPut, path, body, url.Values{"fieldManager": {"manager-b"}})
	if err != nil || out.Code != http.StatusOK {
		t.Fatalf("%s: mgr-b's label: %v HTTP %d %s", e.name, err, out.Code, out.Message)
	}
	takeover := out.Body
	stamp := stampSecond(takeover, "manager-b")
	meta = takeover["metadata"].(map[string]any)
	meta["annotations"] = map[string]any{leaseobject.DesignationAnnotation: mgrB.Username}
	meta["managedFields"] = append(meta["managedFields"].([]any), map[string]any{
		"manager": "clock", "operation": "Update", "apiVersion": "coordination.k8s.io/v1", "fieldsType": "FieldsV1",
		"time":     time.Now().Add(ahead).UTC().Truncate(time.Second).Format(time.RFC3339),
		"fieldsV1": map[string]any{"f:metadata": map[string]any{"f:labels": map[string]any{"f:seen-by": map[string]any{}}}},
	})
	spec := takeover["spec"].(map[string]any)
	spec["holderIdentity"], spec["leaseTransitions"] = "b", 1
	spec["acquireTime"] = microTime(time.Now())
	spec["renewTime"] = spec["acquireTime"]
	body, _ = json.Marshal(takeover)
	out, err = e.do(ctx, mgrB, http.MethodPut, path, body, url.Values{"fieldManager": {"manager-b"}})
	if err != nil {
		t.Fatal(err)
	}
	// Both writes were stamped within one second: the API server did not
	// re-date manager-b's entry.
	return out, time.Now().UTC().Truncate(time.Second).Equal(stamp)
}

// stampSecond is the time of a manager's managedFields entry.
func stampSecond(obj map[string]any, manager string) time.Time {
	mf, _ := nested(obj, "metadata", "managedFields").([]any)
	for _, entry := range mf {
		m, _ := entry.(map[string]any)
		if m["manager"] == manager {
			t, _ := time.Parse(time.RFC3339, str(m["time"]))
			return t
		}
	}
	return time.Time{}
}

// A manager that is not the designated one labels the shared lease and, in
// the same write, dates the record of the last renewal (the entry that owns
// renewTime) a second ahead: within the skew, so round 3's check let it
// pass, and the designated writer's next stamps then looked like a clock
// moving backwards (seventh attack round, docs/security.md). Both API servers
// refuse it with leaseguard's message and store nothing.
func TestARecordOfTheLastRenewalDatedAheadIsRefused(t *testing.T) {
	ctx := context.Background()
	const ns, name = "team-auto", "record-ahead"
	mgrA, mgrB := leaseobject.Caller{Username: "user:mgr-a"}, leaseobject.Caller{Username: "user:mgr-b"}
	for _, res := range []leaseobject.Resource{leaseobject.MultiClusterLeases, leaseobject.Leases} {
		for _, e := range []*env{webhookEnv, vapEnv} {
			if err := e.remove(ctx, res, ns, name); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			st, err := e.store(ctx, res, &leaseobject.Object{Namespace: ns, Name: name, Designated: mgrA.Username, HasDesignation: true,
				Spec: leaseobject.Spec{Holder: "a", RenewTime: now, AcquireTime: now, LeaseDuration: 15 * time.Second}}, 0, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			// Right after a second begins: the planted record stays ahead of
			// both clocks until the write is decided.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
			ahead := time.Now().UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
			write := deepCopy(st.obj)
			meta := write["metadata"].(map[string]any)
			meta["labels"] = map[string]any{"seen-by": "b"}
			planted := false
			for _, entry := range meta["managedFields"].([]any) {
				m := entry.(map[string]any)
				if nested(m, "fieldsV1", "f:spec", "f:renewTime") != nil {
					m["time"], planted = ahead, true
				}
			}
			if !planted {
				t.Fatalf("%s: no managedFields entry owns renewTime: %v", e.name, meta["managedFields"])
			}
			body, _ := json.Marshal(write)
			out, err := e.do(ctx, mgrB, http.MethodPut, objectPath(res, ns, name, ""), body, url.Values{"fieldManager": {"manager-b"}})
			if err != nil {
				t.Fatal(err)
			}
			kind := "lease"
			if res == leaseobject.MultiClusterLeases {
				kind = "multiclusterlease"
			}
			want := "user:mgr-b re-dates the record of the last renewal, ahead of the server clock, on " + kind + " " + ns + "/" + name +
				" (the API server dates it when renewTime is written: record " + ahead + ", stored "
			if out.Code != http.StatusForbidden || !strings.Contains(out.Message, want) {
				t.Errorf("%s: %s: HTTP %d %q, want 403 %q", e.name, res, out.Code, out.Message, want)
			}
			got, err := e.do(ctx, fixture, http.MethodGet, objectPath(res, ns, name, ""), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rv, was := str(nested(got.Body, "metadata", "resourceVersion")), str(nested(st.obj, "metadata", "resourceVersion")); rv != was {
				t.Errorf("%s: %s: the refused write was stored: resourceVersion %s, was %s", e.name, res, rv, was)
			}
			_ = e.remove(ctx, res, ns, name)
		}
	}
}
