package gcslock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/multicluster/gcsemulator"
	"github.com/leaseguard/leaseguard/test/multicluster/gcslock"
)

const leaseDuration = 8 * time.Second

// clock is a settable clock shared by the contenders of a test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newLocks(t *testing.T, n int) []*gcslock.Lock {
	t.Helper()
	srv, err := gcsemulator.Start("leaseguard-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	var locks []*gcslock.Lock
	for range n {
		client, err := srv.NewClient(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		locks = append(locks, gcslock.New(client, srv.Bucket, "cnrm-system/kcc-leader"))
	}
	return locks
}

func TestAcquireRenewAndTakeOverAfterExpiry(t *testing.T) {
	ctx := context.Background()
	locks := newLocks(t, 2)
	a, b := locks[0], locks[1]
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

	if _, err := a.Read(ctx); !errors.Is(err, gcslock.ErrNotFound) {
		t.Fatalf("read before anyone wrote: got %v, want not found", err)
	}
	res, err := a.AcquireOrRenew(ctx, "cluster-a", leaseDuration, clk.Now)
	if err != nil || !res.Acquired || res.Lock.HolderIdentity != "cluster-a" || res.Lock.LeaseTransitions != 1 {
		t.Fatalf("first acquisition: %+v, %v; want cluster-a acquired with 1 transition", res, err)
	}
	firstGen := res.Lock.Generation

	clk.Advance(leaseDuration)
	res, err = b.AcquireOrRenew(ctx, "cluster-b", leaseDuration, clk.Now)
	if err != nil || res.Acquired || res.Lock.HolderIdentity != "cluster-a" {
		t.Fatalf("cluster-b while the lock is exactly lease-duration old: %+v, %v; want cluster-a still holding", res, err)
	}

	clk.Advance(time.Second)
	res, err = a.AcquireOrRenew(ctx, "cluster-a", leaseDuration, clk.Now)
	if err != nil || !res.Acquired || res.Lock.LeaseTransitions != 1 || res.Lock.Generation == firstGen {
		t.Fatalf("renewal by the holder, even late: %+v, %v; want acquired, same transitions, new generation", res, err)
	}
	if !res.Lock.RenewTime.Equal(clk.Now()) {
		t.Fatalf("renewal wrote renewTime %s, want %s", res.Lock.RenewTime, clk.Now())
	}

	clk.Advance(leaseDuration + time.Millisecond)
	res, err = b.AcquireOrRenew(ctx, "cluster-b", leaseDuration, clk.Now)
	if err != nil || !res.Acquired || res.Lock.HolderIdentity != "cluster-b" || res.Lock.LeaseTransitions != 2 {
		t.Fatalf("takeover of an expired lock: %+v, %v; want cluster-b with 2 transitions", res, err)
	}
	got, err := a.Read(ctx)
	if err != nil || got.Record != res.Lock.Record || got.Generation != res.Lock.Generation {
		t.Fatalf("read after takeover: %+v, %v; want %+v", got, err, res.Lock)
	}
}

func TestStaleGenerationIsRefused(t *testing.T) {
	ctx := context.Background()
	locks := newLocks(t, 2)
	a, b := locks[0], locks[1]
	now := time.Now().UTC()

	created, err := a.Create(ctx, gcslock.Record{HolderIdentity: "cluster-a", RenewTime: now, LeaseTransitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, gcslock.Record{HolderIdentity: "cluster-b", RenewTime: now, LeaseTransitions: 1}); !gcslock.IsLostRace(err) {
		t.Fatalf("second create: got %v, want a lost race (412)", err)
	}
	if _, err := a.Update(ctx, gcslock.Record{HolderIdentity: "cluster-a", RenewTime: now.Add(time.Second), LeaseTransitions: 1}, created.Generation); err != nil {
		t.Fatal(err)
	}
	_, err = b.Update(ctx, gcslock.Record{HolderIdentity: "cluster-b", RenewTime: now, LeaseTransitions: 2}, created.Generation)
	if !gcslock.IsLostRace(err) {
		t.Fatalf("update with a generation already replaced: got %v, want a lost race (412)", err)
	}
	got, err := b.Read(ctx)
	if err != nil || got.HolderIdentity != "cluster-a" {
		t.Fatalf("after the refused update the lock is %+v (%v), want cluster-a's", got, err)
	}
}

// Controllers of several clusters racing for an expired lock: exactly one
// wins each round, the others see the winner.
func TestRacingContendersElectExactlyOne(t *testing.T) {
	ctx := context.Background()
	const contenders, rounds = 4, 10
	locks := newLocks(t, contenders)
	clk := &clock{now: time.Now().UTC()}
	names := []string{"cluster-a", "cluster-b", "cluster-c", "cluster-d"}
	var lastTransitions int32
	for round := range rounds {
		results := make([]gcslock.Result, contenders)
		errs := make([]error, contenders)
		var wg sync.WaitGroup
		for i := range contenders {
			wg.Go(func() {
				results[i], errs[i] = locks[i].AcquireOrRenew(ctx, names[i], leaseDuration, clk.Now)
			})
		}
		wg.Wait()
		winners := 0
		var winner string
		for i := range contenders {
			if errs[i] != nil {
				t.Fatalf("round %d, %s: %v", round, names[i], errs[i])
			}
			if results[i].Acquired {
				winners++
				winner = names[i]
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d contenders acquired the lock, want exactly 1: %+v", round, winners, results)
		}
		for i := range contenders {
			if results[i].Lock.HolderIdentity != winner {
				t.Fatalf("round %d: %s sees holder %q, the winner is %s", round, names[i], results[i].Lock.HolderIdentity, winner)
			}
		}
		got, err := locks[0].Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if round > 0 && got.LeaseTransitions != lastTransitions && got.LeaseTransitions != lastTransitions+1 {
			t.Fatalf("round %d: transitions went from %d to %d", round, lastTransitions, got.LeaseTransitions)
		}
		lastTransitions = got.LeaseTransitions
		clk.Advance(leaseDuration + time.Second)
	}
}
