// Package faults breaks the kind cluster of hack/kind (leaseguard installed
// with its Helm chart, two replicas on two worker nodes) while real lease
// traffic runs, and counts what users would see: guarded writes that failed,
// leaderships lost, and identity changes wrongly admitted. Config
// Connector's namespace mode on the real lock (package kccworkload) runs
// through every fault too, guarded and unguarded side by side: no fault may
// cost the guarded namespaces a manager exit or a longer time without a
// leader than it costs the unguarded ones. `make
// test-e2e-kind` (and make test's kind stage) runs it; alone it needs the
// environment clustertest.TargetFromEnv reads, and is skipped without.
//
// The table it prints (and writes to FAULTS_REPORT) is docs/reliability.md's.
package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/cluster/clustertest"
	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

const (
	lgNS       = "leaseguard-system"
	deployment = "leaseguard"
	// release is the chart's Helm release.
	release   = "leaseguard"
	podLabels = "app.kubernetes.io/name=leaseguard,app.kubernetes.io/component=webhook"
	rbacName  = "leaseguard-faults-lease-writers"
	// allDown is how long every replica stays down: longer than the
	// managers' lease (15 s) and renew deadline (10 s) several times over.
	allDown = 60 * time.Second
	// settle is how long the workload keeps running after a fault has
	// healed, so late effects (a lease expiring) land in its window.
	settle = 6 * time.Second
	// policyWindowBound is how long after a restart the API server may
	// answer the shared renewals leaseguard's admission policy acknowledges
	// 503: two of its policy plugin's schema reads, 5 s apart.
	policyWindowBound = 10 * time.Second
)

type cluster struct {
	target clustertest.Target
	config *rest.Config
	admin  kubernetes.Interface
	// metrics reads the replicas' metrics port.
	metrics *scraper
}

