package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/metrics"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// MaxReviewBytes is the largest AdmissionReview leaseguard reads. The API
// server sends the object and the stored object, each at most what it can
// store: its etcd client sends at most 2 MiB (and etcd's default
// --max-request-bytes is 1.5 MiB), and the AdmissionReview's JSON escapes
// '<', '>', '&' and control characters as six bytes ("\u003c"). So a write
// the API server can store makes a review of at most 2 × 6 × 2 MiB = 24 MiB
// plus a little; measured: a Lease holding 1,550,000 '<' (the most etcd
// stores) updated by another such makes an 18.3 MB review. A larger review
// is refused (never admitted, never read whole), with the UID read from its
// first bytes, where the API server writes it.
const MaxReviewBytes = 32 << 20

// smallBodyBytes is where a review stops being one of the small ones that
// every lease write makes. The bytes of larger bodies being read and
// decided at once are bounded by bodyBudget (a large body that finds no
// room within largeReviewWait is refused), so that many connections each
// sending a large body cannot run leaseguard out of memory. Decoding holds
// the body's size again at most (the objects' raw copies; everything else
// leaseguard reads is a few fields), so a review costs about twice its size
// while it is decided.
const smallBodyBytes = 64 << 10

// bodyBudgetBytes is the room for large bodies: one of the largest the API
// server sends and more besides.
const bodyBudgetBytes = 48 << 20

var bodyBudget = semaphore.NewWeighted(bodyBudgetBytes)

// largeReviewWait is how long a large body waits for room (a variable for
// the tests).
var largeReviewWait = time.Second

// bodyReadTimeout bounds the time a review's body takes to arrive.
const bodyReadTimeout = 30 * time.Second

// answerWriteTimeout bounds the time an answer takes to leave.
const answerWriteTimeout = 10 * time.Second

// headBytes is how much of an oversized review is scanned for its UID.
const headBytes = 64 << 10

// decider answers one readable review.
type decider interface {
	decide(r *Review) Answer
	webhook() string
	refusesUnreadable() bool
}

// Answer is a webhook's answer to one review.
type Answer struct {
	Allowed  bool
	Status   *metav1.Status
	Warnings []string
	// Patch is a JSONPatch for the mutating webhook.
	Patch []byte
}

// handler is the HTTP side of a webhook: it reads the review, bounded in
// size, lets the decider answer and writes the AdmissionReview response.
type handler struct {
	d       decider
	metrics *metrics.Recorder
	log     logr.Logger
	now     func() time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "leaseguard: admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	rc := http.NewResponseController(w)
	// A client that sends its body slowly holds a goroutine and what it
	// sent: it has bodyReadTimeout for all of it. (The API server gives up
	// on a webhook after its timeout, at most 30 s.) Not every
	// ResponseWriter can set it; the server's own can.
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	o := h.answer(r)
	// The budgets were given back before writing: a client that does not
	// read its answer holds only its connection, for answerWriteTimeout.
	_ = rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout))
	if o.busy != nil {
		// No room to decide is the webhook failing, not a verdict: the
		// API server applies the configuration's failurePolicy (the
		// holder's plain renewals pass, identity changes are refused).
		// No Retry-After: the API server's client would retry until the
		// webhook's timeout instead of failing at once.
		http.Error(w, "leaseguard: "+o.busy.Error(), http.StatusServiceUnavailable)
		return
	}
	h.write(w, o.uid, o.answer)
}

// outcome is what a review is answered: an AdmissionResponse, or busy.
type outcome struct {
	uid    string
	answer Answer
	busy   error
}

