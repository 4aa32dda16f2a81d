package policyfile

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// fakeRecorder remembers every PolicyReload call.
type fakeRecorder struct {
	mu    sync.Mutex
	calls []bool
}

func (r *fakeRecorder) PolicyReload(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, ok)
}

func (r *fakeRecorder) get() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.calls...)
}

func (r *fakeRecorder) want(t *testing.T, want ...bool) {
	t.Helper()
	if got := r.get(); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Errorf("recorder calls %v, want %v", got, want)
	}
}

// policyWithRule is a valid file whose only rule is named name.
func policyWithRule(name string) string {
	return `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: ` + name + `
  resources: [leases]
  namespaces: [team-a]
  managers: [alice]
`
}

// invalidPolicy has an unknown field on line 6.
const invalidPolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: broken
  resources: [leases]
  managerz: [alice]
`

func newTestStore(t *testing.T, content string) (*Store, string, *fakeRecorder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, content)
	rec := &fakeRecorder{}
	s, err := NewStore(path, testOpts, logr.Discard(), rec)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s, path, rec
}

func TestNewStore(t *testing.T) {
	s, _, rec := newTestStore(t, policyWithRule("first"))
	if p := s.Policy(); p == nil || len(p.Rules) != 1 || p.Rules[0].Name != "first" {
		t.Fatalf("Policy() = %+v, want one rule named first", p)
	}
	if e := s.LastError(); e != "" {
		t.Errorf("LastError() = %q after a good load", e)
	}
	rec.want(t)
}

func TestNewStoreInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		want          string
	}{
		{"unknown field", invalidPolicy, ": 1 problem(s):\n  line 6: field managerz not found in type v1alpha1.Rule"},
		{"empty", "", ": empty file: want apiVersion"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			writeFile(t, path, tc.content)
			rec := &fakeRecorder{}
			s, err := NewStore(path, testOpts, logr.Discard(), rec)
			if err == nil {
				t.Fatalf("NewStore succeeded on an invalid file: %+v", s.Policy())
			}
			if s != nil {
				t.Error("NewStore returned a store with its error")
			}
			if want := "policy file " + path + tc.want; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error:\n%s\nwant prefix:\n%s", err, want)
			}
			rec.want(t)
		})
	}
	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(dir, "missing.yaml")
		_, err := NewStore(path, testOpts, logr.Discard(), nil)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("error %v, want one naming %s", err, path)
		}
	})
}

func TestReloadUnchanged(t *testing.T) {
	s, _, rec := newTestStore(t, policyWithRule("first"))
	before := s.Policy()
	s.Reload()
	s.Reload()
	if s.Policy() != before {
		t.Error("Reload of an unchanged file swapped the policy")
	}
	rec.want(t)
}

func TestReloadValidChange(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	before := s.Policy()

	writeFile(t, path, policyWithRule("second"))
	s.Reload()
	after := s.Policy()
	if after == before {
		t.Fatal("Reload of a valid changed file kept the old policy")
	}
	if after.Rules[0].Name != "second" {
		t.Errorf("rule name %q after reload, want second", after.Rules[0].Name)
	}
	if before.Rules[0].Name != "first" {
		t.Errorf("the old policy value changed: rule %q", before.Rules[0].Name)
	}
	if e := s.LastError(); e != "" {
		t.Errorf("LastError() = %q", e)
	}
	rec.want(t, true)

	// A second reload of the same content changes nothing.
	s.Reload()
	if s.Policy() != after {
		t.Error("Reload swapped the policy again without a change")
	}
	rec.want(t, true)
}

// A change that is only whitespace or comments is still a new valid file.
func TestReloadCommentChange(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	before := s.Policy()
	writeFile(t, path, "# edited\n"+policyWithRule("first"))
	s.Reload()
	if s.Policy() == before {
		t.Error("Reload kept the old policy value after a valid change")
	}
	if s.Policy().Rules[0].Name != "first" {
		t.Errorf("rule %q", s.Policy().Rules[0].Name)
	}
	rec.want(t, true)
}

func TestReloadInvalidKeepsPolicy(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	good := s.Policy()

	writeFile(t, path, invalidPolicy)
	for i := 0; i < 3; i++ {
		s.Reload()
		if s.Policy() != good {
			t.Fatalf("reload %d: an invalid file replaced the policy", i)
		}
		if s.Policy().Rules[0].Name != "first" {
			t.Fatalf("reload %d: rule %q", i, s.Policy().Rules[0].Name)
		}
		want := "1 problem(s):\n  line 6: field managerz not found in type v1alpha1.Rule"
		if e := s.LastError(); e != want {
			t.Fatalf("reload %d: LastError() = %q, want %q", i, e, want)
		}
	}
	// Counted once however often the same invalid file is read.
	rec.want(t, false)

	// Another invalid version is counted again.
	writeFile(t, path, policyWithRule("first")+"  minRenewInterval: -1s\n")
	s.Reload()
	s.Reload()
	if e := s.LastError(); !strings.Contains(e, `line 8: rules[0].minRenewInterval: Invalid value: "-1s": must not be negative`) {
		t.Errorf("LastError() = %q, want the new problem", e)
	}
	if s.Policy() != good {
		t.Error("an invalid file replaced the policy")
	}
	rec.want(t, false, false)

	// Fixing the file clears the error and swaps in the new policy.
	writeFile(t, path, policyWithRule("fixed"))
	s.Reload()
	if e := s.LastError(); e != "" {
		t.Errorf("LastError() = %q after the file was fixed", e)
	}
	if s.Policy() == good || s.Policy().Rules[0].Name != "fixed" {
		t.Errorf("policy rule %q after the fix, want fixed", s.Policy().Rules[0].Name)
	}
	rec.want(t, false, false, true)
}

// Reverting a broken file to the content in force is a fix too: the error
// must clear and the recorder must hear that the file is valid again (else
// leaseguard_policy_file_valid stays 0 forever).
func TestReloadRevertToLastGood(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))

	writeFile(t, path, invalidPolicy)
	s.Reload()
	if s.LastError() == "" {
		t.Fatal("LastError() empty for an invalid file")
	}
	writeFile(t, path, policyWithRule("first"))
	s.Reload()
	if e := s.LastError(); e != "" {
		t.Errorf("LastError() = %q after reverting to the policy in force", e)
	}
	if s.Policy().Rules[0].Name != "first" {
		t.Errorf("rule %q", s.Policy().Rules[0].Name)
	}
	rec.want(t, false, true)
}

func TestReloadMissingFile(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	good := s.Policy()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	s.Reload()
	if s.Policy() != good {
		t.Error("a missing file replaced the policy")
	}
	if e := s.LastError(); !strings.Contains(e, path) || !strings.Contains(e, "no such file or directory") {
		t.Errorf("LastError() = %q, want it to name %s", e, path)
	}
	rec.want(t, false)

	writeFile(t, path, policyWithRule("back"))
	s.Reload()
	if e := s.LastError(); e != "" {
		t.Errorf("LastError() = %q after the file came back", e)
	}
	if s.Policy().Rules[0].Name != "back" {
		t.Errorf("rule %q, want back", s.Policy().Rules[0].Name)
	}
	rec.want(t, false, true)
}

func TestReloadNilRecorder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, policyWithRule("first"))
	s, err := NewStore(path, testOpts, logr.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, invalidPolicy)
	s.Reload()
	writeFile(t, path, policyWithRule("second"))
	s.Reload()
	if s.Policy().Rules[0].Name != "second" {
		t.Errorf("rule %q, want second", s.Policy().Rules[0].Name)
	}
}

func TestWatch(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Watch(ctx, 5*time.Millisecond)
		close(done)
	}()

	replaceFile(t, path, policyWithRule("second"))
	deadline := time.Now().Add(5 * time.Second)
	for s.Policy().Rules[0].Name != "second" {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not pick up the changed file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after its context was cancelled")
	}
	rec.want(t, true)

	// Stopped: a later change is not picked up.
	replaceFile(t, path, policyWithRule("third"))
	time.Sleep(50 * time.Millisecond)
	if name := s.Policy().Rules[0].Name; name != "second" {
		t.Errorf("rule %q after Watch stopped, want second", name)
	}
	rec.want(t, true)
}

// replaceFile swaps the file's content in at once, as the kubelet updates a
// mounted ConfigMap (a new file, then a rename): a watcher polling while
// os.WriteFile truncates and writes could read a half-written policy, which
// Reload rightly counts as a failed reload (seen once, with make test-unit
// run beside the kind stage).
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatchCancelledBeforeStart(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	writeFile(t, path, policyWithRule("second"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		s.Watch(ctx, time.Hour)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return for a cancelled context")
	}
	if name := s.Policy().Rules[0].Name; name != "first" {
		t.Errorf("rule %q, want first", name)
	}
	rec.want(t)
}

// LastError describes the file as it is now: a missing file that comes back
// empty is reported as empty, not as still missing.
func TestReloadMissingThenEmpty(t *testing.T) {
	s, path, rec := newTestStore(t, policyWithRule("first"))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	if e := s.LastError(); !strings.Contains(e, "no such file or directory") {
		t.Fatalf("LastError() = %q for a missing file", e)
	}
	writeFile(t, path, "")
	s.Reload()
	if e := s.LastError(); !strings.Contains(e, "empty file") {
		t.Errorf("LastError() = %q for an empty file, want it to say the file is empty", e)
	}
	if name := s.Policy().Rules[0].Name; name != "first" {
		t.Errorf("rule %q, want first", name)
	}
	rec.want(t, false, false)
}

func TestChangedIsClosedOnlyWhenANewPolicyIsSwappedIn(t *testing.T) {
	s, path, _ := newTestStore(t, policyWithRule("first"))
	_, before := s.InForce()
	changed := s.Changed()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	writeFile(t, path, invalidPolicy)
	s.Reload()
	if closed(changed) {
		t.Fatal("an invalid file signalled a change: the policy in force did not change")
	}
	writeFile(t, path, policyWithRule("second"))
	s.Reload()
	if !closed(changed) {
		t.Fatal("a new valid policy did not close Changed()")
	}
	p, after := s.InForce()
	if p.Rules[0].Name != "second" || after == before || len(after) != 64 {
		t.Errorf("InForce() = rule %s, sha %q (before %q): want the new policy and a new SHA-256", p.Rules[0].Name, after, before)
	}
	if closed(s.Changed()) {
		t.Error("the next Changed() channel is already closed")
	}
}