func TestFaults(t *testing.T) {
	target, missing := clustertest.TargetFromEnv()
	if missing != "" {
		t.Skip(missing)
	}
	c := &cluster{target: target}
	var err error
	c.config, err = clientcmd.BuildConfigFromFlags("", target.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c.config.Timeout = 10 * time.Second
	c.admin = kubernetes.NewForConfigOrDie(c.config)
	ctx := context.Background()

	c.waitDeploymentAvailable(t, 2, nil)
	c.prepareNamespaces(t)
	c.metrics = c.newScraper(t)
	t.Run("the metrics port needs a bound token", func(t *testing.T) { c.checkMetricsAccess(t, c.metrics) })
	t.Run("the webhook port hears only the API server", func(t *testing.T) {
		if target.PKI == "" {
			t.Fatal("the target names no PKI folder (CLUSTER_PKI): the API server's admission client certificate is needed")
		}
		c.checkWebhookHearsOnlyTheAPIServer(t, c.metrics, target.PKI)
	})
	t.Run("an edited admission configuration is repaired, a bypass honoured", func(t *testing.T) { c.checkConfigurationDrift(t, c.metrics) })
	ns := startNamespaceMode(t, c)
	defer ns.close(t)
	w := startWorkload(t, c.admin, c.config)
	defer w.stop()
	election := startCoordinatedElection(t, c.admin)
	defer election.close()

	// Warm up: every bound Lease has a leader, the shared lease is renewed.
	waitUntil(t, "every team's Lease has a holder", time.Minute, func() error {
		for _, team := range teams {
			l, err := c.admin.CoordinationV1().Leases(e2eNS).Get(ctx, "kcc-leader-"+team, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return fmt.Errorf("kcc-leader-%s has no holder", team)
			}
		}
		return nil
	})
	time.Sleep(3 * retryPeriod)
	steady := time.Now()
	steadyEnd, electionEnd := ns.begin(t), election.begin()
	time.Sleep(10 * time.Second)
	baseline := summarize("steady state (no fault)", w.between(steady, time.Now()), time.Since(steady))
	var support string
	baseline.namespaceMode, support = steadyEnd(t)
	baseline.election = electionEnd()
	baseline.notes = joinNotes(joinNotes(support, baseline.controlNote()), electionNote(baseline.election))
	assertElectionKept(t, baseline)
	if baseline.guarded == 0 || baseline.probes == 0 || baseline.nonDesignated == 0 {
		t.Fatalf("the workload sends nothing: %+v", baseline)
	}
	results := []result{baseline}
	assertClean(t, baseline, false)
	_ = assertNamespaceMode(t, baseline)

	// measure runs a fault under the workload and judges the window from
	// just before it until settle after it healed.
	// A fault that takes the API server away says for how long, and for how
	// much longer its admission policy plugin answered shared renewals 503.
	var apiAway, policyWindow time.Duration
	measure := func(t *testing.T, name string, fault func(t *testing.T) (notes string)) result {
		t.Helper()
		apiAway, policyWindow = 0, 0
		openBefore, closedBefore, err := webhookFailures(ctx, c.admin)
		if err != nil {
			t.Fatal(err)
		}
		nsEnd, electionEnd := ns.begin(t), election.begin()
		from := time.Now()
		notes := fault(t)
		time.Sleep(settle)
		to := time.Now()
		events := w.between(from, to)
		if failedOpen, err := failOpensLogged(ctx, c.admin, from, to); err != nil {
			t.Logf("%s: the API server's log (which says when and why webhook calls failed open): %v", name, err)
		} else {
			events = append(events, failedOpen...)
		}
		r := summarize(name, events, to.Sub(from))
		var support string
		r.namespaceMode, support = nsEnd(t)
		r.apiAway, r.policyWindow = apiAway, policyWindow
		support = joinNotes(support, assertNamespaceMode(t, r))
		var openAfter, closedAfter int
		waitUntil(t, "the API server's webhook metrics", time.Minute, func() (err error) {
			openAfter, closedAfter, err = webhookFailures(ctx, c.admin)
			return err
		})
		r.failOpen, r.failClosed = counterDelta(openBefore, openAfter), counterDelta(closedBefore, closedAfter)
		r.election = electionEnd()
		r.notes = joinNotes(joinNotes(notes+r.staleNote()+r.controlNote()+r.failOpenNote(), support), electionNote(r.election))
		// The control plane's Leases are leaseguard's concern only while
		// the API server itself serves: its restart, or an outage the
		// control writes saw, may end a leadership by the protocol.
		if name != "kube-apiserver restarted" && r.controlTrouble == 0 {
			assertElectionKept(t, r)
		}
		results = append(results, r)
		return r
	}

	t.Run("one of two replicas deleted", func(t *testing.T) {
		minReady := 0
		r := measure(t, "one of two replicas deleted", func(t *testing.T) string {
			victim := c.pods(t)[0]
			if err := c.admin.CoreV1().Pods(lgNS).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			minReady = c.waitDeploymentAvailable(t, 2, map[string]bool{victim.Name: true})
			return fmt.Sprintf("pod deleted (default grace); fewest ready endpoints %d", minReady)
		})
		assertClean(t, r, true)
		if minReady < 1 {
			t.Errorf("the Service had no ready endpoint during the fault")
		}
	})

	t.Run("rolling restart honoring the PDB", func(t *testing.T) {
		refusals, fewest := 0, 2
		r := measure(t, "rolling restart honoring the PDB", func(t *testing.T) string {
			old := c.podNames(t)
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
			if _, err := c.admin.AppsV1().Deployments(lgNS).Patch(ctx, deployment, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			fewest = min(fewest, c.waitDeploymentAvailable(t, 2, old))

			// Then drain both new pods through the Eviction API, as kubectl
			// drain does: the PDB (minAvailable 1) must refuse the second
			// eviction until the first one's replacement is Ready.
			old = c.podNames(t)
			for name := range old {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					err := c.admin.CoreV1().Pods(lgNS).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lgNS}})
					if err == nil {
						break
					}
					if !apierrors.IsTooManyRequests(err) {
						t.Fatalf("evicting %s: %v", name, err)
					}
					refusals++
					if n := c.readyEndpoints(); n >= 0 {
						fewest = min(fewest, n)
					}
					if time.Now().After(deadline) {
						t.Fatalf("eviction of %s refused for 2 minutes: %v", name, err)
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
			fewest = min(fewest, c.waitDeploymentAvailable(t, 2, old))
			return fmt.Sprintf("rollout restart, then both pods evicted: %d evictions refused by the PDB; fewest ready endpoints %d", refusals, fewest)
		})
		assertClean(t, r, true)
		if refusals == 0 {
			t.Errorf("the PDB never refused an eviction: both replicas could be down at once")
		}
		if fewest < 1 {
			t.Errorf("the Service had no ready endpoint during the restart")
		}
	})

	t.Run("helm upgrade to a new image", func(t *testing.T) {
		helm, chartArgs, tag := os.Getenv("HELM"), strings.Fields(os.Getenv("LEASEGUARD_CHART_ARGS")), os.Getenv("CLUSTER_NEXT_IMAGE_TAG")
		if helm == "" || len(chartArgs) == 0 || tag == "" {
			t.Fatal("needs HELM, LEASEGUARD_CHART_ARGS (the chart install's arguments) and CLUSTER_NEXT_IMAGE_TAG (another tag of the image, loaded into the nodes): " +
				"hack/kind/e2e.sh sets them; a rolling upgrade is judged on the workload too")
		}
		fewest := 2
		r := measure(t, "helm upgrade to a new image", func(t *testing.T) string {
			old := c.podNames(t)
			// As an operator upgrades: the same install, the new image's
			// tag. The fault tests' own edits (scale, policy) are taken back
			// by --force-conflicts, as in docs/helm.md.
			args := append([]string{"--kubeconfig", c.target.Kubeconfig, "upgrade", release}, chartArgs...)
			args = append(args, "--set", "image.tag="+tag, "--force-conflicts", "--wait", "--timeout", "3m")
			done := make(chan error, 1)
			var out []byte
			go func() {
				var err error
				out, err = exec.Command(helm, args...).CombinedOutput()
				done <- err
			}()
			for waiting := true; waiting; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("helm upgrade: %v\n%s", err, out)
					}
					waiting = false
				case <-time.After(200 * time.Millisecond):
					if n := c.readyEndpoints(); n >= 0 {
						fewest = min(fewest, n)
					}
				}
			}
			fewest = min(fewest, c.waitDeploymentAvailable(t, 2, old))
			for _, p := range c.pods(t) {
				if image := p.Spec.Containers[0].Image; !strings.HasSuffix(image, ":"+tag) {
					t.Errorf("pod %s runs %s after the upgrade, want tag %s", p.Name, image, tag)
				}
			}
			return fmt.Sprintf("helm upgrade --set image.tag=%s --wait: fewest ready endpoints %d", tag, fewest)
		})
		assertClean(t, r, true)
		if fewest < 1 {
			t.Errorf("the Service had no ready endpoint during the upgrade")
		}
	})

	t.Run("all replicas down", func(t *testing.T) {
		if !c.hasFailClosedWebhook(t) {
			// A defect, not a reason to skip: with every replica down,
			// identity changes would be admitted unguarded.
			t.Fatal("no validating webhook entry of leaseguard has failurePolicy Fail: the installed configurations are fail-open everywhere, " +
				"so with every replica down identity changes would be admitted unguarded")
		}
		var down result
		r := measure(t, "all replicas down", func(t *testing.T) string {
			c.scale(t, 0)
			waitUntil(t, "no leaseguard pod and no endpoint", 2*time.Minute, func() error {
				if n := len(c.pods(t)); n > 0 {
					return fmt.Errorf("%d pods left", n)
				}
				if n := c.readyEndpoints(); n > 0 {
					return fmt.Errorf("%d ready endpoints left", n)
				}
				return nil
			})
			downFrom := time.Now()
			time.Sleep(allDown)
			down = summarize("all replicas down", w.between(downFrom, time.Now()), time.Since(downFrom))
			c.scale(t, 2)
			c.waitDeploymentAvailable(t, 2, nil)
			return fmt.Sprintf("scaled to 0 for %s: %d renewals admitted (%d of them other managers' renewals of the shared MultiClusterLease), %d identity changes refused as webhook unreachable",
				allDown, down.guarded-down.failedGuarded-down.staleRefused, down.outcomes[evNonDesignated+"/"+outAdmitted], down.outcomes[evIdentityChange+"/"+outWebhookUnreachable])
		})
		// Fail-closed calls are refusals here, by design: identity changes
		// and renewals by anyone but a rightful renewer (goFailClosed).
		// Every manager of a cluster renews the shared MultiClusterLease
		// with the same holder, and counts as leader only when its renewal
		// succeeds, so those renewals all flow while no replica serves.
		if r.failedGuardedWrites() > 0 || r.leadershipsLost > 0 || r.wrongAdmissions > 0 || r.apiDownOwn() > 0 {
			t.Errorf("%s: %d failed guarded writes, %d leaderships lost, %d wrong admissions (%d identity changes), %d API server errors; first ones:\n%s",
				r.name, r.failedGuardedWrites(), r.leadershipsLost, r.wrongAdmissions, r.wrongIdentity, r.apiDownOwn(), r.examples)
		}
		if down.probes == 0 || down.guarded == 0 {
			t.Errorf("the workload sent nothing while leaseguard was down: %+v", down)
		}
	})

	t.Run("policy edit in the ConfigMap", func(t *testing.T) {
		r := measure(t, "policy edit in the ConfigMap", func(t *testing.T) string {
			took, allTook, perPod := c.editPolicy(t)
			return fmt.Sprintf("rule e2e-warn warn→deny: first denial through the Service after %s; reloaded by each pod after %s (kubelet's ConfigMap sync included); every replica after %s",
				took.Round(100*time.Millisecond), perPod, allTook.Round(100*time.Millisecond))
		})
		assertClean(t, r, true)
	})

	t.Run("GCS emulator down for 30 s", func(t *testing.T) {
		r := measure(t, "GCS emulator down for 30 s", func(t *testing.T) string {
			if err := ns.w.ScaleEmulator(ctx, 0); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "no GCS emulator Pod", 2*time.Minute, func() error {
				pods, err := c.admin.CoreV1().Pods(kccworkload.ControllerNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + kccworkload.Emulator})
				if err != nil {
					return err
				}
				if n := len(pods.Items); n > 0 {
					return fmt.Errorf("%d pods left", n)
				}
				return nil
			})
			down := time.Now()
			time.Sleep(30 * time.Second)
			if err := ns.w.ScaleEmulator(ctx, 1); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the GCS emulator back", 2*time.Minute, func() error {
				d, err := c.admin.AppsV1().Deployments(kccworkload.ControllerNamespace).Get(ctx, kccworkload.Emulator, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if d.Status.AvailableReplicas < 1 {
					return fmt.Errorf("%d available", d.Status.AvailableReplicas)
				}
				return nil
			})
			return fmt.Sprintf("the global lock's backend (the GCS emulator, its locks in memory) scaled to 0; back %s later", time.Since(down).Round(100*time.Millisecond))
		})
		assertClean(t, r, true)
	})

	t.Run("kube-apiserver restarted", func(t *testing.T) {
		if target.RestartAPIServer == nil {
			t.Skip("the target cannot restart its API server (CLUSTER_RESTART_APISERVER)")
		}
		var away time.Duration
		r := measure(t, "kube-apiserver restarted", func(t *testing.T) string {
			guarded, unguarded, err := ns.restartOutages(ctx, func() (err error) {
				away, err = target.RestartAPIServer(ctx)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if guarded.acknowledged == 0 {
				t.Errorf("no non-designated renewal of the guarded MultiClusterLease was acknowledged through the restart (%d stored; failures: %s): leaseguard's admission policy took none",
					guarded.stored, guarded.failureNote())
			}
			// The part of the guarded outage that is the admission policy
			// plugin's schema window. The plugin reads the schemas every
			// 5 s; two reads allow for a CustomResourceDefinition whose
			// OpenAPI the restarted API server published only after the
			// first.
			window := guarded.schemaWindow(unguarded)
			if window > policyWindowBound {
				t.Errorf("the guarded cluster's shared renewals were answered 503 until %s after the unguarded one's were answered again (%d answered 503): longer than two of the admission policy plugin's schema reads (%s)",
					window, guarded.answered503, policyWindowBound)
			}
			apiAway, policyWindow = unguarded.length(), window
			c.waitDeploymentAvailable(t, 2, nil)
			return fmt.Sprintf("SIGTERM to ready again: %s; shared renewals unanswered for %s unguarded (%s), %s guarded (%s; %s of it the admission policy plugin's schema window; %d answered stored, not acknowledged)",
				away.Round(100*time.Millisecond), unguarded.length().Round(100*time.Millisecond), unguarded.failureNote(),
				guarded.length().Round(100*time.Millisecond), guarded.failureNote(), window.Round(100*time.Millisecond), guarded.stored)
		})
		r.notes += fmt.Sprintf("; %d writes failed at the API server itself (not counted as failed guarded writes)", r.apiDown)
		results[len(results)-1] = r
		// Writes that could not reach the API server are its outage, not
		// leaseguard's; whatever reached leaseguard must be decided right.
		if r.failedGuardedWrites() > 0 || r.wrongAdmissions > 0 || r.failOpen > 0 {
			t.Errorf("%s: %d failed guarded writes, %d wrong admissions, %d webhook calls failed open\n%s", r.name, r.failedGuardedWrites(), r.wrongAdmissions, r.failOpen, r.examples)
		}
		if r.leadershipsLost > 0 && away < renewDeadline-retryPeriod {
			t.Errorf("%d leaderships lost though the API server was away only %s (renew deadline %s)", r.leadershipsLost, away, renewDeadline)
		}
	})

	// Node faults come last: a node that fails to come back must not take
	// the faults above with it.
	t.Run("worker node lost", func(t *testing.T) {
		if target.NodeFault == nil {
			t.Skip("the target cannot break its nodes (CLUSTER_NODE_FAULT)")
		}
		r := measure(t, "worker node lost", func(t *testing.T) string {
			// The worker running the guarded cluster's designated manager,
			// whose renewals are the ones stored: it runs a leaseguard
			// replica too (one on each worker).
			designatedNS, node := ns.designatedNode(t)
			victim, rate := c.replicaOn(t, node)
			killed := time.Now()
			if err := target.NodeFault(ctx, "node-kill", node); err != nil {
				t.Fatal(err)
			}
			started := false
			defer func() { // whatever failed, the node comes back for what follows
				if !started {
					_ = target.NodeFault(context.Background(), "node-start", node)
				}
			}()
			// The API server keeps sending to the dead replica's address
			// until the node controller marks the node NotReady and the
			// endpoint goes unready; that is the window under test.
			waitUntil(t, "the lost replica's endpoint unready", 3*time.Minute, func() error {
				if c.endpointReady(victim.Status.PodIP) {
					return fmt.Errorf("%s still a ready endpoint", victim.Status.PodIP)
				}
				return nil
			})
			stale := time.Since(killed)
			time.Sleep(10 * time.Second) // one replica serves alone
			restart := time.Now()
			started = true
			if err := target.NodeFault(ctx, "node-start", node); err != nil {
				t.Fatal(err)
			}
			c.waitDeploymentAvailable(t, 2, nil)
			return fmt.Sprintf("worker %s killed (SIGKILL, nothing deleted) with the designated manager (namespace %s) and the replica deciding %.1f reviews/s: its endpoint stayed ready %s, until the node went NotReady; "+
				"node started again after %s, both replicas ready %s later",
				node, designatedNS, rate, stale.Round(time.Second), restart.Sub(killed).Round(time.Second), time.Since(restart).Round(time.Second))
		})
		assertHeld(t, r)
	})

	t.Run("replica partitioned from the API server", func(t *testing.T) {
		if target.NodeFault == nil {
			t.Skip("the target cannot break its nodes (CLUSTER_NODE_FAULT)")
		}
		const cut = 30 * time.Second
		r := measure(t, "replica partitioned from the API server", func(t *testing.T) string {
			victim, rate := c.busiestReplica(t)
			node, ip, port := victim.Spec.NodeName, victim.Status.PodIP, webhookPort(victim)
			if err := target.NodeFault(ctx, "partition", node, ip, port); err != nil {
				t.Fatal(err)
			}
			healed := false
			defer func() {
				if !healed {
					_ = target.NodeFault(context.Background(), "heal", node, ip, port)
				}
			}()
			// Its kubelet still probes it and still reaches the API server:
			// the replica stays a ready endpoint for the whole cut, so the
			// API server keeps choosing it for some new connections.
			fewest := 2
			for end := time.Now().Add(cut); time.Now().Before(end); time.Sleep(time.Second) {
				if n := c.readyEndpoints(); n >= 0 {
					fewest = min(fewest, n)
				}
			}
			healed = true
			if err := target.NodeFault(ctx, "heal", node, ip, port); err != nil {
				t.Fatal(err)
			}
			c.waitDeploymentAvailable(t, 2, nil)
			return fmt.Sprintf("replica on %s deciding %.1f reviews/s cut off from the control-plane node both ways for %s (checked: its webhook port unreachable from there), still Ready: fewest ready endpoints %d",
				node, rate, cut, fewest)
		})
		assertHeld(t, r)
	})

	report := renderReport(results) + "\n" + renderNamespaceMode(results)
	t.Log("\n" + report)
	if path := os.Getenv("FAULTS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// prepareNamespaces makes the policy's namespaces (waiting out the e2e
// suite's deletion of them) and lets the workload's identities write
// leases, as their own RBAC would.
func (c *cluster) prepareNamespaces(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{e2eNS, warnNS} {
		waitUntil(t, "namespace "+ns+" created", 2*time.Minute, func() error {
			_, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, gerr := c.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				if gerr == nil && got.DeletionTimestamp == nil {
					return nil
				}
				return fmt.Errorf("namespace %s is being deleted", ns)
			}
			return err
		})
	}
	var subjects []rbacv1.Subject
	for _, team := range teams {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: manager(team)})
	}
	subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:serviceaccount:default:intruder"},
		rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: controlWriter})
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}},
			{APIGroups: []string{"multicluster.core.cnrm.cloud.google.com"}, Resources: []string{"multiclusterleases", "multiclusterleases/status"}, Verbs: []string{"*"}},
			// The control writes (evControl).
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"faults-control"}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbacName},
		Subjects:   subjects,
	}
	if _, err := c.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), rbacName, metav1.DeleteOptions{})
		_ = c.admin.RbacV1().ClusterRoles().Delete(context.Background(), rbacName, metav1.DeleteOptions{})
		for _, ns := range []string{e2eNS, warnNS} {
			_ = c.admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
}

