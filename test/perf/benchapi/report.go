package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ratios are one setup's figures divided by its baseline's in the same
// round, one per round.
type ratios struct {
	p50, throughput, cpu []float64
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairRatios divides each setup's measurement by its baseline's of the same
// round.
func pairRatios(ms []measurement, against string) map[string]*ratios {
	byRound := map[int]map[string]measurement{}
	for _, m := range ms {
		if byRound[m.round] == nil {
			byRound[m.round] = map[string]measurement{}
		}
		byRound[m.round][m.setup] = m
	}
	out := map[string]*ratios{}
	for _, round := range byRound {
		for name, m := range round {
			b, ok := round[against]
			if !ok || b.throughput == 0 || b.p50 == 0 {
				continue
			}
			r := out[name]
			if r == nil {
				r = &ratios{}
				out[name] = r
			}
			r.p50 = append(r.p50, float64(m.p50)/float64(b.p50))
			r.throughput = append(r.throughput, m.throughput/b.throughput)
			if bc := b.cpu["kube-apiserver"]; bc > 0 {
				r.cpu = append(r.cpu, m.cpu["kube-apiserver"]/bc)
			}
		}
	}
	return out
}

func rangeOf(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(s), s[0], s[len(s)-1])
}

func report(w io.Writer, o options, ms []measurement) {
	names := splitList(o.setups)
	fmt.Fprintf(w, "%d rounds × %s per setup (after %s of warm-up), %d clients renewing their own Lease back to back; %s\n\n",
		o.rounds, o.duration, o.warmup, o.clients, time.Now().UTC().Format("2006-01-02"))
	noneRatios := pairRatios(ms, "none")
	plainRatios := pairRatios(ms, "noop-plain")
	noopRatios := pairRatios(ms, "noop-webhook")
	// noop-routed: the no-op behind leaseguard's generated configuration
	// (its match conditions): the floor of a webhook routed as leaseguard's.
	routedRatios := pairRatios(ms, "noop-routed")
	fmt.Fprintln(w, "| setup | p50 × none | throughput × none | p50 × plain no-op | p50 × no-op matched like leaseguard | throughput × no-op matched like leaseguard | p50 × no-op routed like leaseguard | kube-apiserver CPU/renewal × none |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	orEmpty := func(r *ratios) *ratios {
		if r == nil {
			return &ratios{}
		}
		return r
	}
	for _, n := range names {
		a, p, b, r := orEmpty(noneRatios[n]), orEmpty(plainRatios[n]), orEmpty(noopRatios[n]), orEmpty(routedRatios[n])
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", n, rangeOf(a.p50), rangeOf(a.throughput), rangeOf(p.p50), rangeOf(b.p50), rangeOf(b.throughput), rangeOf(r.p50), rangeOf(a.cpu))
	}
	fmt.Fprintln(w, "\nmedian of the per-round ratios (lowest–highest round); absolute figures per round, for reference only:")
	fmt.Fprintln(w, "\n| round | setup | renewals/s | p50 | p99 | failed | kube-apiserver CPU ms/renewal | leaseguard CPU ms/renewal | no-op process CPU ms/renewal |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, m := range ms {
		fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %d | %.2f | %.2f | %.2f |\n", m.round+1, m.setup, m.throughput,
			m.p50.Round(10*time.Microsecond), m.p99.Round(10*time.Microsecond), m.failures, m.cpu["kube-apiserver"], m.cpu["leaseguard"], m.cpu["noop"])
	}
}
