package topui

import (
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
)

// A bypassed admission configuration is the first thing top says after the
// totals, with the operator's reason quoted: it is whatever the annotation
// holds, and must not write to the terminal.
func TestABypassIsShownWithItsReasonQuoted(t *testing.T) {
	r := &leasetraffic.Report{Time: time.Unix(0, 0), WindowSeconds: 10, ObservedSeconds: 10,
		AdmissionBypass: &leasetraffic.AdmissionBypass{Configuration: "leaseguard-validating-webhook-configuration", Reason: "INC-7\x1b[2J: webhook down"}}
	lines := Lines(r, false, nil)
	want := `admission configuration leaseguard-validating-webhook-configuration: BYPASSED (leaseguard.io/bypass: "INC-7\x1b[2J: webhook down"): leaseguard does not repair it`
	if len(lines) < 3 || lines[2] != want {
		t.Fatalf("lines %q\nwant line 3 %q", lines, want)
	}
	if strings.Contains(strings.Join(lines, "\n"), "\x1b") {
		t.Error("the reason's escape sequence reached the output")
	}
	r.AdmissionBypass = nil
	for _, l := range Lines(r, false, nil) {
		if strings.Contains(l, "BYPASSED") {
			t.Errorf("without a bypass: %q", l)
		}
	}
}
