package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// On a cluster that has never heard of leaseguard or Config Connector — a
// bare kube-apiserver without the MultiClusterLease CRD — top watches the
// Leases and says why it does not watch MultiClusterLeases; a user without
// RBAC on leases is told what is needed; and what clients wrote into the
// leases, in namespaces no rule guards, reaches the operator's terminal
// escaped.
func TestTopOnABareClusterAndWithoutPermission(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second control plane")
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	dir := t.TempDir()
	addUser := func(user envtest.User) (string, *rest.Config) {
		u, err := env.AddUser(user, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := u.KubeConfig()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, user.Name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path, u.Config()
	}

	admin, adminConfig := addUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}})
	cmd := exec.Command(pluginBinary(t), "top", "--kubeconfig", admin, "-A", "--once", "--window", "2s", "-o", "wide")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("top on a bare cluster: %v\n%s", err, stderr.String())
	}
	if want := "leaseguard top: not watching multiclusterleases: the MultiClusterLease CRD (multiclusterleases.multicluster.core.cnrm.cloud.google.com) is not installed"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if !strings.Contains(stderr.String(), "watching leases in all namespaces") || !strings.Contains(stdout.String(), "kube-system") {
		t.Errorf("top did not report the cluster's Leases:\n%s\n%s", stderr.String(), stdout.String())
	}

	nobody, _ := addUser(envtest.User{Name: "nobody"})
	out, err := exec.Command(pluginBinary(t), "top", "--kubeconfig", nobody, "-n", "default", "--once", "--window", "1s").CombinedOutput()
	if want := "cannot list leases.coordination.k8s.io in namespace default: leaseguard top needs list and watch on it"; err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("without RBAC: %v\n%s\nwant %q", err, out, want)
	}

	_, writerConfig := addUser(envtest.User{Name: "lease-writer"})
	t.Run("client-written strings are escaped", func(t *testing.T) {
		topEscapesClientWrittenStrings(t, admin, adminConfig, writerConfig)
	})
}

// The holder (what the API server accepts in holderIdentity: any string,
// and through protobuf bytes that are not UTF-8), the designation
// annotation and the field managers of a Lease are chosen by whoever may
// write it: here a user allowed to write Leases in one namespace, which no
// rule guards (there is no leaseguard on this cluster). The holder
// set the window title and cleared the screen of an operator running
// `top -A --once -o table`. top is run as an operator runs it: --once in
// every output, and the live UI on a terminal.
const (
	hostileNS = "top-hostile"
	// OSC 0 (window title) ended by ST, CSI 2J (clear the screen), OSC 52
	// (write the clipboard), a C1 CSI in UTF-8 (U+009B: xterm reads it as
	// ESC [), the same as one raw byte, and a right-to-left override.
	hostileHolder = "\x1b]0;pwned\x1b\\\x1b[2J\x1b]52;c;cHduZWQ=\x07\u009b2J\x9b2J\u202eredloh"
	// As top shows it: escaped, as `leaseguard check` shows a value.
	hostileHolderShown = `\x1b]0;pwned\x1b\\\x1b[2J\x1b]52;c;cHduZWQ=\a\u009b2J\x9b2J\u202eredloh`
	hostileDesignated  = "mgr\u202e\x1b[31m"
	hostileDesignShown = `mgr\u202e\x1b[31m`
	// Field managers: the API server refuses one that is not printable
	// and drops what does not print from one taken from the User-Agent
	// (Go's HTTP client refuses to send ESC in a header at all); what it
	// keeps can still be as wide as CJK.
	wideManager = "選挙-elector"
	uaManager   = "ua\u009b2J\u202e"
)

