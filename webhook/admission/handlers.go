package admission

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/leasestats"
	"github.com/leaseguard/leaseguard/webhook/metrics"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// Paths the webhooks are served on; the webhook configurations that
// `leaseguard manifests` generates name the same paths.
const (
	ValidatePath = "/validate-leases"
	// RenewalsPath serves the fail-open webhook, which the API server calls
	// for every UPDATE that changes something; it decides those the
	// fail-closed webhook does not (policy.FailClosed): the rightful
	// renewers' renewals, metadata writes, and status writers' status
	// writes (policy.StatusWriterStatusWrite).
	RenewalsPath = "/validate-renewals"
	MutatePath   = "/mutate-leases"
)

// Validator is the validating webhook: it enforces docs/design.md §4 on
// every guarded write.
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

// Handler returns the http.Handler serving the validating webhook.
func (v *Validator) Handler() http.Handler {
	return &handler{d: v, metrics: v.Metrics, log: v.Log, now: v.Now}
}

func (v *Validator) webhook() string {
	if v.OnlyRenewals {
		return "renewals"
	}
	return "validate"
}

// refusesUnreadable: validation refuses what it cannot read.
func (v *Validator) refusesUnreadable() bool { return true }

func (v *Validator) decide(r *Review) Answer {
	start := time.Now()
	req := r.Request
	// Every handler decides every write it receives against the policy it
	// holds, never "allowed because the other webhook decides": after a
	// policy reload the API server may still route by the match
	// conditions rendered from the old one, so a write the fail-closed
	// webhook should now take can reach only this one. (The rendered
	// conditions send each write to one webhook only.)
	d := policy.Decide(v.Policies.Policy(), req)
	v.Metrics.Decision(req.Resource, &d, time.Since(start))
	v.LeaseStats.ObserveRequest(req, d.Verdict) // per-lease top-K for /debug/leases
	if d.Verdict != policy.Allow {
		obj := req.New
		if obj == nil {
			obj = req.Old
		}
		v.Log.Info("lease write "+verdictPast(d.Verdict),
			"rule", d.Rule, "invariant", string(d.Invariant), "verdict", d.Verdict.String(),
			"user", policy.Clip(req.Caller.Username), "resource", string(req.Resource), "namespace", policy.Clip(obj.Namespace), "name", policy.Clip(obj.Name),
			"operation", string(req.Operation), "subresource", req.Subresource, "dryRun", req.DryRun,
			"message", d.Message)
	}
	if d.Notice != "" {
		v.Metrics.UnreadableStored(req.Resource)
		v.Log.Info("stored lease has an unreadable field", "uid", r.UID, "notice", d.Notice)
	}
	return Response(&d)
}

// Response turns a decision into the answer the API server returns to the
// client: a 403 or 429 Status for a denial (with Retry-After seconds for a
// 429), a warning kubectl prints for warn, a plain allow otherwise.
func Response(d *policy.Decision) Answer {
	var a Answer
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
		return Answer{Status: status}
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
// to the stored one. It never refuses a write.
type Designator struct {
	Policies PolicySource
	Metrics  *metrics.Recorder
	Log      logr.Logger
	Now      func() time.Time
}

// Handler returns the http.Handler serving the mutating webhook.
func (m *Designator) Handler() http.Handler {
	return &handler{d: m, metrics: m.Metrics, log: m.Log, now: m.Now}
}

func (m *Designator) webhook() string { return "mutate" }

// refusesUnreadable: the mutating webhook leaves an unreadable request to
// validation, which refuses it; mutating it would only hide the error.
func (m *Designator) refusesUnreadable() bool { return false }

// maxPatchedValueBytes bounds a value the mutating webhook writes into a
// patch: a username (Kubernetes names are at most 253 bytes, a service
// account's username under 320) or a stored renewTime (about 30 bytes).
const maxPatchedValueBytes = 1 << 10

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func (m *Designator) decide(r *Review) Answer {
	req := r.Request
	p := m.Policies.Policy()
	var ops []patchOp
	// The patch echoes a stored time or a username: past the sizes a
	// real lease carries, nothing is patched (the renewal is stored, the
	// designation left to the manager or an operator), so that an answer
	// never grows with what a client posts.
	coalesce, acknowledge := policy.Coalesce(p, req), false
	if !coalesce {
		acknowledge = policy.Acknowledge(p, req)
	}
	if coalesce || acknowledge {
		if len(req.Old.RenewTimeText) <= maxPatchedValueBytes {
			ops = append(ops, patchOp{Op: "replace", Path: "/spec/renewTime", Value: req.Old.RenewTimeText})
			if coalesce {
				m.Metrics.Coalesced(req.Resource)
			} else {
				m.Metrics.Acknowledged(req.Resource)
			}
		}
	} else if user, stamp := policy.Designate(p, req); stamp && len(user) <= maxPatchedValueBytes {
		if !req.New.HasAnnotations {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{policy.DesignationAnnotation: user}})
		} else {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escapeJSONPointer(policy.DesignationAnnotation), Value: user})
		}
		m.Log.V(1).Info("designating manager", "user", policy.Clip(user), "namespace", policy.Clip(req.New.Namespace), "name", policy.Clip(req.New.Name))
	}
	if len(ops) == 0 {
		return Answer{Allowed: true}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		m.Log.Error(err, "encoding the patch")
		return Answer{Allowed: true}
	}
	return Answer{Allowed: true, Patch: patch}
}

func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
