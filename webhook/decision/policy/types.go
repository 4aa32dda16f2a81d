// Package policy is leaseguard's decision core: a pure function from a
// compiled rule set, the caller, the operation, the old and new lease and the
// server's clock to a decision. It does no I/O and keeps no state, so every
// webhook replica, `leaseguard check` and the tests decide alike.
package policy

import "time"

// DefaultClockSkew is the grace applied to expiry, staleness and future
// renewTimes when the policy file sets no clockSkew.
const DefaultClockSkew = 2 * time.Second

// Verdict is the outcome of a decision.
type Verdict uint8

// Verdicts. Warn and Audit are admitted writes that a deny rule would have
// refused.
const (
	Allow Verdict = iota
	Deny
	Warn
	Audit
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case Warn:
		return "warn"
	case Audit:
		return "audit"
	}
	return "unknown"
}

// Invariant names a docs/design.md §4 invariant.
type Invariant string

// The invariants of docs/design.md §4.
const (
	InvariantNone              Invariant = ""
	InvariantManager           Invariant = "I1"
	InvariantDesignatedWriter  Invariant = "I2"
	InvariantDesignationChange Invariant = "I3"
	InvariantFencing           Invariant = "I4"
	InvariantHolder            Invariant = "I5"
	InvariantRenewalRate       Invariant = "I6"
	InvariantLeaseTimes        Invariant = "I7"
	InvariantStatus            Invariant = "I8"
	InvariantBound             Invariant = "I9"
	InvariantBounds            Invariant = "I10"
	InvariantMetadata          Invariant = "I11"
)
