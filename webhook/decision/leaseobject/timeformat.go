package leaseobject

import (
	"fmt"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// ParseTime reads a time as the API server accepts it, so that every object
// it stores is readable:
//   - a Lease's MicroTime, which the API server parses with Go's RFC 3339
//     layout and always stores and sends back in canonical form;
//   - a custom resource's `format: date-time` string, stored verbatim, which
//     the API server validates with kube-openapi's date-time check: a valid
//     date, 'T' or 't', hh:mm:ss (hh ≤ 23, mm and ss ≤ 59), an optional
//     fraction of any length, and 'Z', 'z' or a ±hh:mm offset whose digits
//     are not range-checked (so +99:00 is stored). The offset is applied as
//     written: +99:00 is 99 hours ahead of UTC.
func ParseTime(s string) (time.Time, error) {
	if t, ok := parseTime(s); ok {
		return t, nil
	}
	// The value is cut before it is quoted: it can be megabytes long.
	return time.Time{}, fmt.Errorf("\"%s\" is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z", oneline.Clip(s))
}

// MicroTimeLayout is the one layout metav1.MicroTime reads (and writes):
// RFC 3339 with exactly six fractional digits.
const MicroTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// TypedTime reports whether a typed client reads s as a metav1.MicroTime
// (which parses it with MicroTimeLayout) in the form it writes: Go also
// reads a comma before the fraction, which no client writes and the
// generated ValidatingAdmissionPolicy refuses, so it is refused here too.
func TypedTime(s string) bool {
	if len(s) < len("2006-01-02T15:04:05.000000Z") || len(s) > len("2006-01-02T15:04:05.000000-07:00") || s[19] != '.' {
		return false
	}
	_, err := time.Parse(MicroTimeLayout, s)
	return err == nil
}

// parseTime is ParseTime without the error, for callers that skip what they
// cannot read.
func parseTime(s string) (time.Time, bool) {
	// time.Parse copies the whole value into its error; no RFC 3339 time
	// it reads is longer than this (the date-time check allows a longer
	// fraction, which parseDateTime reads).
	if len(s) <= len("2006-01-02T15:04:05.999999999-07:00") {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, true
		}
	}
	return parseDateTime(s)
}

func parseDateTime(s string) (time.Time, bool) {
	if len(s) < len("2006-01-02T15:04:05Z") || (s[10] != 'T' && s[10] != 't') {
		return time.Time{}, false
	}
	date, err := time.Parse("2006-01-02", s[:10])
	if err != nil {
		return time.Time{}, false
	}
	clock, rest, ok := parseClock(s[11:])
	if !ok {
		return time.Time{}, false
	}
	offset, ok := parseZone(rest)
	if !ok {
		return time.Time{}, false
	}
	t := date.Add(clock)
	return t.Add(-offset), true
}

// parseClock reads hh:mm:ss with an optional fraction of any length, and
// returns the time of day and what follows.
func parseClock(s string) (time.Duration, string, bool) {
	hh, ok1 := twoDigits(s, 0)
	mm, ok2 := twoDigits(s, 3)
	ss, ok3 := twoDigits(s, 6)
	if !ok1 || !ok2 || !ok3 || s[2] != ':' || s[5] != ':' || hh > 23 || mm > 59 || ss > 59 {
		return 0, "", false
	}
	d := time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute + time.Duration(ss)*time.Second
	rest := s[8:]
	// A comma too, as Go's time.Parse reads it (and the date-time
	// pattern's unescaped '.' lets the API server store it): a fraction
	// read by time.Parse when short must read the same when long.
	if len(rest) == 0 || (rest[0] != '.' && rest[0] != ',') {
		return d, rest, true
	}
	i, scale := 1, time.Duration(100000000)
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
		d += time.Duration(rest[i]-'0') * scale
		scale /= 10
	}
	if i == 1 {
		return 0, "", false
	}
	return d, rest[i:], true
}

// parseZone reads 'Z', 'z' or a ±hh:mm offset whose digits are not
// range-checked.
func parseZone(s string) (time.Duration, bool) {
	if s == "Z" || s == "z" {
		return 0, true
	}
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
		return 0, false
	}
	oh, ok1 := twoDigits(s, 1)
	om, ok2 := twoDigits(s, 4)
	if !ok1 || !ok2 {
		return 0, false
	}
	offset := time.Duration(oh)*time.Hour + time.Duration(om)*time.Minute
	if s[0] == '-' {
		offset = -offset
	}
	return offset, true
}

func twoDigits(s string, at int) (int, bool) {
	if at+2 > len(s) || s[at] < '0' || s[at] > '9' || s[at+1] < '0' || s[at+1] > '9' {
		return 0, false
	}
	return int(s[at]-'0')*10 + int(s[at+1]-'0'), true
}
