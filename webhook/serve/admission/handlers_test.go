package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

func TestValidatorVerdicts(t *testing.T) {
	h := validatingHandler(t)
	renewed := func(at string) string {
		return mcl(designA, `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"renewTime":"`+at+`"`)
	}
	// A write that renews and also changes a lease field: not a shared
	// renewal, so who sends it and how often count.
	retuned := func(at string) string {
		return mcl(designA, `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"retryPeriodSeconds":15,"renewTime":"`+at+`"`)
	}
	cases := []struct {
		name       string
		review     review
		allowed    bool
		code       int32
		message    string
		retryAfter int32
		warning    string
	}{
		{
			name:    "designated manager renews after the interval",
			review:  review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: renewed("2026-11-30T11:59:50.000000Z"), object: renewed("2026-11-30T11:59:58.000000Z")},
			allowed: true,
		},
		{
			name:   "another manager is not the designated one",
			review: review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB, oldObject: renewed("2026-11-30T11:59:58.000000Z"), object: retuned("2026-11-30T11:59:59.500000Z")},
			code:   http.StatusForbidden,
			message: "leaseguard: rule kcc-mcl: " + managerB + " is not the designated manager of multiclusterlease cnrm-system/kcc-leader" +
				" (designated: ...cnrm-controller-manager-a, stale in 15s)",
		},
		{
			// Judged by the server clock (12:00:00) against the stored
			// renewTime, not by the body's renewTime.
			// Designation decides who writes, never who leads: the
			// cluster's other managers renew the shared lease too.
			name:    "another manager's renewal of the shared lease is admitted",
			review:  review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB, oldObject: renewed("2026-11-30T11:59:58.000000Z"), object: renewed("2026-11-30T11:59:59.500000Z")},
			allowed: true,
		},
		{
			name:    "a shared renewal is not rate limited",
			review:  review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: renewed("2026-11-30T11:59:58.000000Z"), object: renewed("2026-11-30T11:59:59.500000Z")},
			allowed: true,
		},
		{
			name:       "writing other lease fields too often is a 429 with the remaining time",
			review:     review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: renewed("2026-11-30T11:59:58.000000Z"), object: retuned("2026-11-30T11:59:59.500000Z")},
			code:       http.StatusTooManyRequests,
			message:    "leaseguard: rule kcc-mcl: " + managerA + " renews too often multiclusterlease cnrm-system/kcc-leader (renewed 2s after the stored renewal, minimum 5s)",
			retryAfter: 3,
		},
		{
			name:    "warn mode admits with a warning kubectl prints",
			review:  review{kind: "Lease", operation: "CREATE", user: managerB, object: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kcc-leader-a","namespace":"cnrm-system"},"spec":{"holderIdentity":"x"}}`},
			allowed: true,
			warning: "leaseguard: rule kcc-namespace-leases: " + managerB + " may not write lease cnrm-system/kcc-leader-a (bound lease: kcc-leader-b)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, resp := post(t, h, tc.review.json())
			if status != http.StatusOK {
				t.Fatalf("HTTP %d", status)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if resp.UID != "0b9f3c1e-1111-2222-3333-444455556666" {
				t.Errorf("uid %q not echoed", resp.UID)
			}
			if !tc.allowed {
				if resp.Result.Code != tc.code || resp.Result.Message != tc.message {
					t.Fatalf("got %d %q\nwant %d %q", resp.Result.Code, resp.Result.Message, tc.code, tc.message)
				}
				var retry int32
				if resp.Result.Details != nil {
					retry = resp.Result.Details.RetryAfterSeconds
				}
				if retry != tc.retryAfter {
					t.Errorf("retryAfterSeconds = %d, want %d", retry, tc.retryAfter)
				}
			}
			if got := strings.Join(resp.Warnings, "|"); got != tc.warning {
				t.Errorf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
}

func TestDesignatorStampsTheFirstManager(t *testing.T) {
	h := mutatingHandler(t)
	spec := `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`
	cases := []struct {
		name   string
		review review
		patch  string
	}{
		{"first write without annotations", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: strings.Replace(mcl("", spec), `"annotations":{},`, "", 1)},
			`[{"op":"add","path":"/metadata/annotations","value":{"leaseguard.io/designated-manager":"` + managerA + `"}}]`},
		{"first write with other annotations", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: mcl(`"team":"x"`, spec)},
			`[{"op":"add","path":"/metadata/annotations/leaseguard.io~1designated-manager","value":"` + managerA + `"}]`},
		// The other managers of the cluster renew the shared lease: their
		// renewals are acknowledged without being stored.
		{"fresh designation of another manager: acknowledged, not stamped", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB,
			oldObject: mcl(designA, spec), object: mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.500000Z"`)},
			`[{"op":"replace","path":"/spec/renewTime","value":"2026-11-30T11:59:59.000000Z"}]`},
		{"fresh designation of another manager changing a lease field: neither", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB,
			oldObject: mcl(designA, spec), object: mcl(designA, `"holderIdentity":"cluster-a","retryPeriodSeconds":15,"renewTime":"2026-11-30T11:59:59.500000Z"`)}, ""},
		{"stale designation: the writer takes over", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB,
			oldObject: mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:00.000000Z"`), object: mcl(designA, spec)},
			`[{"op":"add","path":"/metadata/annotations/leaseguard.io~1designated-manager","value":"` + managerB + `"}]`},
		{"not a manager: no stamp", review{kind: "MultiClusterLease", operation: "CREATE", user: "system:serviceaccount:default:intruder", object: mcl("", spec)}, ""},
		{"unreadable request: no stamp, validation answers", review{kind: "Pod", operation: "CREATE", user: managerA, object: `{}`}, ""},
		// The answer never grows with what a client posts (a 1 MiB
		// username was echoed into a 64 MiB answer).
		{"a username longer than any real one: no stamp", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA + strings.Repeat("<", 1<<20), object: mcl(`"team":"x"`, spec)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := post(t, h, tc.review.json())
			if !resp.Allowed {
				t.Fatalf("mutating webhook refused: %+v", resp.Result)
			}
			if string(resp.Patch) != tc.patch {
				t.Fatalf("patch %s\nwant  %s", resp.Patch, tc.patch)
			}
			if tc.patch != "" {
				var ops []map[string]any
				if err := json.Unmarshal(resp.Patch, &ops); err != nil || resp.PatchType == nil || *resp.PatchType != "JSONPatch" {
					t.Fatalf("patch is not a JSONPatch: %v %v", err, resp.PatchType)
				}
			}
		})
	}
}

