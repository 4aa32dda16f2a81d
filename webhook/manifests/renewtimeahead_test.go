package manifests

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/celexpr"
)

// renewTimeAheadAsDefined is policy.RenewTimeAhead as first rendered:
// the earliest re-stamped entry's time, or with none re-stamped the
// latest dated entry's, plus skew and a second, against renewTime. It
// filters the entries twice and searches the stored ones for each; it is
// kept here as the definition the rendering must agree with.
func renewTimeAheadAsDefined(skew time.Duration) string {
	mf := "object.metadata.?managedFields.orValue([])"
	stamped := mf + ".filter(m, has(m.time) && !oldObject.metadata.?managedFields.orValue([]).exists(o, " +
		"o.?manager == m.?manager && o.?operation == m.?operation && o.?subresource == m.?subresource && o.?apiVersion == m.?apiVersion && o.?time == m.?time))" +
		".map(m, timestamp(m.time))"
	allowed := "duration(" + celexpr.Quote((skew + time.Second).String()) + ")"
	latest := mf + ".filter(m, has(m.time)).map(m, timestamp(m.time)).max()"
	return celexpr.And("request.operation == 'UPDATE'", celexpr.Spec("object", "renewTime")+".hasValue()",
		celexpr.Spec("object", "renewTime")+" != "+celexpr.Spec("oldObject", "renewTime"),
		celexpr.Or(mf+".size() > "+strconv.Itoa(maxComparedManagedFields),
			celexpr.Ternary(stamped+".size() > 0", "timestamp(object.spec.renewTime) > "+stamped+".min() + "+allowed,
				celexpr.And(mf+".exists(m, has(m.time))", "timestamp(object.spec.renewTime) > "+latest+" + "+allowed))))
}

// program compiles a match condition in the API server's CEL environment
// for new expressions, with the request, object and oldObject untyped.
func program(t *testing.T, expr string) cel.Program {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.NewExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Extend(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%v\n%s", iss.Err(), expr)
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	return prg
}

// The rendered renewTimeAhead, written to stop early on a rightful
// renewal, routes every write as the definition does: for random stored
// and written managedFields (entries kept, re-stamped, added, undated, of
// two managers and two subresources), renewTimes around the stamps, and
// the clock skews the shipped policies use.
func TestRenewTimeAheadRoutesAsDefined(t *testing.T) {
	now := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	stamp := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	rng := rand.New(rand.NewPCG(7, 25))
	entry := func(manager, sub string, at time.Duration, dated bool) map[string]any {
		m := map[string]any{"manager": manager, "operation": "Update", "apiVersion": "coordination.k8s.io/v1"}
		if sub != "" {
			m["subresource"] = sub
		}
		if dated {
			m["time"] = stamp(at)
		}
		return m
	}
	offsets := []time.Duration{-time.Hour, -10 * time.Second, -2 * time.Second, -time.Second, 0}
	renewals := []time.Duration{-5 * time.Second, 0, time.Second, 2 * time.Second, 3 * time.Second, 3*time.Second + time.Millisecond, 4 * time.Second, 10 * time.Second, 48 * time.Hour}
	for _, skew := range []time.Duration{0, 2 * time.Second, 5 * time.Second} {
		want, got := program(t, renewTimeAheadAsDefined(skew)), program(t, renewTimeAhead(skew))
		ahead, cases := 0, 2000
		for i := range cases {
			var stored, written []any
			for range rng.IntN(4) {
				e := entry([]string{"a", "b"}[rng.IntN(2)], []string{"", "status"}[rng.IntN(2)], offsets[rng.IntN(len(offsets))]-time.Minute, rng.IntN(5) > 0)
				stored = append(stored, e)
				switch rng.IntN(3) {
				case 0: // kept as stored
					written = append(written, e)
				case 1: // re-stamped by this write, at the server's clock
					c := map[string]any{}
					for k, v := range e {
						c[k] = v
					}
					c["time"] = stamp(offsets[rng.IntN(len(offsets))])
					written = append(written, c)
				}
			}
			for range rng.IntN(2) { // added by this write
				written = append(written, entry("c", "", offsets[rng.IntN(len(offsets))], rng.IntN(4) > 0))
			}
			renewTime := now.Add(renewals[rng.IntN(len(renewals))]).Format("2006-01-02T15:04:05.000000Z07:00")
			vars := map[string]any{
				"request":   map[string]any{"operation": "UPDATE"},
				"oldObject": map[string]any{"metadata": map[string]any{"managedFields": stored}, "spec": map[string]any{"renewTime": stamp(-time.Minute)}},
				"object":    map[string]any{"metadata": map[string]any{"managedFields": written}, "spec": map[string]any{"renewTime": renewTime}},
			}
			w, _, werr := want.Eval(vars)
			g, _, gerr := got.Eval(vars)
			if fmt.Sprint(w) != fmt.Sprint(g) || (werr == nil) != (gerr == nil) {
				t.Fatalf("skew %v, case %d: defined %v (%v), rendered %v (%v)\nrenewTime %s\nstored %v\nwritten %v", skew, i, w, werr, g, gerr, renewTime, stored, written)
			}
			if werr == nil && w.Value() == true {
				ahead++
			}
		}
		// Both outcomes are exercised, or the comparison proves nothing.
		if ahead < cases/10 || ahead > cases*9/10 {
			t.Errorf("skew %v: %d of %d cases ahead: the cases do not exercise both routes", skew, ahead, cases)
		}
	}
}
