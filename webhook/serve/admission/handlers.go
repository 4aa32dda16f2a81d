package admission

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/serve/leasestats"
	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

// Validator is the validating webhook: it enforces docs/design.md §4 on
// every guarded write. It is a controller-runtime admission.Handler.
type Validator struct {
	// OnlyRenewals marks the handler of RenewalsPath, the fail-open
	// webhook's (for its metrics label); it decides as the other does.
	OnlyRenewals bool
	Policies     PolicySource
	Metrics      *metrics.Recorder
	Log          logr.Logger
	// Now is the server clock; time.Now when nil.
	Now func() time.Time
	// LeaseStats counts the heaviest leases and writers (/debug/leases); nil disables it.
	LeaseStats *leasestats.Stats
}

var (
	_ cradmission.Handler = (*Validator)(nil)
	_ cradmission.Handler = (*Designator)(nil)
)

// Handler returns the http.Handler serving the validating webhook.
func (v *Validator) Handler() http.Handler {
	return newHandler(v, v.refusals())
}

// refusals: validation refuses what it cannot read.
func (v *Validator) refusals() unreadable {
	name := "validate"
	if v.OnlyRenewals {
		name = "renewals"
	}
	return unreadable{webhookName: name, refuse: true, metrics: v.Metrics, log: v.Log}
}

// Handle decides one admission request (controller-runtime's
// admission.Handler).
func (v *Validator) Handle(_ context.Context, ar cradmission.Request) cradmission.Response {
	req, err := leaseobject.ReadRequest(&ar.AdmissionRequest, now(v.Now))
	if err != nil {
		return v.refusals().answer(string(ar.UID), http.StatusBadRequest, err, "unreadable")
	}
	start := time.Now()
	// Every handler decides every write it receives against the policy it
	// holds, never "allowed because the other webhook decides": after a
	// policy reload the API server may still route by the match
	// conditions rendered from the old one, so a write the fail-closed
	// webhook should now take can reach only this one. (The rendered
	// conditions send each write to one webhook only.)
	d := policy.Decide(v.Policies.Policy(), req)
	elapsed := time.Since(start)
	// Logged first, then counted: the log quotes the request, the counts
	// go to the serving room (docs/design.md §6, the request's hops).
	if d.Verdict != policy.Allow {
		obj := req.New
		if obj == nil {
			obj = req.Old
		}
		v.Log.Info("lease write "+verdictPast(d.Verdict),
			"rule", d.Rule, "invariant", string(d.Invariant), "verdict", d.Verdict.String(),
			"user", oneline.Clip(req.Caller.Username), "resource", string(req.Resource), "namespace", oneline.Clip(obj.Namespace), "name", oneline.Clip(obj.Name),
			"operation", string(req.Operation), "subresource", req.Subresource, "dryRun", req.DryRun,
			"message", d.Message)
	}
	if d.Notice != "" {
		v.Log.Info("stored lease has an unreadable field", "uid", ar.UID, "notice", d.Notice)
		v.Metrics.UnreadableStored(req.Resource)
	}
	v.Metrics.Decision(req.Resource, &d, elapsed)
	v.LeaseStats.ObserveRequest(req, d.Verdict) // per-lease top-K for /debug/leases
	return Response(&d)
}

// now reads the server clock: clock when set, else time.Now.
func now(clock func() time.Time) time.Time {
	if clock != nil {
		return clock()
	}
	return time.Now()
}

// Response turns a decision into the answer the API server returns to the
// client: a 403 or 429 Status for a denial (with Retry-After seconds for a
// 429), a warning kubectl prints for warn, a plain allow otherwise.
func Response(d *policy.Decision) cradmission.Response {
	var a cradmission.Response
	switch d.Verdict {
	case policy.Deny:
		status := &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    d.Code,
			Reason:  metav1.StatusReasonForbidden,
			Message: d.Message,
		}
		if d.Code == http.StatusTooManyRequests {
			status.Reason = metav1.StatusReasonTooManyRequests
			status.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds(d.RetryAfter)}
		}
		a.Result = status
		return a
	case policy.Warn:
		a.Warnings = append(a.Warnings, d.Message)
	}
	if d.Notice != "" {
		a.Warnings = append(a.Warnings, d.Notice)
	}
	a.Allowed = true
	return a
}

// retryAfterSeconds rounds up, so a client that waits as told is not refused
// again for a fraction of a second.
func retryAfterSeconds(d time.Duration) int32 {
	s := int32((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// Designator is the mutating webhook: it records the designated manager of
// designation: auto, acknowledges the MultiClusterLease renewals of the
// managers that are not designated without storing them (policy.Acknowledge),
// and, where the policy coalesces renewals and the
// MutatingAdmissionPolicy is not used, sets an early renewal's renewTime back
// to the stored one. It never refuses a write. It is a controller-runtime
// admission.Handler.
type Designator struct {
	Policies PolicySource
	Metrics  *metrics.Recorder
	Log      logr.Logger
	Now      func() time.Time
}

// Handler returns the http.Handler serving the mutating webhook.
func (m *Designator) Handler() http.Handler {
	return newHandler(m, m.refusals())
}

// refusals: the mutating webhook leaves an unreadable request to
// validation, which refuses it; mutating it would only hide the error.
func (m *Designator) refusals() unreadable {
	return unreadable{webhookName: "mutate", metrics: m.Metrics, log: m.Log}
}

// maxPatchedValueBytes bounds a value the mutating webhook writes into a
// patch: a username (Kubernetes names are at most 253 bytes, a service
// account's username under 320) or a stored renewTime (about 30 bytes).
const maxPatchedValueBytes = 1 << 10

// Handle answers one admission request with a patch or none
// (controller-runtime's admission.Handler).
func (m *Designator) Handle(_ context.Context, ar cradmission.Request) cradmission.Response {
	req, err := leaseobject.ReadRequest(&ar.AdmissionRequest, now(m.Now))
	if err != nil {
		return m.refusals().answer(string(ar.UID), http.StatusBadRequest, err, "unreadable")
	}
	p := m.Policies.Policy()
	var ops []jsonpatch.JsonPatchOperation
	// The patch echoes a stored time or a username: past the sizes a
	// real lease carries, nothing is patched (the renewal is stored, the
	// designation left to the manager or an operator), so that an answer
	// never grows with what a client posts.
	// Decided first, then answered: the three decisions are the core's,
	// the patch and the counts this room's.
	coalesce, acknowledge := policy.Coalesce(p, req), false
	if !coalesce {
		acknowledge = policy.Acknowledge(p, req)
	}
	var user string
	var stamp bool
	if !coalesce && !acknowledge {
		user, stamp = policy.Designate(p, req)
	}
	switch {
	case coalesce || acknowledge:
		if len(req.Old.RenewTimeText) <= maxPatchedValueBytes {
			ops = append(ops, jsonpatch.NewOperation("replace", "/spec/renewTime", req.Old.RenewTimeText))
			if coalesce {
				m.Metrics.Coalesced(req.Resource)
			} else {
				m.Metrics.Acknowledged(req.Resource)
			}
		}
	case stamp && len(user) <= maxPatchedValueBytes:
		if !req.New.HasAnnotations {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{leaseobject.DesignationAnnotation: user}))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations/"+escapeJSONPointer(leaseobject.DesignationAnnotation), user))
		}
		m.Log.V(1).Info("designating manager", "user", oneline.Clip(user), "namespace", oneline.Clip(req.New.Namespace), "name", oneline.Clip(req.New.Name))
	}
	// controller-runtime's Webhook encodes the operations (Response.Complete).
	return cradmission.Patched("", ops...)
}

func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
