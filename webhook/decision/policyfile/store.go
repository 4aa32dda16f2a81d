package policyfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// ReloadRecorder is told about every reload attempt.
type ReloadRecorder interface {
	PolicyReload(ok bool)
}

// Store holds the policy in force and reloads it from its file. A request
// reads one policy value; a reload swaps in a whole new one.
type Store struct {
	path    string
	opts    policy.CompileOptions
	current atomic.Pointer[policy.Policy]
	// inForce pairs the policy in force with the SHA-256 of its file.
	inForce atomic.Pointer[loaded]
	// changed is closed, and replaced, each time a new policy is swapped in.
	mu      sync.Mutex
	changed chan struct{}
	// data is the file content in force; seen the content last read, when
	// seenOK says the last read succeeded.
	data   []byte
	seen   []byte
	seenOK bool
	log    logr.Logger
	rec    ReloadRecorder
	// lastErr is the problem with the file on disk, or "" when it is in force.
	lastErr atomic.Pointer[string]
}

// NewStore loads path; it fails when the file is invalid, so a server never
// starts without a good policy.
func NewStore(path string, opts policy.CompileOptions, log logr.Logger, rec ReloadRecorder) (*Store, error) {
	p, data, err := Load(path, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, opts: opts, data: data, seen: data, seenOK: true, log: log, rec: rec, changed: make(chan struct{})}
	s.current.Store(p)
	s.inForce.Store(&loaded{p, digest(data)})
	return s, nil
}

type loaded struct {
	policy *policy.Policy
	sha256 string
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// InForce returns the policy in force and the hex SHA-256 of its file.
func (s *Store) InForce() (*policy.Policy, string) {
	l := s.inForce.Load()
	return l.policy, l.sha256
}

// Changed returns a channel that is closed when a new policy is swapped in
// (take a new one after it is).
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Policy returns the policy in force.
func (s *Store) Policy() *policy.Policy { return s.current.Load() }

// LastError returns why the file on disk is not in force, or "".
func (s *Store) LastError() string {
	if e := s.lastErr.Load(); e != nil {
		return *e
	}
	return ""
}

// Watch re-reads the file every interval until ctx ends. Polling the content
// works the same for a plain file, an editor's rename-and-replace and a
// ConfigMap volume's symlink swap, which file-event watchers handle unevenly.
func (s *Store) Watch(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { s.Reload() }, interval)
}

// Reload reads the file once and swaps the policy in if the file changed and
// is valid. An invalid file keeps the last good policy in force.
func (s *Store) Reload() {
	data, err := readFile(s.path)
	if err == nil && s.seenOK && bytes.Equal(data, s.seen) {
		return
	}
	s.seen, s.seenOK = data, err == nil
	if err == nil && bytes.Equal(data, s.data) {
		// Reverted to the policy in force: nothing to swap, but the file
		// is valid again.
		if s.LastError() != "" {
			s.lastErr.Store(nil)
			s.log.Info("policy file is valid again", "path", s.path)
			if s.rec != nil {
				s.rec.PolicyReload(true)
			}
		}
		return
	}
	var p *policy.Policy
	if err == nil {
		p, err = Parse(data, s.opts)
	}
	if err != nil {
		msg := err.Error()
		if prev := s.lastErr.Load(); prev == nil || *prev != msg {
			s.log.Error(err, "policy file is invalid; keeping the last good policy", "path", s.path)
			if s.rec != nil {
				s.rec.PolicyReload(false)
			}
		}
		s.lastErr.Store(&msg)
		return
	}
	s.data = data
	s.current.Store(p)
	s.inForce.Store(&loaded{p, digest(data)})
	s.lastErr.Store(nil)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.log.Info("policy reloaded", "path", s.path, "rules", len(p.Rules))
	if s.rec != nil {
		s.rec.PolicyReload(true)
	}
}
