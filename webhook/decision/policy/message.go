package policy

import (
	"strconv"
	"strings"

	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// MaxMessageLength bounds every denial message (docs/design.md §4): one line, fit for
// kubectl's error output and an event.
const MaxMessageLength = 255

// deny builds a denial: "leaseguard: rule R: CALLER PROBLEM KIND NS/NAME (HINT)".
// Messages are built only on this path, so admitted writes never allocate.
func (c *check) deny(inv Invariant, code int32, problem, hint string) Decision {
	msg := "leaseguard: rule " + c.rule.Name + ": " + oneline.Clip(c.req.Caller.Username) + " " + problem + " " +
		c.req.Resource.kind() + " " + c.obj.Namespace + "/" + c.obj.Name
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return Decision{Verdict: Deny, Invariant: inv, Code: code, Message: oneline.Truncate(msg, MaxMessageLength)}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// relative abbreviates a username that shares a long prefix with the
// caller's, so both fit in one message: for the caller
// system:serviceaccount:cnrm-system:cnrm-controller-manager-b, the user
// system:serviceaccount:cnrm-system:cnrm-controller-manager-a is written
// ...cnrm-controller-manager-a. The cut falls after the last ':' shared.
func (c *check) relative(user string) string {
	caller := c.req.Caller.Username
	n := 0
	for n < len(user) && n < len(caller) && user[n] == caller[n] {
		n++
	}
	cut := strings.LastIndexByte(user[:n], ':')
	if cut < 16 {
		return oneline.Clip(user)
	}
	return oneline.Clip("..." + user[cut+1:])
}