// answer reads, checks and decides a review within the budgets, which it
// gives back when it returns.
func (h *handler) answer(r *http.Request) outcome {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return h.refuseUnread("", http.StatusUnsupportedMediaType, fmt.Errorf("content type %q, want application/json", policy.Clip(r.Header.Get("Content-Type"))), "unreadable")
	}
	var held bodyReservation
	defer held.release()
	body, err := h.readBody(r, &held)
	if err != nil {
		var big *tooLarge
		var busy *bodyBusy
		switch {
		case errors.As(err, &big):
			return h.refuseUnread(big.uid, http.StatusRequestEntityTooLarge, err, "too_large")
		case errors.As(err, &busy):
			return h.busy(err)
		}
		return h.refuseUnread("", http.StatusBadRequest, err, "unreadable")
	}
	h.metrics.ReviewSize(h.d.webhook(), len(body))
	now := time.Now()
	if h.now != nil {
		now = h.now()
	}
	review, err := ParseReview(body, now)
	if err != nil {
		return h.refuseUnread(scanUID(body[:min(len(body), headBytes)]), http.StatusBadRequest, err, "unreadable")
	}
	if review.Err != nil {
		return h.refuseUnread(review.UID, http.StatusBadRequest, review.Err, "unreadable")
	}
	return outcome{uid: review.UID, answer: h.d.decide(review)}
}

// busy counts and logs a review refused for want of room.
func (h *handler) busy(err error) outcome {
	h.metrics.BadRequest(h.d.webhook(), "busy")
	h.log.Info("no room to read an admission request", "error", err.Error())
	return outcome{busy: err}
}

// bodyReservation is the room a large body holds in bodyBudget, taken as
// its bytes arrive: a client that declares a large body and sends nothing
// holds nothing.
type bodyReservation struct{ held int64 }

// grow takes n more bytes of room, waiting at most largeReviewWait. It
// never waits while holding room: large bodies read at once would each
// hold part of the budget and wait for the rest, and all be refused. So
// when the room is not there at once, it gives back what it holds and
// waits for the whole.
func (b *bodyReservation) grow(ctx context.Context, n int64) error {
	if bodyBudget.TryAcquire(n) {
		b.held += n
		return nil
	}
	total := b.held + n
	b.release()
	ctx, cancel := context.WithTimeout(ctx, largeReviewWait)
	defer cancel()
	if err := bodyBudget.Acquire(ctx, total); err != nil {
		return &bodyBusy{}
	}
	b.held = total
	return nil
}

func (b *bodyReservation) release() {
	if b.held > 0 {
		bodyBudget.Release(b.held)
		b.held = 0
	}
}

// bodyBusy is a large body that found no room in bodyBudget in time.
type bodyBusy struct{}

func (*bodyBusy) Error() string {
	return "too many large AdmissionReviews being read at once; try again"
}

// tooLarge is a review larger than MaxReviewBytes.
type tooLarge struct {
	size int64
	uid  string
}

func (e *tooLarge) Error() string {
	size := "more than " + byteSize(MaxReviewBytes)
	if e.size > 0 {
		size = byteSize(e.size)
	}
	return "AdmissionReview of " + size + " is larger than leaseguard reads (" + byteSize(MaxReviewBytes) +
		"): no lease the API server can store is that large"
}

// readBody reads the whole review, up to MaxReviewBytes. The buffer grows
// with the bytes that arrive, to the declared length at most: a client that
// declares a large body and sends nothing holds almost nothing, and the body
// read is held once, not in a buffer twice its size.
func (h *handler) readBody(r *http.Request, held *bodyReservation) ([]byte, error) {
	if r.ContentLength > MaxReviewBytes {
		return nil, &tooLarge{size: r.ContentLength, uid: readUID(r.Body)}
	}
	limit := int64(MaxReviewBytes + 1)
	if r.ContentLength >= 0 {
		limit = r.ContentLength
	}
	buf := make([]byte, 0, min(limit, initialBodyBuffer))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				break
			}
			size := min(int64(2*cap(buf)), limit)
			if size > smallBodyBytes {
				// Past the small bodies every lease write makes, the
				// room is taken from bodyBudget as the body grows.
				if err := held.grow(r.Context(), size-smallBodyBytes-held.held); err != nil {
					return nil, err
				}
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
	}
	if len(buf) > MaxReviewBytes {
		return nil, &tooLarge{uid: scanUID(buf[:headBytes])}
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("request body is empty")
	}
	return buf, nil
}