func (c *cluster) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := c.admin.CoreV1().Pods(lgNS).List(context.Background(), metav1.ListOptions{LabelSelector: podLabels})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (c *cluster) podNames(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, p := range c.pods(t) {
		names[p.Name] = true
	}
	return names
}

// readyEndpoints counts the webhook Service's ready endpoints (-1 when
// they cannot be read).
func (c *cluster) readyEndpoints() int {
	slices, err := c.admin.DiscoveryV1().EndpointSlices(lgNS).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=leaseguard-webhook-service"})
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// waitDeploymentAvailable waits until the Deployment has want available
// replicas, all of the current template, and none of the pods named in
// gone is left; it returns the fewest ready endpoints seen meanwhile.
func (c *cluster) waitDeploymentAvailable(t *testing.T, want int32, gone map[string]bool) int {
	t.Helper()
	ctx := context.Background()
	fewest := int(want)
	waitUntil(t, fmt.Sprintf("deployment %s with %d available replicas", deployment, want), 3*time.Minute, func() error {
		if n := c.readyEndpoints(); n >= 0 && n < fewest {
			fewest = n
		}
		d, err := c.admin.AppsV1().Deployments(lgNS).Get(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return fmt.Errorf("status %+v", s)
		}
		for _, p := range c.pods(t) {
			if gone[p.Name] {
				return fmt.Errorf("pod %s still there", p.Name)
			}
		}
		if n := c.readyEndpoints(); n != int(want) {
			return fmt.Errorf("%d ready endpoints", n)
		}
		return nil
	})
	return fewest
}

// endpointReady reports whether ip is a ready endpoint of the webhook
// Service (true when the slices cannot be read: not proven unready).
func (c *cluster) endpointReady(ip string) bool {
	slices, err := c.admin.DiscoveryV1().EndpointSlices(lgNS).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=leaseguard-webhook-service"})
	if err != nil {
		return true
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if addrs := e.Addresses; len(addrs) > 0 && addrs[0] == ip {
				return e.Conditions.Ready == nil || *e.Conditions.Ready
			}
		}
	}
	return false
}

