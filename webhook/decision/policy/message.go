package policy

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxMessageLength bounds every denial message (docs/design.md §4): one line, fit for
// kubectl's error output and an event.
const MaxMessageLength = 255

// maxValue bounds one value (a username, a holder) inside a message, so that
// one long value cannot crowd out the rest.
const maxValue = 80

// deny builds a denial: "leaseguard: rule R: CALLER PROBLEM KIND NS/NAME (HINT)".
// Messages are built only on this path, so admitted writes never allocate.
func (c *check) deny(inv Invariant, code int32, problem, hint string) Decision {
	msg := "leaseguard: rule " + c.rule.Name + ": " + clip(c.req.Caller.Username) + " " + problem + " " +
		c.req.Resource.kind() + " " + c.obj.Namespace + "/" + c.obj.Name
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return Decision{Verdict: Deny, Invariant: inv, Code: code, Message: truncate(msg, MaxMessageLength)}
}

// clip makes a value fit in a one-line message: characters that do not print
// as themselves are escaped (a newline in a client-chosen holder, or a
// right-to-left override that would make a log line read backwards), and
// long values cut.
func clip(s string) string {
	if len(s) > maxValue+utf8.UTFMax {
		// Cut before escaping: a value can be megabytes, and escaping
		// all of it (four bytes per control character) to keep eighty
		// would cost many times its size. Still longer than maxValue, so
		// the cut below marks it.
		cut := maxValue + utf8.UTFMax
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	s = escape(s)
	if len(s) <= maxValue {
		return s
	}
	return truncate(s, maxValue)
}

// escape writes a value that holds a character that does not print as
// itself as Go quotes it, without the quotes: the whole value, so that a
// backslash in it reads unambiguously (\\) beside the escapes.
func escape(s string) string {
	if strings.IndexFunc(s, notPrintable) >= 0 || !utf8.ValidString(s) {
		q := strconv.Quote(s)
		return q[1 : len(q)-1]
	}
	return s
}

// notPrintable reports runes that do not print as themselves: control and
// format characters (U+202E and its kind), and other non-graphic runes.
func notPrintable(r rune) bool { return !strconv.IsPrint(r) || unicode.Is(unicode.Cf, r) }

// Clip makes a client-chosen value safe for one line of a message or a log:
// escaped as in a denial message, and cut to a bounded length.
func Clip(s string) string { return clip(s) }

// Escape makes a client-chosen value safe to print as Clip does, without
// cutting it: for displays that bound what they show themselves, by width
// on the escaped text (leaseguard top's tables). No control, format or
// bidirectional character reaches a terminal through it.
func Escape(s string) string { return escape(s) }

// Printable reports whether r prints as itself: what Escape leaves as is.
func Printable(r rune) bool { return !notPrintable(r) }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
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
		return clip(user)
	}
	return clip("..." + user[cut+1:])
}