// initialBodyBuffer is the buffer a body is first read into: a lease
// write's review fits.
const initialBodyBuffer = 32 << 10

// readUID reads the first bytes of a body for its UID.
func readUID(body io.Reader) string {
	head, _ := io.ReadAll(io.LimitReader(body, headBytes))
	return scanUID(head)
}

// scanUID finds request.uid in the first bytes of a review, token by token,
// without reading the rest: the API server writes kind, apiVersion, then the
// request, whose first field is its uid.
func scanUID(head []byte) string {
	type frame struct {
		object, wantKey bool
		key             string
	}
	dec := json.NewDecoder(bytes.NewReader(head))
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		n := len(stack)
		if s, ok := tok.(string); ok && n > 0 && stack[n-1].object && stack[n-1].wantKey {
			stack[n-1].key, stack[n-1].wantKey = s, false
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
				continue
			case '[':
				stack = append(stack, frame{})
				continue
			default:
				stack = stack[:n-1]
			}
		case string:
			if n == 2 && stack[0].key == "request" && stack[1].key == "uid" {
				if len(t) > maxUIDBytes {
					return ""
				}
				return t
			}
		}
		// A value ended: its object wants the next key.
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
}

// refuseUnread answers a review leaseguard could not read: denied, counted,
// logged, with the UID when it is known. Without a UID the API server cannot
// match the answer and treats it as the webhook's failure.
func (h *handler) refuseUnread(uid string, code int32, err error, reason string) outcome {
	h.metrics.BadRequest(h.d.webhook(), reason)
	if !h.d.refusesUnreadable() {
		return outcome{uid: uid, answer: Answer{Allowed: true}}
	}
	refusal := badRequest(err)
	h.log.Info("refused unreadable admission request", "uid", policy.Clip(uid), "reason", reason, "error", refusal.Error())
	return outcome{uid: uid, answer: Answer{Status: failure(code, refusal)}}
}

func failure(code int32, err error) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reasonFor(code), Message: err.Error()}
}

func reasonFor(code int32) metav1.StatusReason {
	switch code {
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusUnsupportedMediaType:
		return metav1.StatusReasonUnsupportedMediaType
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	}
	return metav1.StatusReasonForbidden
}

// badRequest prefixes an unreadable-request error so the client sees who
// refused its write and why.
// The message is bounded whatever the error quotes.
func badRequest(err error) error {
	return errors.New(clipText("leaseguard: cannot decide: "+err.Error(), maxErrorText+256))
}

// clipText cuts s to n bytes, on a character boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// reviewResponse is the AdmissionReview leaseguard answers with.
type reviewResponse struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Response   responsePayload `json:"response"`
}

type responsePayload struct {
	UID       string         `json:"uid"`
	Allowed   bool           `json:"allowed"`
	Status    *metav1.Status `json:"status,omitempty"`
	Warnings  []string       `json:"warnings,omitempty"`
	PatchType string         `json:"patchType,omitempty"`
	Patch     []byte         `json:"patch,omitempty"`
}

func (h *handler) write(w http.ResponseWriter, uid string, a Answer) {
	out := reviewResponse{APIVersion: reviewAPIVersion, Kind: reviewKind, Response: responsePayload{
		UID: uid, Allowed: a.Allowed, Status: a.Status, Warnings: a.Warnings, Patch: a.Patch,
	}}
	if len(a.Patch) > 0 {
		out.Response.PatchType = "JSONPatch"
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		h.log.Error(err, "writing the admission response", "uid", uid)
	}
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// verdictPast names a verdict in a log line.
func verdictPast(v policy.Verdict) string {
	switch v {
	case policy.Deny:
		return "denied"
	case policy.Warn:
		return "admitted with warning"
	case policy.Audit:
		return "admitted (audit)"
	}
	return "admitted"
}
