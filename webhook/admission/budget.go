package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fastjson"
	"golang.org/x/sync/semaphore"

	"github.com/leaseguard/leaseguard/webhook/leaseobject"
)

// What a review costs leaseguard's memory is fastjson's parse tree, not the
// body: about 400 to 480 bytes per JSON item (measured: a 2 MiB body of
// `[0,0,0,...]` holds 410 MiB while it is read; an object of a quarter of a
// million short keys, 112 MiB for 3 MiB). A body of a few MiB could
// therefore take more than a replica's memory limit (256 Mi). So reviews
// are bounded by the items they hold, not only by their bytes: counted in
// one pass before parsing, refused past MaxReviewItems, and read only
// within a budget shared by the reviews being read at once. The budget has
// two lanes, so that the small reviews of lease writes never queue behind
// large ones.

// MaxReviewItems is the most JSON items (values and object keys) leaseguard
// reads in one AdmissionReview: 40 to 50 MiB of parse tree. A lease write's
// review holds a few hundred (its object, the stored object, managedFields);
// only an object stuffed with tens of thousands of labels or annotations
// comes near it, and such an object is no lease.
const MaxReviewItems = 100_000

// MaxObjectItems is the most JSON items a written object may hold: under
// half of MaxReviewItems, so that every later write of it (a review
// carrying it twice, as object and oldObject, and its own fields) is one
// leaseguard reads. Without it a lease could be created that no one could
// then update.
const MaxObjectItems = leaseobject.MaxObjectItems

// uncountedBytes is the body size up to which the items are not counted:
// a body holds at most one item per byte (plus one), so such a body takes
// its size from the small lane, and the lease writes the API server sends
// every second cost no extra pass.
const uncountedBytes = 16 << 10

// The lanes, in items: the small one for bodies up to uncountedBytes
// (dozens of lease reviews at once, about 30 MiB at most), the large one
// for the rest (one of the largest and more, about 70 MiB). With the bodies'
// own budget (48 MiB, http.go) a replica stays within its 256 Mi.
const (
	smallLaneItems = 60_000
	largeLaneItems = 3 * MaxReviewItems / 2
)

// bytesPerItem prices a large body's bytes in items: what the body, its
// copies and the strings read from it cost beside the parse tree.
const bytesPerItem = 64

// parseBudgetWait is how long a review waits for room in its lane before
// it is refused (a variable for the tests).
var parseBudgetWait = time.Second

var (
	smallLane = semaphore.NewWeighted(smallLaneItems)
	largeLane = semaphore.NewWeighted(largeLaneItems)
)

// tooManyItems is a review holding more than MaxReviewItems.
type tooManyItems struct{ items int }

func (e *tooManyItems) Error() string {
	return fmt.Sprintf("AdmissionReview holds %d JSON values and keys, more than leaseguard reads (%d): a lease write's review holds a few hundred",
		e.items, MaxReviewItems)
}

// objectTooLarge is a written object holding more than MaxObjectItems.
type objectTooLarge struct{ items int }

func (e *objectTooLarge) Error() string {
	return fmt.Sprintf("request.object holds %d JSON values and keys, more than leaseguard admits in one lease (%d): "+
		"every later write of it would be a review larger than leaseguard reads", e.items, MaxObjectItems)
}

// valueItems counts the items of a parsed value as countItems counts them
// in text (an empty array or object counts one too many).
func valueItems(v *fastjson.Value) int {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		n := 1
		if o.Len() == 0 {
			n++
		}
		o.Visit(func(_ []byte, child *fastjson.Value) { n += 1 + valueItems(child) })
		return n
	case fastjson.TypeArray:
		items, _ := v.Array()
		n := 1
		if len(items) == 0 {
			n++
		}
		for _, item := range items {
			n += valueItems(item)
		}
		return n
	}
	return 1
}

// parseBusy is a review that found no room in its lane in time.
type parseBusy struct{ items int }

func (e *parseBusy) Error() string {
	return fmt.Sprintf("too many AdmissionReviews being read at once (this one holds %d JSON values and keys); try again", e.items)
}

// checkItems refuses a body holding more than MaxReviewItems.
func checkItems(body []byte) error {
	if len(body) < MaxReviewItems {
		return nil // at most one item per byte
	}
	if n := countItems(body); n > MaxReviewItems {
		return &tooManyItems{items: n}
	}
	return nil
}

// parseWithinBudget is ParseReview within the budget: a small body takes
// its size from the small lane; a larger one is checked and counted first
// (refused at once past MaxReviewItems), then takes its items and its bytes'
// worth from the large lane. The caller gives the room back with release
// once it has answered: what was read from the body lives until then.
func parseWithinBudget(ctx context.Context, body []byte, now time.Time) (_ *Review, release func(), _ error) {
	if len(body) <= uncountedBytes {
		return parseInLane(ctx, smallLane, len(body)+1, len(body)+1, func() (*Review, error) { return ParseReview(body, now) })
	}
	if !json.Valid(body) {
		return nil, nil, notJSON(body)
	}
	items := countItems(body)
	if items > MaxReviewItems {
		return nil, nil, &tooManyItems{items: items}
	}
	return parseInLane(ctx, largeLane, min(items+len(body)/bytesPerItem, largeLaneItems), items,
		func() (*Review, error) { return parseValid(body, now) })
}

// parseInLane parses with weight taken from lane, kept on success (the
// caller releases it once it has answered) and given back on failure.
func parseInLane(ctx context.Context, lane *semaphore.Weighted, weight, items int, parse func() (*Review, error)) (*Review, func(), error) {
	release, err := takeLane(ctx, lane, weight, items)
	if err != nil {
		return nil, nil, err
	}
	r, err := parse()
	if err != nil {
		release()
		return nil, nil, err
	}
	return r, release, nil
}

// takeLane waits for weight in lane and returns what gives it back.
func takeLane(ctx context.Context, lane *semaphore.Weighted, weight, items int) (release func(), err error) {
	w := int64(weight)
	if lane.TryAcquire(w) {
		return func() { lane.Release(w) }, nil
	}
	ctx, cancel := context.WithTimeout(ctx, parseBudgetWait)
	defer cancel()
	if err := lane.Acquire(ctx, w); err != nil {
		return nil, &parseBusy{items: items}
	}
	return func() { lane.Release(w) }, nil
}

func countItems(body []byte) int { return leaseobject.CountItems(body) }
