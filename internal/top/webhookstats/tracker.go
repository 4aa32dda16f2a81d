// Package webhookstats reads the webhook's /debug/leases (the heaviest
// leases and users it has judged, webhook/serve/leasestats) into `leaseguard
// top`: what the webhook judged for each lease within top's window, and the
// users behind those requests — which a watcher alone cannot see.
//
// /debug/leases counts since the webhook started; the tracker keeps the
// snapshots of the last window and reports the difference between the
// newest and the oldest, summed over every replica given.
package webhookstats

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/serve/leasestats"
)

// maxBody bounds a snapshot: 1,000 leases and 1,000 writers fit well within.
const maxBody = 16 << 20

// ParseURL checks a --webhook-stats value: the http(s) address of a
// webhook replica's metrics port, with or without the /debug/leases path.
func ParseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--webhook-stats %q: want the http(s) address of a webhook replica's metrics port, such as https://127.0.0.1:8443", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = leasestats.Path
	}
	q := u.Query()
	q.Set("limit", "0")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

type counts struct {
	requests int64
	verdicts leasestats.Verdicts
	users    map[string]int64
}

type snapshot struct {
	at     time.Time
	leases map[leasetraffic.Key]*counts
}

// Tracker polls the replicas and keeps a window of snapshots.
type Tracker struct {
	URLs   []string
	Window time.Duration
	Client *http.Client

	mu      sync.Mutex
	history []snapshot
	lastErr error
}

// Poll fetches every replica once and records the sum as of now.
func (t *Tracker) Poll(ctx context.Context, now time.Time) error {
	snap := snapshot{at: now, leases: map[leasetraffic.Key]*counts{}}
	var firstErr error
	for _, u := range t.URLs {
		s, err := t.fetch(ctx, u)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for i := range s.Leases {
			l := &s.Leases[i]
			k := leasetraffic.Key{Resource: leaseobject.Resource(l.Resource), Namespace: l.Namespace, Name: l.Name}
			c := snap.leases[k]
			if c == nil {
				c = &counts{users: map[string]int64{}}
				snap.leases[k] = c
			}
			c.requests += l.Requests
			c.verdicts.Allow += l.Verdicts.Allow
			c.verdicts.Deny += l.Verdicts.Deny
			c.verdicts.Warn += l.Verdicts.Warn
			c.verdicts.Audit += l.Verdicts.Audit
			for _, u := range l.Users {
				c.users[u.User] += u.Requests
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = firstErr
	if firstErr != nil {
		return firstErr
	}
	t.history = append(t.history, snap)
	// Keep the newest snapshot at or before the window's start as the base.
	for len(t.history) > 2 && !t.history[1].at.After(now.Add(-t.Window)) {
		t.history = t.history[1:]
	}
	return nil
}

// LastError returns the error of the last poll, if it failed.
func (t *Tracker) LastError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

func (t *Tracker) fetch(ctx context.Context, u string) (*leasestats.Snapshot, error) {
	client := t.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("webhook stats: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("webhook stats %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The body is the replica's, or whatever answers at the address
		// given: quoted cut and escaped, as the webhook quotes values.
		return nil, fmt.Errorf("webhook stats %s: HTTP %d: %s", u, resp.StatusCode, oneline.Clip(strings.TrimSpace(string(body))))
	}
	var s leasestats.Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("webhook stats %s: not a /debug/leases snapshot: %w", u, err)
	}
	return &s, nil
}

// Traffic returns what the webhook judged per lease between the oldest
// snapshot of the window and the newest, or nil before two polls. A lease
// that entered the webhook's top-K within the window counts from zero.
func (t *Tracker) Traffic() map[leasetraffic.Key]*leasetraffic.WebhookTraffic {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.history) < 2 {
		return nil
	}
	base, last := t.history[0], t.history[len(t.history)-1]
	out := make(map[leasetraffic.Key]*leasetraffic.WebhookTraffic, len(last.leases))
	for k, c := range last.leases {
		b := base.leases[k]
		if b == nil {
			b = &counts{}
		}
		w := &leasetraffic.WebhookTraffic{
			Requests: max(0, c.requests-b.requests),
			Verdicts: leasetraffic.WebhookVerdicts{
				Allow: max(0, c.verdicts.Allow-b.verdicts.Allow), Deny: max(0, c.verdicts.Deny-b.verdicts.Deny),
				Warn: max(0, c.verdicts.Warn-b.verdicts.Warn), Audit: max(0, c.verdicts.Audit-b.verdicts.Audit),
			},
		}
		for user, n := range c.users {
			if d := n - b.users[user]; d > 0 {
				w.Users = append(w.Users, leasetraffic.UserRequests{User: user, Requests: d})
			}
		}
		if w.Requests > 0 {
			out[k] = w
		}
	}
	return out
}
