// Package gcslock is the global lock a MultiClusterLease controller contends
// for: one small JSON object per MultiClusterLease in a GCS bucket, written
// only with generation preconditions, so that of two controllers writing the
// same generation exactly one write lands. It behaves like the lock of the
// public gke-labs/multicluster-leader-election controller: object
// "leases/<namespace>/<name>", created with a does-not-exist precondition and
// one transition, taken over once it has not been renewed for the
// candidate's lease duration, the transition count incremented on a change of
// holder.
package gcslock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
)

// Record is the lock's content.
type Record struct {
	HolderIdentity   string    `json:"holderIdentity"`
	RenewTime        time.Time `json:"renewTime"`
	LeaseTransitions int32     `json:"leaseTransitions"`
}

// Observed is the lock as read: its record and the generation a write must
// match to replace it.
type Observed struct {
	Record
	Generation int64
}

// Lock is the global lock of one MultiClusterLease.
type Lock struct {
	object *storage.ObjectHandle
	name   string
	// writes counts the writes sent (the load the measurements report:
	// GCS accepts about one write per second per object).
	writes atomic.Int64
}

// Writes is the number of writes sent to the lock object so far.
func (l *Lock) Writes() int64 { return l.writes.Load() }

// ObjectName is where the lock of the MultiClusterLease key
// ("<namespace>/<name>") lives in the bucket.
func ObjectName(key string) string { return "leases/" + key }

// New returns the lock of the MultiClusterLease key in bucket.
func New(client *storage.Client, bucket, key string) *Lock {
	name := ObjectName(key)
	return &Lock{object: client.Bucket(bucket).Object(name), name: name}
}

// ErrNotFound is returned by Read when nobody has created the lock yet.
var ErrNotFound = storage.ErrObjectNotExist

// Read returns the lock's record and generation, both from one response so
// that they belong together.
func (l *Lock) Read(ctx context.Context) (Observed, error) {
	r, err := l.object.NewReader(ctx)
	if err != nil {
		if errors.Is(err, storage.ErrObjectNotExist) {
			return Observed{}, err
		}
		return Observed{}, fmt.Errorf("reading lock %s: %w", l.name, err)
	}
	defer r.Close()
	content, err := io.ReadAll(r)
	if err != nil {
		return Observed{}, fmt.Errorf("reading lock %s: %w", l.name, err)
	}
	o := Observed{Generation: r.Attrs.Generation}
	if len(content) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(content, &o.Record); err != nil {
		return Observed{}, fmt.Errorf("lock %s holds no lock record: %w", l.name, err)
	}
	return o, nil
}

// Create writes the lock when it does not exist yet.
func (l *Lock) Create(ctx context.Context, rec Record) (Observed, error) {
	return l.write(ctx, storage.Conditions{DoesNotExist: true}, rec)
}

// Update replaces the lock when its generation is still generation.
func (l *Lock) Update(ctx context.Context, rec Record, generation int64) (Observed, error) {
	return l.write(ctx, storage.Conditions{GenerationMatch: generation}, rec)
}

func (l *Lock) write(ctx context.Context, cond storage.Conditions, rec Record) (Observed, error) {
	content, err := json.Marshal(rec)
	if err != nil {
		return Observed{}, err
	}
	l.writes.Add(1)
	w := l.object.If(cond).NewWriter(ctx)
	w.ContentType = "application/json"
	w.CacheControl = "no-cache, no-store, must-revalidate"
	if _, err := w.Write(content); err != nil {
		_ = w.Close()
		return Observed{}, fmt.Errorf("writing lock %s: %w", l.name, err)
	}
	if err := w.Close(); err != nil {
		return Observed{}, fmt.Errorf("writing lock %s: %w", l.name, err)
	}
	return Observed{Record: rec, Generation: w.Attrs().Generation}, nil
}

// IsLostRace reports whether err is a write refused because another writer
// changed (or created) the lock first: GCS answers 412 to a failed
// generation precondition (409 in some paths).
func IsLostRace(err error) bool {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return gerr.Code == http.StatusPreconditionFailed || gerr.Code == http.StatusConflict
	}
	return false
}

// Result is the outcome of one AcquireOrRenew.
type Result struct {
	// Acquired is true when candidate holds the lock after the call.
	Acquired bool
	// Lock is the lock as it stands: the written record when Acquired, else
	// the record of whoever holds it.
	Lock Observed
}

// AcquireOrRenew takes the lock for candidate, or renews it, when candidate
// already holds it or its holder has not renewed it for leaseDuration;
// otherwise it reports the holder. now is the controller's clock.
func (l *Lock) AcquireOrRenew(ctx context.Context, candidate string, leaseDuration time.Duration, now func() time.Time) (Result, error) {
	cur, err := l.Read(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		created, cerr := l.Create(ctx, Record{HolderIdentity: candidate, RenewTime: now(), LeaseTransitions: 1})
		if cerr == nil {
			return Result{Acquired: true, Lock: created}, nil
		}
		if !IsLostRace(cerr) {
			return Result{}, cerr
		}
		// Another controller created it first: judge its record.
		cur, err = l.Read(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	expired := now().Sub(cur.RenewTime) > leaseDuration
	if cur.HolderIdentity != candidate && !expired {
		return Result{Lock: cur}, nil
	}
	next := cur.Record
	if next.HolderIdentity != candidate && next.HolderIdentity != "" {
		next.LeaseTransitions++
	}
	next.HolderIdentity = candidate
	next.RenewTime = now()
	written, err := l.Update(ctx, next, cur.Generation)
	if err == nil {
		return Result{Acquired: true, Lock: written}, nil
	}
	if !IsLostRace(err) {
		return Result{}, err
	}
	// Lost the race to another writer: report what it wrote.
	latest, rerr := l.Read(ctx)
	if rerr != nil {
		return Result{}, rerr
	}
	return Result{Lock: latest}, nil
}
