package multicluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The measurement of docs/multicluster.md: the same managers and
// controllers with and without leaseguard (without = no webhook
// configurations), in interleaved rounds, counting per cluster the lease
// writes that reach storage and the write requests the managers send. It
// runs only when asked for (label "measure", `make measure-multicluster`).
//
// MULTICLUSTER_ROUNDS (default 3) and MULTICLUSTER_WINDOW (default 20s) size
// it; MULTICLUSTER_REPORT names a file to write the tables to.

// counts are one cluster's figures over one window.
type counts struct {
	stored   writeCounts
	requests int64 // write requests the managers sent, every attempt
	refused  int64 // of which answered 403 or 429
	writers  int   // managers whose writes reached the shared object's spec
}

// specWriters counts the managers whose admitted writes are among ws.
func specWriters(f *fleet, c *cluster, ws []write) int {
	byVersion := writerOf(f, c)
	users := map[string]bool{}
	for _, w := range ws {
		if m, ok := byVersion[w.version]; ok && w.spec {
			users[m.Config().Username()] = true
		}
	}
	return len(users)
}

func managerRequests(f *fleet, c *cluster) (sent, refused int64) {
	for _, m := range f.all(c) {
		st := m.Stats()
		for _, byCode := range []map[int]int64{st.MCLWrites, st.LeaseWrites} {
			for code, n := range byCode {
				sent += n
				if code == 403 || code == 429 {
					refused += n
				}
			}
		}
	}
	return sent, refused
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var _ = Describe("lease writes per cluster with and without leaseguard", Label("measure"), Ordered, func() {
	teams := []string{"team-a", "team-b", "team-c"}
	rounds := envInt("MULTICLUSTER_ROUNDS", 3)
	window := envDuration("MULTICLUSTER_WINDOW", 20*time.Second)
	const settle = 5 * time.Second

	It("measures in interleaved rounds", func(ctx SpecContext) {
		recs := map[*cluster]*recorder{}
		for _, c := range env.clusters {
			recs[c] = startRecorder(c)
		}
		f := startFleet(teams)
		DeferCleanup(func(ctx SpecContext) {
			for _, c := range env.clusters {
				Expect(c.setLeaseguard(ctx, true)).To(Succeed())
			}
			f.stop(ctx)
			for _, r := range recs {
				r.stop()
			}
		}, NodeTimeout(2*time.Minute))
		Eventually(func() *cluster { return activeCluster(f) }).WithTimeout(60 * time.Second).WithPolling(sampleEvery).ShouldNot(BeNil())
		active := activeCluster(f)

		type key struct {
			on bool
			c  *cluster
		}
		results := map[key][]counts{}
		for round := range rounds {
			modes := []bool{true, false}
			if round%2 == 1 {
				modes = []bool{false, true}
			}
			for _, on := range modes {
				for _, c := range env.clusters {
					Expect(c.setLeaseguard(ctx, on)).To(Succeed())
				}
				time.Sleep(settle)
				before := map[*cluster][2]int64{}
				for _, c := range env.clusters {
					sent, refused := managerRequests(f, c)
					before[c] = [2]int64{sent, refused}
				}
				from := time.Now()
				time.Sleep(window)
				to := time.Now()
				for _, c := range env.clusters {
					sent, refused := managerRequests(f, c)
					ws := recs[c].between(from, to)
					r := counts{stored: countWrites(ws), requests: sent - before[c][0], refused: refused - before[c][1], writers: specWriters(f, c, ws)}
					results[key{on, c}] = append(results[key{on, c}], r)
					if on {
						Expect(r.writers).To(Equal(1), "%s with leaseguard: managers writing the shared object", c)
					} else {
						Expect(r.writers).To(Equal(len(teams)), "%s without leaseguard: managers writing the shared object", c)
					}
				}
				Expect(activeCluster(f)).To(Equal(active), "the active cluster changed during the measurement")
			}
		}

		perSecond := func(n int64) float64 { return float64(n) / window.Seconds() }
		var b strings.Builder
		fmt.Fprintf(&b, "%d rounds of %s per mode, interleaved; %d managers per cluster; %s active.\n\n", rounds, window, len(teams), active)
		fmt.Fprintf(&b, "| cluster | leaseguard | writers of the MCL | MCL spec writes/s | MCL status writes/s | Lease writes/s | lease writes/s (stored) | write requests/s | refused/s |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range env.clusters {
			role := "standby"
			if c == active {
				role = "active"
			}
			for _, on := range []bool{false, true} {
				var sum counts
				var perRound []string
				writers := 0
				for _, r := range results[key{on, c}] {
					writers = max(writers, r.writers)
					sum.stored.mclSpec += r.stored.mclSpec
					sum.stored.mclOther += r.stored.mclOther
					sum.stored.leases += r.stored.leases
					sum.requests += r.requests
					sum.refused += r.refused
					perRound = append(perRound, fmt.Sprintf("%.2f", perSecond(int64(r.stored.total()))))
				}
				n := int64(len(results[key{on, c}]))
				mode := "off"
				if on {
					mode = "on"
				}
				fmt.Fprintf(&b, "| %s (%s) | %s | %d | %.2f | %.2f | %.2f | %.2f (rounds: %s) | %.2f | %.2f |\n", c, role, mode, writers,
					perSecond(int64(sum.stored.mclSpec))/float64(n), perSecond(int64(sum.stored.mclOther))/float64(n),
					perSecond(int64(sum.stored.leases))/float64(n), perSecond(int64(sum.stored.total()))/float64(n),
					strings.Join(perRound, ", "), perSecond(sum.requests)/float64(n), perSecond(sum.refused)/float64(n))
			}
		}
		AddReportEntry("lease writes per cluster", b.String())
		GinkgoWriter.Print(b.String())
		if path := os.Getenv("MULTICLUSTER_REPORT"); path != "" {
			Expect(os.WriteFile(path, []byte(b.String()), 0o644)).To(Succeed())
		}
	}, NodeTimeout(time.Hour))
})
