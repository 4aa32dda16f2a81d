package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// config/components/flowcontrol through the real API server: its objects
// are accepted, and the API server's flow control puts a manager's lease
// write in cnrm-system in leaseguard's priority level and a write of
// another namespace's lease where it was (its own metrics,
// apiserver_flowcontrol_dispatched_requests_total). docs/operations.md
// gives what that does to other clients under a flood (make measure-apf).
func TestFlowControlComponentClassifiesLeaseWrites(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile("../../config/components/flowcontrol/flowcontrol.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fc := admin.FlowcontrolV1()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "PriorityLevelConfiguration":
			var pl flowcontrolv1.PriorityLevelConfiguration
			if err := yaml.UnmarshalStrict(doc, &pl); err != nil {
				t.Fatal(err)
			}
			if _, err := fc.PriorityLevelConfigurations().Create(ctx, &pl, metav1.CreateOptions{}); err != nil {
				t.Fatalf("the API server refuses priority level %s: %v", pl.Name, err)
			}
			t.Cleanup(func() {
				_ = fc.PriorityLevelConfigurations().Delete(context.Background(), pl.Name, metav1.DeleteOptions{})
			})
		case "FlowSchema":
			var fs flowcontrolv1.FlowSchema
			if err := yaml.UnmarshalStrict(doc, &fs); err != nil {
				t.Fatal(err)
			}
			if _, err := fc.FlowSchemas().Create(ctx, &fs, metav1.CreateOptions{}); err != nil {
				t.Fatalf("the API server refuses flow schema %s: %v", fs.Name, err)
			}
			t.Cleanup(func() { _ = fc.FlowSchemas().Delete(context.Background(), fs.Name, metav1.DeleteOptions{}) })
		default:
			t.Fatalf("unexpected %s in the component", head.Kind)
		}
	}

	// A manager's lease write (whatever leaseguard then answers: the
	// request is dispatched before admission) in cnrm-system, and one in
	// another namespace, once the API server has taken the objects in.
	createNamespace(t, "cnrm-system")
	createNamespace(t, "it-flow-other")
	write := func(ns string) {
		t.Helper()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flow-probe"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}}
		_, err := as(t, "system:serviceaccount:cnrm-system:cnrm-controller-manager-flow", "").CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			deleteLease(t, ns, "flow-probe")
		}
	}
	level := func(ns string) string {
		t.Helper()
		before := dispatched(t)
		write(ns)
		after := dispatched(t)
		for pl, n := range after {
			if n > before[pl] && pl != "exempt" {
				return pl
			}
		}
		return "none"
	}
	deadline := time.Now().Add(30 * time.Second)
	for level("cnrm-system") != "leaseguard-lease-writers" {
		if time.Now().After(deadline) {
			t.Fatalf("a manager's lease write in cnrm-system was dispatched at %q, want leaseguard-lease-writers", level("cnrm-system"))
		}
		time.Sleep(time.Second)
	}
	if got := level("it-flow-other"); got == "leaseguard-lease-writers" {
		t.Errorf("a lease write in another namespace was dispatched at %q: the flow schema reaches beyond the namespaces it names", got)
	}
}

// dispatched reads apiserver_flowcontrol_dispatched_requests_total by
// priority level.
func dispatched(t *testing.T) map[string]float64 {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `priority_level="`)
		pl, _, _ := strings.Cut(rest, `"`)
		var v float64
		f := strings.Fields(line)
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			out[pl] += v
		}
	}
	return out
}
