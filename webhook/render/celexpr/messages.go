package celexpr

import "strings"

// Messages in CEL: leaseguard's one-line refusal (docs/policy.md,
// "Messages") written by an admission policy's messageExpression, as the
// webhook words it, for the admission policies of `leaseguard vap` and the
// renewals policy `leaseguard manifests` renders.

// printable renders "s prints as itself": letters, marks, numbers,
// punctuation, symbols and the ASCII space (Go's strconv.IsPrint), which
// leaseguard's messages do not escape.
func printable(s string) string {
	return "!" + s + ".matches('[^\\\\p{L}\\\\p{M}\\\\p{N}\\\\p{P}\\\\p{S} ]')"
}

// Clip cuts a value to 80 characters, as leaseguard's messages do. A value
// with characters that do not print as themselves, which the webhook
// escapes, is not shown.
func Clip(s string) string {
	return Ternary(printable(s), Ternary(s+".size() > 80", s+".substring(0, 77) + '...'", s), Quote("(not printable)"))
}

// RFC3339 renders a timestamp in UTC to the second, as Go's time.RFC3339.
func RFC3339(t string) string { return "string(timestamp(int(" + t + ")))" }

// RFC3339Nano renders a timestamp in UTC with its fraction.
func RFC3339Nano(t string) string {
	return "[" + t + "].map(t, string(timestamp(int(t)) + (t - timestamp(int(t)))))[0]"
}

// Refusal renders leaseguard's message "leaseguard: rule R: CALLER PROBLEM
// KIND NS/NAME (HINT)", cut to 255 characters. rule is the rule's name;
// user, problem, kind and hint are CEL string expressions (hint "" for
// none).
func Refusal(rule, user, problem, kind, hint string) string {
	msg := "(" + strings.Join([]string{
		Quote("leaseguard: rule " + rule + ": "), Clip(user), "' '", problem, "' '", kind, "' '",
		"request.?namespace.orValue('')", "'/'", ObjectName,
	}, " + ")
	if hint != "" {
		msg += " + ' (' + " + hint + " + ')'"
	}
	msg += ")"
	return "[" + msg + "].map(m, m.size() > 255 ? m.substring(0, 252) + '...' : m)[0]"
}
