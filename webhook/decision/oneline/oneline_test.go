package oneline

import (
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"plain", "system:serviceaccount:ns:sa", "system:serviceaccount:ns:sa"},
		{"newline", "pod-0\nleaseguard: admitted", `pod-0\nleaseguard: admitted`},
		{"right-to-left override", "evil\u202Etxt.exe", `evil\u202etxt.exe`},
		{"backslash beside an escape", "a\\b\x00", `a\\b\x00`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"long", strings.Repeat("a", 100), strings.Repeat("a", MaxValue-3) + "..."},
		{"long and multi-byte", strings.Repeat("é", 60), strings.Repeat("é", (MaxValue-3)/2) + "..."},
	} {
		got := Clip(c.in)
		if got != c.want {
			t.Errorf("%s: Clip(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if len(got) > MaxValue || !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\u202E") {
			t.Errorf("%s: Clip(%q) = %q: not one bounded, valid, printable line", c.name, c.in, got)
		}
	}
}

// A megabyte value is cut before it is escaped: clipping it costs what
// clipping eighty bytes costs.
func TestClipCutsBeforeEscaping(t *testing.T) {
	huge := strings.Repeat("\x01", 1<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := Clip(huge)
	runtime.ReadMemStats(&after)
	if len(got) > MaxValue || !strings.HasSuffix(got, "...") {
		t.Fatalf("Clip of 1 MiB = %q", got)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<10 {
		t.Errorf("Clip of 1 MiB allocated %d bytes, want a few hundred: escaping all of it would take 4 MiB", n)
	}
}

func TestEscapeKeepsLengthAndPrintable(t *testing.T) {
	long := strings.Repeat("b", 500)
	if got := Escape(long); got != long {
		t.Errorf("Escape cut a printable value: %d bytes, want %d", len(got), len(long))
	}
	if got := Escape("x\ty"); got != `x\ty` {
		t.Errorf("Escape(tab) = %q", got)
	}
	if Printable('\u202E') || Printable('\n') || !Printable('é') {
		t.Errorf("Printable: U+202E %t, newline %t, é %t; want false, false, true", Printable('\u202E'), Printable('\n'), Printable('é'))
	}
}

func TestTruncateOnARuneBoundary(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Errorf("Truncate(short) = %q", got)
	}
	got := Truncate(strings.Repeat("日", 10), 10)
	if !utf8.ValidString(got) || len(got) > 10 || !strings.HasSuffix(got, "...") {
		t.Errorf("Truncate cut a rune: %q", got)
	}
}
