package manifests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// The fail-closed condition's "rightful renewer of the rule that selects"
// is found in one search (celexpr.FirstMatch): it must hold exactly where
// the form it replaced held, each rule's selection with every earlier
// rule's excluded (And(SelectsFirst(i), renewer i) for some i), an error
// included. Checked on `make test-vap`'s 22-rule corpus, whose rules
// overlap, on random writes drawn from the rules' own namespaces, names
// and managers and from outside them.
func TestRightfulRenewersInOneSearchEqualTheFirstRuleOfEach(t *testing.T) {
	src, err := os.ReadFile("../../../test/vap/testdata/policy-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct{ Policy string }
	if err := json.Unmarshal(src, &corpus); err != nil {
		t.Fatal(err)
	}
	p, err := policyfile.Parse([]byte(corpus.Policy), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	rules := views(p)
	if len(rules) < 20 {
		t.Fatalf("the corpus has %d rules: the test no longer exercises a long search", len(rules))
	}
	g := &generator{o: Defaults(), rules: rules, skew: p.ClockSkew}
	oneSearch := program(t, g.rightfulRenewers())
	var each []string
	for i := range rules {
		renewer, exact := celexpr.SharedRenewer(&rules[i])
		if !exact {
			renewer = "true"
		}
		each = append(each, celexpr.And(celexpr.SelectsFirst(rules, i), renewer))
	}
	firstOfEach := program(t, celexpr.Or(each...))

	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(glob string) string {
		// A glob's literal text with its wildcards and captures filled:
		// mostly matching, sometimes a capture taken from elsewhere.
		var b strings.Builder
		for i := 0; i < len(glob); i++ {
			switch c := glob[i]; c {
			case '*':
				b.WriteString([]string{"", "a", "team-a", "x1"}[rng.IntN(4)])
			case '{':
				end := strings.IndexByte(glob[i:], '}')
				if end < 0 {
					b.WriteByte(c)
					continue
				}
				b.WriteString([]string{"a", "team-a", "cnrm-system", "x1"}[rng.IntN(4)])
				i += end
			default:
				b.WriteByte(c)
			}
		}
		return b.String()
	}
	var namespaces, names, users []string
	for _, r := range rules {
		namespaces = append(namespaces, r.Namespaces...)
		names = append(names, r.Names...)
		users = append(users, r.Managers...)
		if r.FixedManager != "" {
			users = append(users, r.FixedManager)
		}
		if r.Bind != nil {
			users = append(users, r.Bind.ManagerText)
		}
	}
	namespaces = append(namespaces, "elsewhere", "kcc-leader-a", "team-a")
	names = append(names, "l", "kcc-leader-a", "kcc-leader-team-a", "other")
	users = append(users, "user:nobody", "system:serviceaccount:cnrm-system:cnrm-controller-manager-a", "system:serviceaccount:team-a:cnrm-controller-manager-a")
	pick := func(from []string) string { return fill(from[rng.IntN(len(from))]) }

	differ, selected, renewers := 0, 0, 0
	for n := range 20000 {
		resource, group := "leases", "coordination.k8s.io"
		if rng.IntN(2) == 0 {
			resource, group = "multiclusterleases", "multicluster.core.cnrm.cloud.google.com"
		}
		ns, name, user := pick(namespaces), pick(names), pick(users)
		annotations := map[string]any{}
		switch rng.IntN(3) {
		case 0:
			annotations[leaseobject.DesignationAnnotation] = user
		case 1:
			annotations[leaseobject.DesignationAnnotation] = pick(users)
		}
		holder := []string{"", user, "pod-0_1", "cluster-a"}[rng.IntN(4)]
		old := map[string]any{"metadata": map[string]any{"name": name, "namespace": ns, "annotations": annotations},
			"spec": map[string]any{"holderIdentity": holder}}
		obj := map[string]any{"metadata": map[string]any{"name": name, "namespace": ns, "annotations": annotations},
			"spec": map[string]any{"holderIdentity": holder}}
		op := []string{"UPDATE", "UPDATE", "CREATE", "DELETE"}[rng.IntN(4)]
		req := map[string]any{"operation": op, "namespace": ns, "name": name,
			"resource":    map[string]any{"group": group, "version": "v1", "resource": resource},
			"userInfo":    map[string]any{"username": user, "extra": map[string]any{"authentication.kubernetes.io/pod-name": []any{"pod-0"}}},
			"subResource": ""}
		vars := map[string]any{"request": req, "oldObject": old, "object": obj}
		a, _, aerr := oneSearch.Eval(vars)
		b, _, berr := firstOfEach.Eval(vars)
		got, want := fmt.Sprint(aerr), fmt.Sprint(berr)
		if aerr == nil {
			got = fmt.Sprint(a.Value())
		}
		if berr == nil {
			want = fmt.Sprint(b.Value())
		}
		if p.Select(leaseobject.Resource(resource), ns, name) != nil {
			selected++
		}
		if want == "true" {
			renewers++
		}
		if got != want {
			differ++
			if differ <= 5 {
				t.Errorf("write %d: %s %s %s/%s by %s (designated %v, holder %q): one search %s, first rule of each %s", n, op, resource, ns, name, user, annotations[leaseobject.DesignationAnnotation], holder, got, want)
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of 20000 writes differ", differ)
	}
	if renewers < 1000 {
		t.Errorf("only %d of 20000 writes are by a rightful renewer: the test does not tell the two apart", renewers)
	}
	if selected < 5000 {
		t.Errorf("only %d of 20000 writes are selected by a rule: the test does not reach the search", selected)
	}
}
