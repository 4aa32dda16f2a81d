package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/testfixtures"
)

const (
	mgrA     = "system:serviceaccount:cnrm-system:cnrm-controller-manager-a"
	mgrB     = "system:serviceaccount:cnrm-system:cnrm-controller-manager-b"
	mgrTeamA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"
	mgrTeamB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b"
	operator = "system:serviceaccount:configconnector-operator-system:configconnector-operator"
	mclCtl   = "system:serviceaccount:multiclusterlease-system:default"
)

// checkPolicy is Config Connector's namespace mode (docs/design.md §3)
// plus a deny rule and an audit rule for plain leases.
var checkPolicy = testfixtures.KCCPolicy(testfixtures.KCCOptions{ExtraRules: checkExtraRules})

const checkExtraRules = `- name: app-leases
  resources: [leases]
  namespaces: [apps]
  managers: [alice, bob]
  operators: ["system:masters"]
  holderBinding: username
  minRenewInterval: 5s
- name: audited
  resources: [leases]
  namespaces: [audited]
  managers: [alice]
  enforcement: audit
`

// now is the server clock of every test; --now passes it.
var now = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

const nowFlag = "2026-01-02T15:04:05Z"

func ts(d time.Duration) string { return now.Add(d).UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// obj describes a test object.
type obj struct {
	mcl        bool
	ns, name   string
	designated string // "" = no annotation
	holder     string
	renew      time.Duration // renewTime relative to now
	acquire    time.Duration // acquireTime relative to now; 0 = absent
	trans      int
}

func (o obj) yaml() string {
	var b strings.Builder
	if o.mcl {
		b.WriteString("apiVersion: multicluster.core.cnrm.cloud.google.com/v1alpha1\nkind: MultiClusterLease\n")
	} else {
		b.WriteString("apiVersion: coordination.k8s.io/v1\nkind: Lease\n")
	}
	fmt.Fprintf(&b, "metadata:\n  name: %s\n  namespace: %s\n  creationTimestamp: %q\n", o.name, o.ns, ts(-time.Hour))
	if o.designated != "" {
		fmt.Fprintf(&b, "  annotations:\n    leaseguard.io/designated-manager: %q\n", o.designated)
	}
	b.WriteString("spec:\n  leaseDurationSeconds: 15\n")
	if o.holder != "" {
		fmt.Fprintf(&b, "  holderIdentity: %q\n  renewTime: %q\n", o.holder, ts(o.renew))
	}
	if o.acquire != 0 {
		fmt.Fprintf(&b, "  acquireTime: %q\n", ts(o.acquire))
	}
	if !o.mcl {
		fmt.Fprintf(&b, "  leaseTransitions: %d\n", o.trans)
	}
	return b.String()
}

// files writes the policy and objects into a temporary folder.
type files struct {
	t   *testing.T
	dir string
}

func newFiles(t *testing.T) *files {
	f := &files{t: t, dir: t.TempDir()}
	f.write("policy.yaml", checkPolicy)
	return f
}

func (f *files) write(name, content string) string {
	f.t.Helper()
	path := filepath.Join(f.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return path
}

func (f *files) policy() string { return filepath.Join(f.dir, "policy.yaml") }

// runCheck runs `leaseguard check args...` in process and returns its
// output, its error and the process exit code main would use.
func runCheck(t *testing.T, args ...string) (out string, code int, err error) {
	t.Helper()
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(append([]string{"check"}, args...))
	err = root.Execute()
	if err != nil {
		code = ExitCode(err)
	}
	return stdout.String(), code, err
}

func TestCheckVerdicts(t *testing.T) {
	f := newFiles(t)
	mclOld := obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -5 * time.Second}
	mclRenewed := mclOld
	mclRenewed.renew = 0
	mclTooSoon := mclOld
	mclTooSoon.renew = -3 * time.Second
	mclOldLong := mclOld
	mclOldLong.renew = -6 * time.Second
	mclTakeover := obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "b", renew: 0}
	mclStale := mclOld
	mclStale.renew = -18 * time.Second
	mclTakenOver := obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrB, holder: "b", renew: 0}

	paths := map[string]string{
		"mcl-old":        f.write("mcl-old.yaml", mclOld.yaml()),
		"mcl-old-6s":     f.write("mcl-old-6s.yaml", mclOldLong.yaml()),
		"mcl-stale":      f.write("mcl-stale.yaml", mclStale.yaml()),
		"mcl-renewed":    f.write("mcl-renewed.yaml", mclRenewed.yaml()),
		"mcl-too-soon":   f.write("mcl-too-soon.yaml", mclTooSoon.yaml()),
		"mcl-takeover":   f.write("mcl-takeover.yaml", mclTakeover.yaml()),
		"mcl-taken-over": f.write("mcl-taken-over.yaml", mclTakenOver.yaml()),
		"lease-team-a":   f.write("lease-team-a.yaml", obj{ns: "cnrm-system", name: "kcc-leader-team-a", holder: "pod-a_1", renew: 0}.yaml()),
		"lease-other-ns": f.write("lease-other-ns.yaml", obj{ns: "default", name: "x", holder: "h", renew: 0}.yaml()),
		"mcl-other-ns":   f.write("mcl-other-ns.yaml", obj{mcl: true, ns: "default", name: "kcc-leader", holder: "h", renew: 0}.yaml()),
		"app-old":        f.write("app-old.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: -2 * time.Second, acquire: -time.Hour, trans: 3}.yaml()),
		"app-renew":      f.write("app-renew.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: 0, acquire: -time.Hour, trans: 3}.yaml()),
		"app-renew-2.5":  f.write("app-renew-2.5.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: 500 * time.Millisecond, acquire: -time.Hour, trans: 3}.yaml()),
		"app-bob":        f.write("app-bob.yaml", obj{ns: "apps", name: "app", holder: "bob", renew: 0, acquire: -time.Second, trans: 4}.yaml()),
		"app-carol":      f.write("app-carol.yaml", obj{ns: "apps", name: "app", holder: "carol", renew: 0}.yaml()),
		"app-future":     f.write("app-future.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: 10 * time.Second, acquire: -time.Hour, trans: 3}.yaml()),
		"audited":        f.write("audited.yaml", obj{ns: "audited", name: "x", holder: "h", renew: 0}.yaml()),
	}

	tests := []struct {
		name string
		args []string
		out  string
		code int
	}{
		{
			name: "designated manager renews",
			args: []string{"--as", mgrA, "--old", paths["mcl-old-6s"], "--new", paths["mcl-renewed"]},
			out:  "ALLOW: rule kcc-mcl\n",
		},
		{
			name: "I2: another manager writes a fresh designated MultiClusterLease",
			args: []string{"--as", mgrB, "--old", paths["mcl-old"], "--new", paths["mcl-takeover"]},
			out: "DENY (I2, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
				" is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 12s)\n",
			code: 1,
		},
		{
			name: "I3: another manager takes over a stale designation",
			args: []string{"--as", mgrB, "--old", paths["mcl-stale"], "--new", paths["mcl-taken-over"]},
			out:  "ALLOW: rule kcc-mcl\n",
		},
		{
			name: "I3: another manager may not designate itself while fresh",
			args: []string{"--as", mgrB, "--old", paths["mcl-old"], "--new", paths["mcl-taken-over"]},
			out: "DENY (I3, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
				" may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 12s)\n",
			code: 1,
		},
		{
			name: "operator writes anything",
			args: []string{"--as", operator, "--old", paths["mcl-old"], "--new", paths["mcl-takeover"]},
			out:  "ALLOW: rule kcc-mcl\n",
		},
		{
			// The cluster's shared candidate renewing: never refused for
			// how often (docs/design.md §4); Leases are (below).
			name: "I6: a shared MultiClusterLease renewal is not rate limited",
			args: []string{"--as", mgrA, "--old", paths["mcl-too-soon"], "--new", paths["mcl-renewed"], "--operation", "update"},
			out:  "ALLOW: rule kcc-mcl\n",
		},
		{
			name: "I6: fractional retry-after",
			args: []string{"--as", "alice", "--old", paths["app-old"], "--new", paths["app-renew-2.5"], "--now", "2026-01-02T15:04:05.5Z"},
			out: "DENY (I6, HTTP 429, retry after 2.5s): leaseguard: rule app-leases: alice" +
				" renews too often lease apps/app (renewed 2.5s after the stored renewal, minimum 5s)\n",
			code: 1,
		},
		{
			name: "I8: a manager writes the status",
			args: []string{"--as", mgrA, "--subresource", "status", "--old", paths["mcl-old"], "--new", paths["mcl-old"]},
			out: "DENY (I8, HTTP 403): leaseguard: rule kcc-mcl: " + mgrA +
				" may not write the status of multiclusterlease cnrm-system/kcc-leader (status writers: " + mclCtl + ")\n",
			code: 1,
		},
		{
			name: "status writer writes the status",
			args: []string{"--as", mclCtl, "--subresource", "status", "--old", paths["mcl-old"], "--new", paths["mcl-old"]},
			out:  "ALLOW: rule kcc-mcl\n",
		},
		{
			name: "no rule selects a lease",
			args: []string{"--as", "anyone", "--new", paths["lease-other-ns"]},
			out:  "ALLOW: no rule selects this object\n",
		},
		{
			name: "no rule selects a MultiClusterLease",
			args: []string{"--as", "anyone", "--old", paths["mcl-other-ns"]},
			out:  "ALLOW: no rule selects this object\n",
		},
		{
			name: "warn: I9 another manager's bound lease",
			args: []string{"--as", mgrTeamB, "--pod-name", "pod-a", "--new", paths["lease-team-a"]},
			out: "WARN (I9, admitted): leaseguard: rule kcc-namespace-leases: " + mgrTeamB +
				" may not write lease cnrm-system/kcc-leader-team-a (bound lease: kcc-leader-team-b)\n",
		},
		{
			name: "warn: I1 not a manager",
			args: []string{"--as", "mallory", "--new", paths["lease-team-a"]},
			out: "WARN (I1, admitted): leaseguard: rule kcc-namespace-leases: mallory is not a manager of lease cnrm-system/kcc-leader-team-a" +
				" (managers: system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns})\n",
		},
		{
			name: "warn: I5 no pod-bound token",
			args: []string{"--as", mgrTeamA, "--new", paths["lease-team-a"]},
			out: "WARN (I5, admitted): leaseguard: rule kcc-namespace-leases: " + mgrTeamA +
				" has no pod-bound token and may not write lease cnrm-system/kcc-leader-team-a (holderBinding pod needs the authentication.kubernetes.io/pod-name extra)\n",
		},
		{
			name: "bound manager creates its lease from its pod",
			args: []string{"--as", mgrTeamA, "--pod-name", "pod-a", "--new", paths["lease-team-a"], "--operation", "CREATE"},
			out:  "ALLOW: rule kcc-namespace-leases\n",
		},
		{
			name: "audit: I1",
			args: []string{"--as", "bob", "--new", paths["audited"]},
			out:  "AUDIT (I1, admitted): leaseguard: rule audited: bob is not a manager of lease audited/x (managers: alice)\n",
		},
		{
			name: "I1 deny under a deny rule",
			args: []string{"--as", "mallory", "--old", paths["app-old"]},
			out:  "DENY (I1, HTTP 403): leaseguard: rule app-leases: mallory is not a manager of lease apps/app (managers: alice, bob)\n",
			code: 1,
		},
		{
			name: "I4: holder change of a live lease",
			args: []string{"--as", "bob", "--old", paths["app-old"], "--new", paths["app-bob"]},
			out: "DENY (I4, HTTP 403): leaseguard: rule app-leases: bob may not change the holder (alice to bob) of lease apps/app" +
				" (held until 2026-01-02T15:04:20Z, expires in 15s)\n",
			code: 1,
		},
		{
			name: "I5: holder must be the username",
			args: []string{"--as", "bob", "--new", paths["app-carol"]},
			out: "DENY (I5, HTTP 403): leaseguard: rule app-leases: bob writes holder carol that is not its username on lease apps/app" +
				" (holder must be the caller's username)\n",
			code: 1,
		},
		{
			name: "I7: renewTime in the future",
			args: []string{"--as", "alice", "--old", paths["app-old"], "--new", paths["app-future"]},
			out: "DENY (I7, HTTP 403): leaseguard: rule app-leases: alice sets a renewTime in the future on lease apps/app" +
				" (renewTime 10s ahead of the server clock, allowed 2s)\n",
			code: 1,
		},
		{
			name: "operator by group",
			args: []string{"--as", "admin", "--as-group", "system:authenticated", "--as-group", "system:masters", "--old", paths["app-old"], "--new", paths["app-carol"]},
			out:  "ALLOW: rule app-leases\n",
		},
		{
			// Deleting a live lease releases it: its holder's (or an
			// operator's) to do (I4).
			name: "I4: another manager deletes the live lease",
			args: []string{"--as", "bob", "--old", paths["app-old"], "--operation", "DELETE"},
			out: "DENY (I4, HTTP 403): leaseguard: rule app-leases: bob may not delete the live lease of alice on lease apps/app" +
				" (only the holder or an operator may; held until 2026-01-02T15:04:20Z, expires in 15s)\n",
			code: 1,
		},
		{
			name: "the holder deletes",
			args: []string{"--as", "alice", "--old", paths["app-old"], "--operation", "DELETE"},
			out:  "ALLOW: rule app-leases\n",
		},
		{
			// client-go re-sends the very body refused with 429 after
			// Retry-After: by then 5s have passed since the stored renewTime.
			name: "I6: the same renewal retried after Retry-After",
			args: []string{"--as", "alice", "--old", paths["app-old"], "--new", paths["app-renew"], "--now", "2026-01-02T15:04:08Z"},
			out:  "ALLOW: rule app-leases\n",
		},
		{
			// I6 measures the time since the stored renewTime (2s before
			// --now) by the server clock.
			name: "PATCH is an UPDATE",
			args: []string{"--as", "alice", "--old", paths["app-old"], "--new", paths["app-renew"], "--operation", "PATCH"},
			out:  "DENY (I6, HTTP 429, retry after 3s): leaseguard: rule app-leases: alice renews too often lease apps/app (renewed 2s after the stored renewal, minimum 5s)\n",
			code: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", f.policy()}, tc.args...)
			if !contains(args, "--now") {
				args = append(args, "--now", nowFlag)
			}
			out, code, err := runCheck(t, args...)
			if out != tc.out {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.out)
			}
			if code != tc.code {
				t.Errorf("exit code %d (error %v), want %d", code, err, tc.code)
			}
			if tc.code == 0 && err != nil {
				t.Errorf("error %v for an admitted write", err)
			}
			if tc.code == 1 && (err == nil || err.Error() != "") {
				t.Errorf("error %v for a denial, want an empty one (the verdict is on stdout)", err)
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The same write is decided differently at different --now values: the
// designation goes stale.
func TestCheckNowDecides(t *testing.T) {
	f := newFiles(t)
	old := f.write("old.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -5 * time.Second}.yaml())
	// mgrB takes over: designates itself and acquires.
	takeover := f.write("new.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrB, holder: "b", renew: 13 * time.Second}.yaml())
	base := []string{"--config", f.policy(), "--as", mgrB, "--old", old, "--new", takeover}

	// Stale at old renewTime + 15s lease + 2s skew = 15:04:17, and only once
	// the clock is past it.
	tests := []struct {
		now, out string
		code     int
	}{
		{"2026-01-02T15:04:05Z", "DENY (I3, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
			" may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 12s)\n", 1},
		{"2026-01-02T15:04:16.2Z", "DENY (I3, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
			" may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 1s)\n", 1},
		{"2026-01-02T15:04:17Z", "DENY (I3, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
			" may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 0s)\n", 1},
		{"2026-01-02T15:04:17.001Z", "ALLOW: rule kcc-mcl\n", 0},
		{"2026-01-02T17:04:17+02:00", "DENY (I3, HTTP 403): leaseguard: rule kcc-mcl: " + mgrB +
			" may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 0s)\n", 1},
		{"2026-01-02T17:04:18+02:00", "ALLOW: rule kcc-mcl\n", 0},
	}
	for _, tc := range tests {
		out, code, err := runCheck(t, append(base, "--now", tc.now)...)
		if out != tc.out || code != tc.code {
			t.Errorf("--now %s: exit %d (%v), output:\n%s\nwant exit %d, output:\n%s", tc.now, code, err, out, tc.code, tc.out)
		}
	}
}

func TestCheckBadInput(t *testing.T) {
	f := newFiles(t)
	lease := f.write("lease.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: 0}.yaml())
	mcl := f.write("mcl.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", holder: "a", renew: 0}.yaml())
	noName := f.write("noname.yaml", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  namespace: apps\n")
	configMap := f.write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
	negative := f.write("negative.yaml", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\nspec:\n  leaseDurationSeconds: -15\n")
	badPolicy := f.write("bad-policy.yaml", "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  managerz: [alice]\n")
	invalidPolicy := f.write("invalid-policy.yaml", "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  namespaces: [kube-system]\n  managers: [alice]\n  minRenewInterval: -5s\n")
	ownNS := f.write("own-ns-policy.yaml", "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  namespaces: [guard]\n  managers: [alice]\n")
	missing := filepath.Join(f.dir, "missing.yaml")
	pol := f.policy()

	tests := []struct {
		name string
		args []string
		// want are substrings of the error; exact is the whole error when set.
		want  []string
		exact string
	}{
		{"missing --config", []string{"--as", "alice", "--new", lease}, nil, "check needs --config and --as"},
		{"missing --user", []string{"--config", pol, "--new", lease}, nil, "check needs --config and --as"},
		{"no objects", []string{"--config", pol, "--as", "alice"}, nil, "check needs --old, --new or both"},
		{"unknown policy file", []string{"--config", missing, "--as", "alice", "--new", lease}, []string{missing, "no such file or directory"}, ""},
		{"policy with an unknown field", []string{"--config", badPolicy, "--as", "alice", "--new", lease}, nil,
			"policy file " + badPolicy + ": 1 problem(s):\n  line 6: field managerz not found in type v1alpha1.Rule"},
		{"invalid policy lists every problem", []string{"--config", invalidPolicy, "--as", "alice", "--new", lease},
			[]string{"policy file " + invalidPolicy + ": 2 problem(s):\n",
				"\n  line 6: rules[0].namespaces: Invalid value:",
				"\n  line 8: rules[0].minRenewInterval: Invalid value: \"-5s\": must not be negative"}, ""},
		{"--leaseguard-namespace feeds policy validation", []string{"--config", ownNS, "--leaseguard-namespace", "guard", "--as", "alice", "--new", lease},
			[]string{"policy file " + ownNS + ": 1 problem(s):\n  line 6: rules[0].namespaces: Invalid value:", "leaseguard is never called for kube-system, kube-node-lease, guard"}, ""},
		{"unknown --old file", []string{"--config", pol, "--as", "alice", "--old", missing}, []string{missing, "no such file or directory"}, ""},
		{"unknown --new file", []string{"--config", pol, "--as", "alice", "--old", lease, "--new", missing}, []string{missing, "no such file or directory"}, ""},
		{"object without a name", []string{"--config", pol, "--as", "alice", "--new", noName}, nil, noName + ": metadata.name is missing"},
		{"object of another kind", []string{"--config", pol, "--as", "alice", "--old", configMap}, nil,
			configMap + ": object is v1 ConfigMap, want coordination.k8s.io/v1 Lease or multicluster.core.cnrm.cloud.google.com/v1alpha1 MultiClusterLease"},
		{"object with a negative duration", []string{"--config", pol, "--as", "alice", "--new", negative}, []string{negative + ": ", "spec.leaseDurationSeconds", "negative (-15)"}, ""},
		{"--old and --new of different kinds", []string{"--config", pol, "--as", "alice", "--old", lease, "--new", mcl}, []string{"--old is a Lease, --new a MultiClusterLease: both must be the same kind"}, ""},
		{"--operation CREATE with both objects", []string{"--config", pol, "--as", "alice", "--old", lease, "--new", lease, "--operation", "CREATE"}, nil,
			"--operation CREATE does not fit the objects given (--old and --new wants UPDATE)"},
		{"--operation DELETE with --new only", []string{"--config", pol, "--as", "alice", "--new", lease, "--operation", "delete"}, nil,
			"--operation delete does not fit the objects given (--new only wants CREATE)"},
		{"--operation UPDATE with --old only", []string{"--config", pol, "--as", "alice", "--old", lease, "--operation", "UPDATE"}, nil,
			"--operation UPDATE does not fit the objects given (--old only wants DELETE)"},
		{"--operation not an operation", []string{"--config", pol, "--as", "alice", "--new", lease, "--operation", "CONNECT"}, []string{`--operation "CONNECT" is not CREATE, UPDATE (or PATCH) or DELETE`}, ""},
		{"bad --now", []string{"--config", pol, "--as", "alice", "--new", lease, "--now", "2026-01-02 15:04:05"}, nil,
			`--now "2026-01-02 15:04:05" is not an RFC 3339 time`},
		{"--now without zone", []string{"--config", pol, "--as", "alice", "--new", lease, "--now", "2026-01-02T15:04:05"}, nil,
			`--now "2026-01-02T15:04:05" is not an RFC 3339 time`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := runCheck(t, tc.args...)
			if err == nil {
				t.Fatalf("check succeeded: %q", out)
			}
			if code != 2 {
				t.Errorf("exit code %d, want 2 (error %v)", code, err)
			}
			if out != "" {
				t.Errorf("output %q for bad input, want none", out)
			}
			if tc.exact != "" && err.Error() != tc.exact {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.exact)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%s\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// Command-line mistakes are bad input too: the documented exit code is 2, so
// that a script never mistakes a typo for a denial (exit 1).
func TestCheckUsageErrorsExit2(t *testing.T) {
	f := newFiles(t)
	lease := f.write("lease.yaml", obj{ns: "apps", name: "app", holder: "alice", renew: 0}.yaml())
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--config", f.policy(), "--as", "alice", "--new", lease, "--bogus"}, "unknown flag: --bogus"},
		{"positional argument", []string{"--config", f.policy(), "--as", "alice", "--new", lease, "extra"}, `unknown command "extra"`},
		{"flag without value", []string{"--config", f.policy(), "--as", "alice", "--new"}, "flag needs an argument: --new"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := runCheck(t, tc.args...)
			if err == nil {
				t.Fatalf("check succeeded: %q", out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if code != 2 {
				t.Errorf("exit code %d for %q, want 2 (bad input)", code, err)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{&ExitError{Code: 2, Err: fmt.Errorf("bad")}, 2},
		{&ExitError{Code: 1, Err: fmt.Errorf("")}, 1},
		{fmt.Errorf("plain"), 1},
	}
	for _, tc := range tests {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if out.String() != version+"\n" {
		t.Errorf("version printed %q, want %q", out.String(), version+"\n")
	}
}

// The fields of docs/security.md and docs/rate-limiting.md decided offline:
// coalescing, the losing candidates' back-off and the lease bounds.
func TestCheckDecidesCoalescingBackOffAndBounds(t *testing.T) {
	f := &files{t: t, dir: t.TempDir()}
	policy := f.write("policy.yaml", testfixtures.Header+`rules:
- name: shared
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: ["`+testfixtures.KCCManagerPrefix+`*"]
  designation: auto
  coalesceRenewals: auto
  minRenewInterval: auto
  backOffLosers: true
`)
	stored := f.write("old.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -3 * time.Second}.yaml())
	renewed := f.write("new.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -1 * time.Second}.yaml())
	retuned := f.write("retuned.yaml", strings.Replace(obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -1 * time.Second}.yaml(),
		"leaseDurationSeconds: 15", "leaseDurationSeconds: 20", 1))
	// What a CRD's date-time admits and metav1.MicroTime cannot read.
	untyped := f.write("untyped.yaml", strings.Replace(obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -1 * time.Second}.yaml(),
		ts(-time.Second), strings.Replace(ts(-time.Second), ".000000Z", "Z", 1), 1))
	long := f.write("long.yaml", strings.Replace(obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: 0}.yaml(),
		"leaseDurationSeconds: 15", "leaseDurationSeconds: 61", 1))
	base := []string{"--config", policy, "--now", ts(0), "--old", stored}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"the designated manager's early renewal is coalesced", []string{"--as", mgrA, "--new", renewed}, 0,
			"ALLOW (coalesced): rule shared: renewTime advances 2s, less than coalesceRenewals 7s: acknowledged, not stored\n"},
		// Designation decides who writes, never who leads.
		{"another manager's renewal of the shared lease is acknowledged", []string{"--as", mgrB, "--new", renewed}, 0,
			"ALLOW (acknowledged): rule shared: " + mgrB + " renews the shared holder's lease, which " + mgrA + " writes: acknowledged, not stored (by leaseguard's mutating webhook; without it, stored)\n"},
		{"a losing candidate's other write backs off until the designation goes stale", []string{"--as", mgrB, "--new", retuned}, 1,
			"DENY (I2, HTTP 429, retry after 14s): leaseguard: rule shared: " + mgrB + " is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 14s)\n"},
		{"kubectl gets the 403 at once", []string{"--as", mgrB, "--new", retuned, "--field-manager", "kubectl-patch"}, 1,
			"DENY (I2, HTTP 403): leaseguard: rule shared: " + mgrB + " is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 14s)\n"},
		{"a dry run gets the 403 at once", []string{"--as", mgrB, "--new", retuned, "--dry-run"}, 1,
			"DENY (I2, HTTP 403): "},

		{"a lease longer than maxLeaseDuration", []string{"--as", mgrA, "--new", long}, 1,
			"DENY (I10, HTTP 403): leaseguard: rule shared: " + mgrA + " sets leaseDurationSeconds 61 on multiclusterlease cnrm-system/kcc-leader (at most 60 (maxLeaseDuration))\n"},
	}
	t.Run("a renewTime typed clients cannot read is refused", func(t *testing.T) {
		_, code, err := runCheck(t, append(base, "--as", mgrA, "--new", untyped)...)
		want := "spec.renewTime \"" + strings.Replace(ts(-time.Second), ".000000Z", "Z", 1) +
			"\" cannot be read by typed clients (metav1.MicroTime): write it as 2006-01-02T15:04:05.000000Z07:00"
		if code != 2 || err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("exit %d, error %v; want exit 2 and an error containing %q", code, err, want)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code, _ := runCheck(t, append(base, c.args...)...)
			if code != c.code || !strings.HasPrefix(out, c.want) {
				t.Fatalf("exit %d, output %q\nwant exit %d, %q", code, out, c.code, c.want)
			}
		})
	}
}

// -o json and -o yaml print the verdict as an object, for scripts; the exit
// status is the text output's.
func TestCheckOutputFormats(t *testing.T) {
	f := newFiles(t)
	old := f.write("old.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrA, holder: "a", renew: -5 * time.Second}.yaml())
	takeover := f.write("new.yaml", obj{mcl: true, ns: "cnrm-system", name: "kcc-leader", designated: mgrB, holder: "b", renew: 13 * time.Second}.yaml())
	base := []string{"--config", f.policy(), "--as", mgrB, "--old", old, "--new", takeover, "--now", "2026-01-02T15:04:05Z"}
	msg := "leaseguard: rule kcc-mcl: " + mgrB + " may not take over the designation of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 12s)"

	out, code, _ := runCheck(t, append(base, "-o", "json")...)
	var got checkResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	want := checkResult{Verdict: "deny", Outcome: "refused", Rule: "kcc-mcl", Invariant: "I3", Code: 403, Message: msg}
	if got != want || code != 1 {
		t.Errorf("-o json: exit %d, %+v\nwant exit 1, %+v", code, got, want)
	}

	out, code, _ = runCheck(t, append(base, "--output", "yaml")...)
	if !strings.HasPrefix(out, "code: 403\ninvariant: I3\nmessage: ") || !strings.Contains(out, "\noutcome: refused\nrule: kcc-mcl\nverdict: deny\n") || code != 1 {
		t.Errorf("-o yaml: exit %d, output:\n%s", code, out)
	}

	out, code, _ = runCheck(t, append(base[:len(base)-2], "--now", "2026-01-02T15:04:17.001Z", "-o", "json")...)
	got = checkResult{}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got != (checkResult{Verdict: "allow", Outcome: "stored", Rule: "kcc-mcl"}) || code != 0 {
		t.Errorf("-o json, admitted: exit %d, %+v (%v)", code, got, err)
	}

	if _, code, err := runCheck(t, append(base, "-o", "xml")...); code != 2 || err == nil || err.Error() != `--output "xml": want text, json or yaml` {
		t.Errorf("-o xml: exit %d, %v; want exit 2 and the formats named", code, err)
	}
}
