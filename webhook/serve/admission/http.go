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
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
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

// handler is the HTTP side of a webhook, in front of controller-runtime's
// admission.Webhook: it reads the review (bounded in size and time, strict
// in its JSON), hands the request to the Webhook's Handle and writes the
// AdmissionReview response. It does not use the Webhook's own ServeHTTP,
// because leaseguard must read differently:
//   - reviews up to MaxReviewBytes (32 MiB): the largest lease the API
//     server stores makes an 18 MB review, and refusing it at
//     controller-runtime's 7 MiB would leave that lease with nobody able
//     to repair it;
//   - a 413 that carries the request's UID, read from the first bytes
//     (without it the API server treats the answer as the webhook's
//     failure);
//   - the large bodies' memory shared under bodyBudget, and a busy answer
//     (503) where there is no room;
//   - the review decoded as the API machinery decodes it, duplicate keys
//     refused (sigs.k8s.io/json).
type handler struct {
	wh *cradmission.Webhook
	unreadable
}

// newHandler serves h behind controller-runtime's Webhook. A panic is not
// recovered into an answer: controller-runtime would deny the write with a
// 500, which on the fail-open webhooks would refuse renewals; net/http
// drops the connection instead, and the API server applies the webhook's
// failurePolicy. No logger per request: the handlers log their decisions.
func newHandler(h cradmission.Handler, u unreadable) *handler {
	wh := &cradmission.Webhook{
		Handler:        h,
		LogConstructor: func(base logr.Logger, _ *cradmission.Request) logr.Logger { return base },
	}
	wh.WithRecoverPanic(false)
	return &handler{wh: wh, unreadable: u}
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
	resp, busy := h.answer(r)
	// The budgets were given back before writing: a client that does not
	// read its answer holds only its connection, for answerWriteTimeout.
	_ = rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout))
	if busy != nil {
		// No room to decide is the webhook failing, not a verdict: the
		// API server applies the configuration's failurePolicy (the
		// holder's plain renewals pass, identity changes are refused).
		// No Retry-After: the API server's client would retry until the
		// webhook's timeout instead of failing at once.
		http.Error(w, "leaseguard: "+busy.Error(), http.StatusServiceUnavailable)
		return
	}
	h.write(w, resp)
}

// answer reads, checks and decides a review within the budgets, which it
// gives back when it returns; or says it found no room (busy).
func (h *handler) answer(r *http.Request) (resp cradmission.Response, busy error) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return h.unreadable.answer("", http.StatusUnsupportedMediaType, fmt.Errorf("content type %q, want application/json", oneline.Clip(r.Header.Get("Content-Type"))), "unreadable"), nil
	}
	var held bodyReservation
	defer held.release()
	body, err := h.readBody(r, &held)
	if err != nil {
		var big *tooLarge
		var noRoom *bodyBusy
		switch {
		case errors.As(err, &big):
			return h.unreadable.answer(big.uid, http.StatusRequestEntityTooLarge, err, "too_large"), nil
		case errors.As(err, &noRoom):
			h.metrics.BadRequest(h.webhook(), "busy")
			h.log.Info("no room to read an admission request", "error", err.Error())
			return resp, err
		}
		return h.unreadable.answer("", http.StatusBadRequest, err, "unreadable"), nil
	}
	h.metrics.ReviewSize(h.webhook(), len(body))
	review, err := decodeReview(body)
	if err != nil {
		return h.unreadable.answer(scanUID(body[:min(len(body), headBytes)]), http.StatusBadRequest, err, "unreadable"), nil
	}
	if review.err != nil {
		return h.unreadable.answer(string(review.request.UID), http.StatusBadRequest, review.err, "unreadable"), nil
	}
	return h.wh.Handle(r.Context(), cradmission.Request{AdmissionRequest: *review.request}), nil
}

// unreadable answers a review, or a request in it, that leaseguard could
// not read: denied where the webhook refuses what it cannot read (the
// validating ones), allowed where it leaves that to them (the mutating
// one); counted and logged, with the UID when it is known. Without a UID
// the API server cannot match the answer and treats it as the webhook's
// failure.
type unreadable struct {
	webhookName string
	refuse      bool
	metrics     *metrics.Recorder
	log         logr.Logger
}

// webhook names the webhook in metrics.
func (u unreadable) webhook() string { return u.webhookName }

func (u unreadable) answer(uid string, code int32, err error, reason string) cradmission.Response {
	u.metrics.BadRequest(u.webhook(), reason)
	resp := cradmission.Allowed("")
	if u.refuse {
		refusal := badRequest(err)
		u.log.Info("refused unreadable admission request", "uid", oneline.Clip(uid), "reason", reason, "error", refusal.Error())
		resp = cradmission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Result: failure(code, refusal)}}
	}
	resp.UID = types.UID(uid)
	return resp
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

// write sends the AdmissionReview response; the Webhook's Handle has set
// its UID and encoded its patch (Response.Complete), an unread review's
// answer carries the UID it could find.
func (h *handler) write(w http.ResponseWriter, resp cradmission.Response) {
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Response: &resp.AdmissionResponse,
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		h.log.Error(err, "writing the admission response", "uid", resp.UID)
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