// busiestReplica returns the replica that decided the most reviews over 5
// s, and its rate: the API server keeps its connections to a replica, so a
// fault on the other one might not touch a single call.
// replicaOn returns the leaseguard replica on node and the reviews it
// decides per second.
func (c *cluster) replicaOn(t *testing.T, node string) (corev1.Pod, float64) {
	t.Helper()
	for _, p := range c.pods(t) {
		if p.Spec.NodeName != node {
			continue
		}
		before := c.metrics.decisions(p.Status.PodIP)
		const over = 5 * time.Second
		time.Sleep(over)
		return p, (c.metrics.decisions(p.Status.PodIP) - before) / over.Seconds()
	}
	t.Fatalf("no leaseguard replica on node %s", node)
	return corev1.Pod{}, 0
}

func (c *cluster) busiestReplica(t *testing.T) (corev1.Pod, float64) {
	t.Helper()
	pods := c.pods(t)
	before := make([]float64, len(pods))
	for i, p := range pods {
		before[i] = c.metrics.decisions(p.Status.PodIP)
	}
	const over = 5 * time.Second
	time.Sleep(over)
	best, most := -1, 0.0
	for i, p := range pods {
		if d := c.metrics.decisions(p.Status.PodIP) - before[i]; before[i] >= 0 && d > most {
			best, most = i, d
		}
	}
	if best < 0 {
		t.Fatalf("no replica of %d decided a review in %s (or their metrics were unreadable)", len(pods), over)
	}
	return pods[best], most / over.Seconds()
}

