package manifests

import (
	"strconv"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// acknowledgement renders policy.Acknowledge for rule i in CEL, for a
// MutatingAdmissionPolicy that answers the other managers' renewals of a
// shared MultiClusterLease inside the API server (setting renewTime back to
// the stored one, so that the write changes nothing), with no call to the
// mutating webhook: another manager's plain renewal, in the form typed
// clients read, while the designated writer's lease is fresh and the
// renewal is not ahead of the API server's clock. The clock is the stamp
// of the managedFields entry that owns renewTime (ownsRenewTime), which the
// API server gives the write before admission; it is cut to whole seconds,
// so each comparison is made on the side where the policy acknowledges
// less, never more, than policy.Acknowledge: a renewal within a second of
// either bound is stored, as without the policy, and validation judges it.
// It reports false where CEL cannot say it exactly (a bind template with
// several captures, a rule that does not designate a writer).
func (g *generator) acknowledgement(i int) (string, bool) {
	r := &g.rules[i]
	if !contains(r.Resources, leaseobject.MultiClusterLeases) || r.Designation == policy.DesignationNone {
		return "", false
	}
	shared, exact := celexpr.SharedRenewer(r)
	if !exact {
		return "", false
	}
	designated := celexpr.Annotation("oldObject", leaseobject.DesignationAnnotation) + ".orValue('')"
	writer := designated
	if r.Designation == policy.DesignationFixed {
		writer = celexpr.Quote(r.FixedManager)
	}
	re := celexpr.Quote(RenewTimeLayout)
	lease := "duration(string(oldObject.spec.?leaseDurationSeconds.orValue(" + strconv.Itoa(int(leaseobject.DefaultLeaseDuration/time.Second)) + ")) + 's')"
	skew := "duration(" + celexpr.Quote(g.skew.String()) + ")"
	parts := []string{
		celexpr.SelectsFirst(g.rules, i),
		celexpr.OnlyRenewTimeMoves(leaseobject.MultiClusterLeases),
		readableOrTyped("object.spec.renewTime", re), readableOrTyped("oldObject.spec.renewTime", re),
		writer + " != ''", writer + " != " + celexpr.User,
	}
	if len(r.Operators) > 0 {
		parts = append(parts, celexpr.Not(celexpr.CallerMatches(r.Operators)))
	}
	parts = append(parts, shared,
		// Fresh: the server's clock (at most the stamp + 1 s) no later
		// than the stored lease's expiry + the skew; and not ahead: the
		// renewal no later than the clock (at least the stamp) + the skew.
		"object.metadata.?managedFields.orValue([]).exists(m, "+ownsRenewTime("m")+" && has(m.time) && "+
			"timestamp(m.time) + duration('1s') <= timestamp(oldObject.spec.renewTime) + "+lease+" + "+skew+" && "+
			"timestamp(object.spec.renewTime) <= timestamp(m.time) + "+skew+")")
	return celexpr.And(parts...), true
}

// readableOrTyped renders "the time x is in the one form typed clients
// read" where x reaches CEL as a string (a webhook's match conditions see
// objects untyped), and true where the API server hands it over already
// typed: an admission policy sees a MultiClusterLease through its schema,
// renewTime (format date-time) as a timestamp, whose written form it does
// not keep. That is harmless here: an acknowledged renewal's renewTime is
// set back to the stored one, which validation admitted, and nothing is
// stored. dyn() lets the one expression type-check either way.
func readableOrTyped(x, re string) string {
	return "(type(dyn(" + x + ")) != string || dyn(" + x + ").matches(" + re + "))"
}

// acknowledgesInAPIServer: the MutatingAdmissionPolicy acknowledges (and
// the mutating webhook then skips the no-ops it leaves) wherever it is
// rendered at all; on clusters without it (--coalesce webhook or off) the
// mutating webhook acknowledges, as before.
func (g *generator) acknowledgesInAPIServer() bool {
	return g.o.Coalescing == CoalesceInAPIServer
}
