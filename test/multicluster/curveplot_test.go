package multicluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The committed report (docs/multicluster-curve.md) reads back into the
// figures the plot is drawn from: every row has a figure per column, and
// the plot draws from them. With CURVE_REPLOT set the plot is written
// there, so that a change to how it is drawn needs no new measurement:
//
//	cd test/multicluster && CURVE_REPLOT=$PWD/../../docs/multicluster-curve.png go test -run TestCurveReportPlots .
func TestCurveReportPlots(t *testing.T) {
	src, err := os.ReadFile("../../docs/multicluster-curve.md")
	if err != nil {
		t.Fatal(err)
	}
	ns, modes, values, err := parseCurveReport(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) == 0 || len(modes) != 3 {
		t.Fatalf("the report has %d N and %d modes, want some N and 3 modes", len(ns), len(modes))
	}
	out := os.Getenv("CURVE_REPLOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "curve.png")
	}
	err = plotCurve(out, ns, modes, func(mode admission, n, col int) float64 { return values[curveKey(mode, n)][col] })
	if err != nil {
		t.Fatal(err)
	}
}

// figure is a cell's own figure, before any ratio in parentheses.
var figure = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?`)

// parseCurveReport reads curveReport's table back: N in order, the modes
// in order, and per mode and N a figure per column of curveColumns.
func parseCurveReport(text string) ([]int, []admission, map[string][]float64, error) {
	modeOf := map[string]admission{}
	for _, a := range []admission{admissionNone, admissionShipped, admissionFloor} {
		modeOf[modeShort(a)] = a
	}
	var ns []int
	var modes []admission
	values := map[string][]float64{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		n, err := strconv.Atoi(cells[0])
		if err != nil || len(cells) < 2 {
			continue
		}
		mode, ok := modeOf[cells[1]]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%q: unknown mode %q", line, cells[1])
		}
		if len(cells) != 2+len(curveColumns)+1 {
			return nil, nil, nil, fmt.Errorf("%q: %d cells, want %d", line, len(cells), 2+len(curveColumns)+1)
		}
		var row []float64
		for i, c := range cells[2 : 2+len(curveColumns)] {
			f, err := strconv.ParseFloat(figure.FindString(c), 64)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%q: column %s: %q is no figure", line, curveColumns[i].name, c)
			}
			row = append(row, f)
		}
		if len(ns) == 0 || ns[len(ns)-1] != n {
			ns = append(ns, n)
		}
		if len(ns) == 1 {
			modes = append(modes, mode)
		}
		values[curveKey(mode, n)] = row
	}
	return ns, modes, values, nil
}
