package policy

import (
	"encoding/json"
	"flag"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"os"
	"strings"
	"testing"
)

// The table cases of this package are also the corpus of the differential
// test of `leaseguard vap` (test/vap), which replays them through a real API
// server once under the webhook and once under the generated
// ValidatingAdmissionPolicies. This test keeps that copy current: after
// changing the cases, run
//
//	go test ./webhook/decision/policy -run TestVAPCorpusIsCurrent -update-vap-corpus
var updateVAPCorpus = flag.Bool("update-vap-corpus", false, "rewrite "+vapCorpusPath)

const vapCorpusPath = "../../../test/vap/testdata/policy-cases.json"

// VAPCorpus is the file's shape (test/vap reads it).
type vapCorpus struct {
	// Policy holds the rules of every case: decidePolicy, then the rules of
	// hardPolicy (their namespaces do not overlap).
	Policy string
	Cases  []vapCorpusCase
}

type vapCorpusCase struct {
	Name    string
	Request leaseobject.Request
	// Want is what this package's tables expect (verdict and invariant).
	Want string
}

func vapCorpusPolicy() string {
	_, rules, ok := strings.Cut(hardPolicy, "rules:\n")
	if !ok {
		panic("hardPolicy has no rules")
	}
	return decidePolicy + rules
}

func buildVAPCorpus(t *testing.T) []byte {
	t.Helper()
	p := mustCompile(t, vapCorpusPolicy())
	out := vapCorpus{Policy: vapCorpusPolicy()}
	add := func(name string, req *leaseobject.Request, w want) {
		d := Decide(p, req)
		if d.Verdict != w.verdict || d.Invariant != w.inv {
			t.Fatalf("%s: in the merged policy the core decides %v %s, the table wants %v %s", name, d.Verdict, d.Invariant, w.verdict, w.inv)
		}
		out.Cases = append(out.Cases, vapCorpusCase{Name: name, Request: *req, Want: w.verdict.String() + " " + string(w.inv)})
	}
	for _, c := range allDecideCases() {
		add("decide/"+c.name, c.request(), c.want)
	}
	for _, res := range bothResources {
		for _, c := range hardCases(res) {
			req := &leaseobject.Request{Resource: c.res, Operation: c.op, Subresource: c.sub, Caller: c.caller, Old: c.old, New: c.new,
				Now: t0.Add(c.now), DryRun: c.dryRun, FieldManager: c.manager}
			simulateServerStamp(req)
			add("hardening/"+c.name, req, c.want)
		}
	}
	// One case a line, so that a change to the tables reads as a diff.
	policy, err := json.Marshal(out.Policy)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("{\"Policy\": " + string(policy) + ",\n\"Cases\": [\n")
	for i, c := range out.Cases {
		line, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		if i < len(out.Cases)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

func TestVAPCorpusIsCurrent(t *testing.T) {
	want := buildVAPCorpus(t)
	if *updateVAPCorpus {
		if err := os.WriteFile(vapCorpusPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(vapCorpusPath)
	if err != nil || string(got) != string(want) {
		t.Fatalf("%s is not what this package's table cases give (%v): run go test ./webhook/decision/policy -run TestVAPCorpusIsCurrent -update-vap-corpus", vapCorpusPath, err)
	}
}