func topEscapesClientWrittenStrings(t *testing.T, admin string, adminConfig, writerConfig *rest.Config) {
	ctx := context.Background()
	adminClient := kubernetes.NewForConfigOrDie(adminConfig)
	if _, err := adminClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostileNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "patch"}}}
	if _, err := adminClient.RbacV1().Roles(hostileNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease-writer"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminClient.RbacV1().RoleBindings(hostileNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "lease-writer"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Protobuf, as client-go's own typed clients may send: it carries the
	// raw byte 0x9b that JSON would turn into U+FFFD.
	protoConfig := rest.CopyConfig(writerConfig)
	protoConfig.ContentType = runtime.ContentTypeProtobuf
	leases := kubernetes.NewForConfigOrDie(protoConfig).CoordinationV1().Leases(hostileNS)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "leader", Annotations: map[string]string{leaseobject.DesignationAnnotation: hostileDesignated}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(hostileHolder), LeaseDurationSeconds: ptr.To[int32](15), AcquireTime: &now, RenewTime: &now},
	}
	// The Role is in force once the authorizer's cache has it.
	waitFor(t, "the writer's RBAC", func() bool {
		_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err)
	})
	stored, err := adminClient.CoordinationV1().Leases(hostileNS).Get(ctx, "leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *stored.Spec.HolderIdentity != hostileHolder {
		t.Fatalf("stored holder %q, want it as written, %q", *stored.Spec.HolderIdentity, hostileHolder)
	}

	// Every output at once, each watching the same writes.
	onces := map[string]*topRun{}
	for _, o := range []string{"table", "wide", "json", "yaml",
		// kubectl's template printers (cli-runtime's PrintFlags).
		`jsonpath={range .leases[?(@.namespace=="` + hostileNS + `")]}{.holder}{"\n"}{end}`,
		`go-template={{range .leases}}{{if eq .namespace "` + hostileNS + `"}}{{.holder}}{{"\n"}}{{end}}{{end}}`} {
		// Each window starts when its top watches; the renewals go out
		// only once all six and the live view watch, which on CI's two
		// loaded cores has taken most of a 6 s window.
		onces[o] = startTop(t, admin, "-A", "--once", "--window", "15s", "-o", o)
	}
	live := startLiveTop(t, admin, 200, 60)
	for o, r := range onces {
		r.waitWatching(t, o)
	}
	live.waitFor(t, "the live view", "q quit")

	// Renewals are updates in protobuf, as client-go's leader election
	// sends them: a patch is applied to the object as JSON, which would
	// turn the holder's raw byte into U+FFFD.
	renew := func(manager, userAgent string) error {
		cfg := rest.CopyConfig(protoConfig)
		if userAgent != "" {
			cfg.UserAgent = userAgent
		}
		leases := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases(hostileNS)
		l, err := leases.Get(ctx, "leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: manager})
		return err
	}
	if err := renew("mgr\x1b[2J", ""); !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("a field manager with ESC: %v, want the API server's refusal", err)
	}
	if err := renew(wideManager, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a renewTime of its own
	if err := renew("", uaManager+"/1.0"); err != nil {
		t.Fatal(err)
	}

	outputs := map[string]string{}
	for o, r := range onces {
		outputs[o] = r.wait(t, o)
	}

	for o, out := range outputs {
		if c, i, ok := rawControl(out); ok {
			t.Errorf("-o %s: %U at byte %d reaches the terminal raw:\n%s", o, c, i, out)
		}
	}
	table, wide := outputs["table"], outputs["wide"]
	// The holder in 24 columns, cut between escapes.
	if want := `  lease  \x1b]0;pwned\x1b\\\x1b[…  `; !strings.Contains(table, want) {
		t.Errorf("table lacks %s:\n%s", want, table)
	}
	for _, want := range []string{hostileHolderShown, hostileDesignShown, wideManager + "×1", "ua2J×1"} {
		if !strings.Contains(wide, want) {
			t.Errorf("wide lacks %s:\n%s", want, wide)
		}
	}
	for o, out := range map[string]string{"table": table, "wide": wide} {
		assertColumnsHold(t, o, out)
	}
	// JSON and YAML carry the values exactly, escaped in their own
	// notation; the raw byte is U+FFFD there, as for every JSON client.
	for _, want := range []string{`"holder": "\u001b]0;pwned\u001b\\\u001b[2J\u001b]52;c;cHduZWQ=\u0007\u009b2J\ufffd2J\u202eredloh"`, `"manager": "ua2J"`, `"manager": "選挙-elector"`} {
		if !strings.Contains(outputs["json"], want) {
			t.Errorf("-o json lacks %s:\n%s", want, outputs["json"])
		}
	}
	if want := `holder: "\e]0;pwned\e\\\e[2J\e]52;c;cHduZWQ=\a\x9B2J` + "\uFFFD" + `2J\u202eredloh"`; !strings.Contains(outputs["yaml"], want) {
		t.Errorf("-o yaml lacks %s:\n%s", want, outputs["yaml"])
	}

	// Templates print the values as the table shows them (the raw byte is
	// U+FFFD: the template's data is the report's JSON).
	for o, out := range outputs {
		if kind, _, _ := strings.Cut(o, "="); kind == "jsonpath" || kind == "go-template" {
			// startTop's output is stdout, then top's stderr lines.
			if want := oneline.Escape(strings.ToValidUTF8(hostileHolder, "\uFFFD")) + "\nleaseguard top: "; !strings.HasPrefix(out, want) {
				t.Errorf("-o %s printed %q, want the holder escaped as the table shows it, on a line of its own: %q", kind, out, want)
			}
		}
	}

	// The live view, as the operator sees it on a terminal: narrow, then
	// wide (w), then quit (q). It writes escape sequences of its own (the
	// alternate screen, cursor moves, styles): none of the writer's may be
	// among them.
	live.waitFor(t, "the escaped holder in the live view", `\x1b]0;pwned`)
	live.send(t, "w")
	live.waitFor(t, "the wide live view", "DESIGNATED")
	live.waitFor(t, "the escaped designation in the live view", `mgr\u202e`)
	live.send(t, "q")
	screen := live.wait(t)
	for _, raw := range []string{"\x1b]0;pwned", "\x1b]52;", "\u009b", "\x9b2J", "\u202e", "\x1b[31m"} {
		if strings.Contains(screen, raw) {
			t.Errorf("the live view wrote %q raw to the terminal", raw)
		}
	}
}