// The fail-open webhook's handler decides what it receives against the
// policy it holds: after a reload that drops a manager, the API server may
// still send that manager's renewal only there (the match conditions
// rendered from the old policy), and it must be refused, not admitted
// because "the fail-closed webhook decides this" (third attack round).
func TestRenewalsHandlerDecidesWhatTheFailClosedOneWould(t *testing.T) {
	v := &Validator{OnlyRenewals: true, Policies: testPolicySource(t), Log: logr.Discard(), Now: func() time.Time { return testNow }}
	h := v.Handler()
	spec := `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"renewTime":"2026-11-30T11:59:58.000000Z"`
	renewed := `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"renewTime":"2026-11-30T11:59:59.500000Z"`
	stranger := "system:serviceaccount:cnrm-system:revoked"
	_, got := post(t, h, review{kind: "MultiClusterLease", operation: "UPDATE", user: stranger, oldObject: mcl(designA, spec), object: mcl(designA, renewed)}.json())
	if got.Allowed || got.Result == nil || got.Result.Code != http.StatusForbidden ||
		!strings.Contains(got.Result.Message, stranger+" is not a manager of multiclusterlease cnrm-system/kcc-leader") {
		t.Fatalf("the renewals handler's answer to a stranger's renewal: %+v", got)
	}
}

// The handlers are controller-runtime admission.Handlers: served by
// controller-runtime's own Webhook (as a project that mounts them on its
// webhook.Server would), they give the verdicts and patches leaseguard's
// bounded front gives.
func TestHandlersServedByControllerRuntimesWebhook(t *testing.T) {
	spec := `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`
	shared := review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB,
		oldObject: mcl(designA, spec), object: mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.500000Z"`)}
	stranger := shared
	stranger.user = "system:serviceaccount:default:intruder"
	v := &Validator{Policies: testPolicySource(t), Log: logr.Discard(), Now: func() time.Time { return testNow }}
	m := &Designator{Policies: testPolicySource(t), Log: logr.Discard(), Now: func() time.Time { return testNow }}
	for _, tc := range []struct {
		name    string
		handler cradmission.Handler
		ours    http.Handler
		review  review
	}{
		{"validating: a stranger's renewal", v, v.Handler(), stranger},
		{"validating: a shared renewal", v, v.Handler(), shared},
		{"mutating: a shared renewal acknowledged", m, m.Handler(), shared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, theirs := post(t, &cradmission.Webhook{Handler: tc.handler}, tc.review.json())
			_, ours := post(t, tc.ours, tc.review.json())
			if theirs.Allowed != ours.Allowed || theirs.UID != ours.UID || string(theirs.Patch) != string(ours.Patch) ||
				(theirs.Result == nil) != (ours.Result == nil) || (ours.Result != nil && (theirs.Result.Code != ours.Result.Code || theirs.Result.Message != ours.Result.Message)) {
				t.Fatalf("controller-runtime's Webhook answered %+v\nleaseguard's front answered %+v", theirs, ours)
			}
		})
	}
}

