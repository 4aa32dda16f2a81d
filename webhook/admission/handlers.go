package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	jsonpatch "gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/leasestats"
	"github.com/leaseguard/leaseguard/webhook/metrics"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// Paths the webhooks are served on; the webhook configurations in config/
// name the same paths.
const (
	ValidatePath = "/validate-leases"
	MutatePath   = "/mutate-leases"
)

// Validator is the validating webhook: it enforces docs/design.md §4 on every guarded
// write.
type Validator struct {
	Policies PolicySource
	Metrics  *metrics.Recorder
	Log      logr.Logger
	// Now is the server clock; time.Now when nil.
	Now func() time.Time
	// LeaseStats counts the heaviest leases and writers (/debug/leases); nil disables it.
	LeaseStats *leasestats.Stats
}

var _ admission.Handler = (*Validator)(nil)

// Handle decides one admission request.
func (v *Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	start := time.Now()
	now := start
	if v.Now != nil {
		now = v.Now()
	}
	preq, err := ToPolicyRequest(&req.AdmissionRequest, now)
	if err != nil {
		v.Metrics.BadRequest("validate")
		v.Log.Info("rejected unreadable admission request", "uid", req.UID, "error", err.Error())
		return admission.Errored(http.StatusBadRequest, badRequest(err))
	}
	d := policy.Decide(v.Policies.Policy(), preq)
	v.Metrics.Decision(preq.Resource, &d, time.Since(start))
	v.LeaseStats.ObserveRequest(preq, d.Verdict) // leasestats hook (issue 13): per-lease top-K for /debug/leases
	if d.Verdict != policy.Allow {
		obj := preq.New
		if obj == nil {
			obj = preq.Old
		}
		v.Log.Info("lease write "+verdictPast(d.Verdict),
			"rule", d.Rule, "invariant", string(d.Invariant), "verdict", d.Verdict.String(),
			"user", preq.Caller.Username, "resource", string(preq.Resource), "namespace", obj.Namespace, "name", obj.Name,
			"operation", string(preq.Operation), "subresource", preq.Subresource, "dryRun", req.DryRun != nil && *req.DryRun,
			"message", d.Message)
	}
	return Response(&d)
}

// Response turns a decision into the admission response the API server
// returns to the client: a 403 or 429 Status for a denial (with Retry-After
// seconds for I6), a warning kubectl prints for warn, a plain allow otherwise.
func Response(d *policy.Decision) admission.Response {
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
		return admission.Response{AdmissionResponse: admissionResponse(false, status)}
	case policy.Warn:
		return admission.Allowed("").WithWarnings(d.Message)
	}
	return admission.Allowed("")
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

// Designator is the mutating webhook of designation: auto. It records the
// designated manager on the object; it never refuses a write.
type Designator struct {
	Policies PolicySource
	Metrics  *metrics.Recorder
	Log      logr.Logger
	Now      func() time.Time
}

var _ admission.Handler = (*Designator)(nil)

// Handle stamps the designation annotation where policy.Designate says so.
func (m *Designator) Handle(_ context.Context, req admission.Request) admission.Response {
	now := time.Now()
	if m.Now != nil {
		now = m.Now()
	}
	preq, err := ToPolicyRequest(&req.AdmissionRequest, now)
	if err != nil {
		// The validating webhook answers unreadable requests; mutating them
		// would only hide the error.
		m.Metrics.BadRequest("mutate")
		return admission.Allowed("")
	}
	user, stamp := policy.Designate(m.Policies.Policy(), preq)
	if !stamp {
		return admission.Allowed("")
	}
	var meta struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
		return admission.Allowed("")
	}
	var patch jsonpatch.JsonPatchOperation
	if meta.Metadata.Annotations == nil {
		patch = jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{policy.DesignationAnnotation: user})
	} else {
		patch = jsonpatch.NewOperation("add", "/metadata/annotations/"+escapeJSONPointer(policy.DesignationAnnotation), user)
	}
	m.Log.V(1).Info("designating manager", "user", user, "namespace", preq.New.Namespace, "name", preq.New.Name)
	return admission.Patched("", patch)
}

func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func verdictPast(v policy.Verdict) string {
	switch v {
	case policy.Deny:
		return "denied"
	case policy.Warn:
		return "admitted with warning"
	case policy.Audit:
		return "admitted (audit)"
	}
	return "admitted"
}
