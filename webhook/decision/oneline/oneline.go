// Package oneline makes client-written text safe for one line of a message,
// a log or a terminal: characters that do not print as themselves are
// escaped (a newline in a client-chosen holder, or a right-to-left override
// that would make a log line read backwards), and long values are cut.
// Every leaseguard message that quotes what a client wrote goes through it:
// the decision core's denials, the reader's errors, the tools' tables.
package oneline

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxValue bounds one value (a username, a holder) inside a message, so
// that one long value cannot crowd out the rest.
const MaxValue = 80

// Clip makes a client-chosen value safe for one line of a message or a log:
// escaped, and cut to MaxValue bytes.
func Clip(s string) string {
	if len(s) > MaxValue+utf8.UTFMax {
		// Cut before escaping: a value can be megabytes, and escaping
		// all of it (four bytes per control character) to keep eighty
		// would cost many times its size. Still longer than MaxValue, so
		// the cut below marks it.
		cut := MaxValue + utf8.UTFMax
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	s = Escape(s)
	if len(s) <= MaxValue {
		return s
	}
	return Truncate(s, MaxValue)
}

// Escape makes a client-chosen value safe to print as Clip does, without
// cutting it: for displays that bound what they show themselves, by width
// on the escaped text (leaseguard top's tables). A value that holds a
// character that does not print as itself is written as Go quotes it,
// without the quotes: the whole value, so that a backslash in it reads
// unambiguously (\\) beside the escapes. No control, format or
// bidirectional character reaches a terminal through it.
func Escape(s string) string {
	if strings.IndexFunc(s, notPrintable) >= 0 || !utf8.ValidString(s) {
		q := strconv.Quote(s)
		return q[1 : len(q)-1]
	}
	return s
}

// Printable reports whether r prints as itself: what Escape leaves as is.
func Printable(r rune) bool { return !notPrintable(r) }

// notPrintable reports runes that do not print as themselves: control and
// format characters (U+202E and its kind), and other non-graphic runes.
func notPrintable(r rune) bool { return !strconv.IsPrint(r) || unicode.Is(unicode.Cf, r) }

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