// panickingPolicy stands for a defect in the decision core.
type panickingPolicy struct{}

func (panickingPolicy) Policy() *policy.Policy { panic("a defect in the decision core") }

// A panic is the webhook failing, not a verdict: the connection is dropped
// and the API server applies the webhook's failurePolicy. (controller-
// runtime's default would answer a 500 denial, which on the fail-open
// webhooks would refuse the holders' renewals.)
func TestAPanicDropsTheConnectionInsteadOfDenying(t *testing.T) {
	for _, h := range []http.Handler{
		(&Validator{OnlyRenewals: true, Policies: panickingPolicy{}, Log: logr.Discard(), Now: func() time.Time { return testNow }}).Handler(),
		(&Designator{Policies: panickingPolicy{}, Log: logr.Discard(), Now: func() time.Time { return testNow }}).Handler(),
	} {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the recovered panic
		srv.Start()
		body := review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB,
			oldObject: mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`),
			object:    mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.500000Z"`)}.json()
		resp, err := srv.Client().Post(srv.URL+manifests.ValidatePath, "application/json", bytes.NewReader(body))
		if err == nil {
			answer, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			t.Errorf("a panicking handler answered HTTP %d: %s", resp.StatusCode, answer)
		}
		srv.Close()
	}
}

// The mutating webhook's condition skips every UPDATE that moves no spec
// (the MutatingAdmissionPolicy leaves each acknowledged renewal so, and the
// condition asks the spec first): the handler must have nothing to do for
// such a write, whoever sends it and whatever else it changes. Designate
// stamps only a write that moves the spec, Coalesce needs renewTime
// advanced, and an Acknowledge of it would set renewTime to itself.
func TestTheMutatingWebhookHasNothingToDoForAWriteThatMovesNoSpec(t *testing.T) {
	const fresh, stale = "2026-11-30T11:59:59.000000Z", "2026-11-30T11:58:00.000000Z"
	m := mutatingHandler(t)
	for _, tc := range []struct {
		name                string
		user                string
		stored              string
		oldAnnotations, ann string
	}{
		{"another manager, designation fresh", managerB, fresh, designA, designA},
		{"another manager, designation stale", managerB, stale, designA, designA},
		{"the designated manager", managerA, fresh, designA, designA},
		{"a manager, no designation yet", managerB, fresh, "", ""},
		{"a manager adds an annotation of its own", managerB, stale, designA, designA + `,"team":"b"`},
		{"a manager, the designation dropped", managerB, stale, designA, ""},
		{"a stranger", "system:serviceaccount:default:intruder", stale, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := tc.stored
			spec := `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"renewTime":"` + stored + `"`
			r := review{kind: "MultiClusterLease", operation: "UPDATE", user: tc.user,
				oldObject: mcl(tc.oldAnnotations, spec), object: mcl(tc.ann, spec)}
			code, resp := post(t, m, r.json())
			if code != http.StatusOK || !resp.Allowed {
				t.Fatalf("HTTP %d, allowed %v: %+v", code, resp.Allowed, resp.Result)
			}
			var ops []struct {
				Op, Path string
				Value    any
			}
			if len(resp.Patch) > 0 {
				if err := json.Unmarshal(resp.Patch, &ops); err != nil {
					t.Fatalf("patch %s: %v", resp.Patch, err)
				}
			}
			for _, op := range ops {
				if op.Op != "replace" || op.Path != "/spec/renewTime" || op.Value != stored {
					t.Errorf("patch %s changes a write that moves no spec", resp.Patch)
				}
			}
		})
	}
}