// webhookPort is the pod's container port named "webhook" (the chart's).
func webhookPort(p corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "webhook" {
				return fmt.Sprint(port.ContainerPort)
			}
		}
	}
	return "9443"
}

func (c *cluster) scale(t *testing.T, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.admin.AppsV1().Deployments(lgNS).Patch(context.Background(), deployment, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hasFailClosedWebhook reports whether a validating webhook entry of
// leaseguard has failurePolicy Fail.
func (c *cluster) hasFailClosedWebhook(t *testing.T) bool {
	list, err := c.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range list.Items {
		for _, wh := range cfg.Webhooks {
			if strings.HasSuffix(wh.Name, ".leaseguard.io") && ptr.Deref(wh.FailurePolicy, admissionregistrationv1.Fail) == admissionregistrationv1.Fail {
				return true
			}
		}
	}
	return false
}

// editPolicy switches rule e2e-warn from warn to deny in the ConfigMap and
// measures until leaseguard enforces it: the first denial through the
// Service, and each pod's own reload (its metrics; the API server keeps its
// connections to a pod, so a run of denials through the Service does not
// show that every replica has it). Then it puts the rule back.
func (c *cluster) editPolicy(t *testing.T) (first, all time.Duration, perPod string) {
	t.Helper()
	ctx := context.Background()
	cms := c.admin.CoreV1().ConfigMaps(lgNS)
	cm, err := cms.Get(ctx, "leaseguard-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["policy.yaml"]
	i := strings.Index(original, "- name: e2e-warn")
	if i < 0 || !strings.Contains(original[i:], "enforcement: warn") {
		t.Fatalf("the deployed policy has no rule e2e-warn in warn mode:\n%s", original)
	}
	edited := original[:i] + strings.Replace(original[i:], "enforcement: warn", "enforcement: deny", 1)

	intruder := kubernetes.NewForConfigOrDie(impersonating(c.config, "system:serviceaccount:default:intruder", ""))
	probe := func() string {
		lease := []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"policy-probe","namespace":"` + warnNS + `"},"spec":{"holderIdentity":"x"}}`)
		_, err := intruder.CoordinationV1().Leases(warnNS).Patch(ctx, "policy-probe", types.ApplyPatchType, lease,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "probe"})
		return classify(err)
	}
	if got := probe(); got != outAdmitted {
		t.Fatalf("before the edit, the warn rule's write: %s, want %s", got, outAdmitted)
	}
	pods := c.pods(t)
	reloads := map[string]float64{}
	for _, p := range pods {
		if reloads[p.Name] = c.metrics.reloads(p.Status.PodIP); reloads[p.Name] < 0 {
			t.Fatalf("cannot read the metrics of pod %s at %s:%s", p.Name, p.Status.PodIP, metricsPort)
		}
	}

	cm.Data["policy.yaml"] = edited
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cm, err := cms.Get(context.Background(), "leaseguard-policy", metav1.GetOptions{})
		if err == nil {
			cm.Data["policy.yaml"] = original
			_, _ = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
		}
	})
	edit := time.Now()
	podTook := map[string]time.Duration{}
	deadline := edit.Add(3 * time.Minute)
	for first == 0 || len(podTook) < len(pods) {
		if time.Now().After(deadline) {
			t.Fatalf("the policy edit did not take effect within 3 minutes (first denial after %s, reloaded pods %v)", first, podTook)
		}
		if first == 0 && probe() == outDenied {
			first = time.Since(edit)
		}
		for _, p := range pods {
			if _, done := podTook[p.Name]; !done && c.metrics.reloads(p.Status.PodIP) > reloads[p.Name] {
				podTook[p.Name] = time.Since(edit)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	all = time.Since(edit)
	// Every replica has it now: every write through the Service is denied.
	for range 10 {
		if got := probe(); got != outDenied {
			t.Fatalf("after every pod reloaded, the warn rule's write: %s, want %s", got, outDenied)
		}
	}
	var parts []string
	for _, p := range pods {
		parts = append(parts, podTook[p.Name].Round(100*time.Millisecond).String())
	}
	return first, all, strings.Join(parts, " and ")
}

// waitUntil is clustertest.WaitUntil.
func waitUntil(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	clustertest.WaitUntil(t, what, timeout, check)
}
