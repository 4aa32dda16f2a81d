package admission

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/semaphore"
)

// What a review costs leaseguard's memory is fastjson's parse tree, not the
// body: about 410 bytes per JSON item (measured: a 2 MiB body of
// `[0,0,0,...]` holds 410 MiB while it is read; an object of a quarter of a
// million short keys, 112 MiB for 3 MiB). A body of a few MiB could
// therefore take more than a replica's memory limit (256 Mi). So reviews
// are bounded by the items they hold, not only by their bytes: counted in
// one pass before parsing, refused past MaxReviewItems, and read only
// within a budget shared by the reviews being read at once.

// MaxReviewItems is the most JSON items (values and object keys) leaseguard
// reads in one AdmissionReview: about 60 MiB of parse tree. A lease write's
// review holds a few hundred (its object, the stored object, managedFields);
// only an object stuffed with tens of thousands of labels or annotations
// comes near it, and such an object is no lease.
const MaxReviewItems = 150_000

// parseBudgetItems is how many items the reviews being read at once may
// hold together (about 120 MiB of parse tree): two of the largest, or
// hundreds of ordinary ones.
const parseBudgetItems = 2 * MaxReviewItems

// uncountedBytes is the body size up to which the items are not counted:
// a body holds at most one item per byte (plus one), so such a body takes
// its size from the budget, and the lease writes the API server sends every
// second cost no extra pass.
const uncountedBytes = 16 << 10

// parseBudgetWait is how long a review waits for room in the budget before
// it is refused.
const parseBudgetWait = time.Second

var parseBudget = semaphore.NewWeighted(parseBudgetItems)

// tooManyItems is a review holding more than MaxReviewItems.
type tooManyItems struct{ items int }

func (e *tooManyItems) Error() string {
	return fmt.Sprintf("AdmissionReview holds %d JSON values and keys, more than leaseguard reads (%d): a lease write's review holds a few hundred",
		e.items, MaxReviewItems)
}

// parseBusy is a review that found no room in the parse budget in time.
type parseBusy struct{ items int }

func (e *parseBusy) Error() string {
	return fmt.Sprintf("too many large AdmissionReviews at once (this one holds %d JSON values and keys); try again", e.items)
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

// reviewWeight is what reading body takes from the budget: its items,
// bounded above by its size for small bodies, which are not counted.
func reviewWeight(body []byte) int {
	if len(body) <= uncountedBytes {
		return len(body) + 1
	}
	return countItems(body)
}

// takeParseBudget waits for room to read a review of the given weight and
// returns what gives it back. A review larger than the whole budget takes
// all of it (ParseReview refuses it anyway, after counting).
func takeParseBudget(ctx context.Context, weight int) (release func(), err error) {
	w := int64(min(weight, parseBudgetItems))
	if parseBudget.TryAcquire(w) {
		return func() { parseBudget.Release(w) }, nil
	}
	ctx, cancel := context.WithTimeout(ctx, parseBudgetWait)
	defer cancel()
	if err := parseBudget.Acquire(ctx, w); err != nil {
		return nil, &parseBusy{items: weight}
	}
	return func() { parseBudget.Release(w) }, nil
}

// countItems counts the JSON items of a valid JSON body: every array and
// object, every value in them and every key. That is the root plus one per
// '[', '{', ',' and ':' outside strings (an empty array or object counts
// one too many, which its parse tree costs anyway). Linear, no allocation.
func countItems(body []byte) int {
	n, inString := 1, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte; \uXXXX's digits need no care
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{', ',', ':':
			n++
		}
	}
	return n
}