// rawControl finds the first character of out that acts on a terminal
// rather than prints: a control other than the newline, a C1 control, a
// format character (bidirectional overrides), or a byte that is not
// UTF-8.
func rawControl(out string) (rune, int, bool) {
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			return rune(out[i]), i, true
		}
		if r != '\n' && !oneline.Printable(r) {
			return r, i, true
		}
	}
	return 0, 0, false
}

// assertColumnsHold checks that every row of each table of a plain report
// starts its cells at its header's columns, measured as a terminal shows
// them.
func assertColumnsHold(t *testing.T, name, out string) {
	t.Helper()
	var header []int
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "leaseguard top") || strings.HasPrefix(line, "cluster:"):
			header = nil
		case header == nil:
			header = cellStarts(line)
		default:
			if got := cellStarts(line); !reflect.DeepEqual(got, header) {
				t.Errorf("-o %s: cells at columns %v, the header's at %v:\n%s", name, got, header, line)
			}
		}
	}
}

// cellStarts are the terminal columns where a table line's cells start:
// after two spaces or more.
func cellStarts(line string) []int {
	starts := []int{0}
	col, spaces := 0, 0
	for line != "" {
		g, w := ansi.FirstGraphemeCluster(line, ansi.GraphemeWidth)
		line = line[len(g):]
		if g == " " {
			spaces++
		} else {
			if spaces >= 2 {
				starts = append(starts, col)
			}
			spaces = 0
		}
		col += w
	}
	return starts
}

// topRun is a `top --once` started and reading its output.
type topRun struct {
	cmd            *exec.Cmd
	stdout, stderr *controlplane.SyncBuffer
}

func startTop(t *testing.T, kubeconfig string, args ...string) *topRun {
	t.Helper()
	r := &topRun{stdout: &controlplane.SyncBuffer{}, stderr: &controlplane.SyncBuffer{}}
	r.cmd = exec.Command(pluginBinary(t), append([]string{"top", "--kubeconfig", kubeconfig}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

func (r *topRun) waitWatching(t *testing.T, name string) {
	t.Helper()
	waitFor(t, "top -o "+name+" to watch", func() bool { return strings.Contains(r.stderr.String(), "leaseguard top: watching ") })
}

// wait returns what top printed, standard error after standard output.
func (r *topRun) wait(t *testing.T, name string) string {
	t.Helper()
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("top -o %s: %v\n%s", name, err, r.stderr.String())
	}
	return r.stdout.String() + r.stderr.String()
}

// liveTop is top's live UI on a pseudo-terminal.
type liveTop struct {
	cmd     *exec.Cmd
	control *os.File
	screen  *controlplane.SyncBuffer
	done    chan struct{}
}

func startLiveTop(t *testing.T, kubeconfig string, cols, rows uint16) *liveTop {
	t.Helper()
	control, terminal, err := openPTY(cols, rows)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no pseudo-terminal here")
	}
	if err != nil {
		t.Fatal(err)
	}
	l := &liveTop{control: control, screen: &controlplane.SyncBuffer{}, done: make(chan struct{})}
	l.cmd = exec.Command(pluginBinary(t), "top", "--kubeconfig", kubeconfig, "-A", "--window", "6s", "--interval", "300ms")
	l.cmd.Stdin, l.cmd.Stdout, l.cmd.Stderr = terminal, terminal, terminal
	l.cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	err = l.cmd.Start()
	terminal.Close() // the child holds it; the control end reads EOF once it exits
	if err != nil {
		control.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(l.done)
		_, _ = io.Copy(l.screen, control)
	}()
	t.Cleanup(func() {
		if l.cmd.ProcessState == nil {
			_ = l.cmd.Process.Kill()
			_ = l.cmd.Wait()
		}
		control.Close()
	})
	return l
}

func (l *liveTop) waitFor(t *testing.T, what, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(l.screen.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%s) on the terminal:\n%q", what, text, l.screen.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *liveTop) send(t *testing.T, keys string) {
	t.Helper()
	if _, err := l.control.WriteString(keys); err != nil {
		t.Fatal(err)
	}
}

// wait returns all the live UI drew once it has exited.
func (l *liveTop) wait(t *testing.T) string {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- l.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the live view: %v\n%q", err, l.screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the live view did not quit on q:\n%q", l.screen.String())
	}
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
	}
	return l.screen.String()
}
