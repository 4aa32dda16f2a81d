package vap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mcl "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// corpusFile is testdata/policy-cases.json, written from the policy core's
// table cases by webhook/decision/policy's TestVAPCorpusIsCurrent.
type corpusFile struct {
	Policy string
	Cases  []corpusCase
}

type corpusCase struct {
	Name    string
	Request leaseobject.Request
	Want    string
}

func loadCorpus(path string) (*corpusFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c corpusFile
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// corpusNamespaces are the namespaces of the corpus: those its policy's
// rules select and those of its cases.
func corpusNamespaces() []string {
	seen := map[string]bool{}
	for _, r := range pol.Rules {
		for _, ns := range r.View().Namespaces {
			seen[ns] = true
		}
	}
	for _, c := range corpus.Cases {
		if o := objectOf(&c.Request); o != nil {
			seen[o.Namespace] = true
		}
	}
	var out []string
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// fixture is the identity that stores the "old" objects: a kube-system
// service account, which neither leaseguard's webhooks nor its policies are
// ever called for (docs/design.md §5).
var fixture = leaseobject.Caller{Username: "system:serviceaccount:kube-system:leaseguard-fixture"}

const (
	fixtureManager = "leaseguard-fixture"
	renewerManager = "leaseguard-fixture-renewer"
	writeManager   = "leaseguard-parity"
	parityLabel    = "parity.leaseguard.io/write"
)

// env is one API server under test.
type env struct {
	name    string
	cp      *controlplane.ControlPlane
	admin   kubernetes.Interface
	clients map[string]*http.Client
}

func newEnv(name string, cp *controlplane.ControlPlane) (*env, error) {
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	return &env{name: name, cp: cp, admin: admin, clients: map[string]*http.Client{}}, nil
}

func (e *env) createNamespaces(ctx context.Context, names []string) error {
	for _, ns := range names {
		_, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// waitUntilEnforced waits until the API server applies every policy: a
// stranger's dry-run create of a lease each rule selects is refused (or
// warned about, under warn). Audit rules show nothing to a client; they
// were installed with the others.
func (e *env) waitUntilEnforced(ctx context.Context) error {
	stranger := leaseobject.Caller{Username: "user:vap-probe"}
	for _, r := range pol.Rules {
		view := r.View()
		if view.Enforcement == policy.EnforceAudit {
			continue
		}
		for _, res := range view.Resources {
			ns, name := probeTarget(r, res)
			if ns == "" {
				return fmt.Errorf("no lease to probe rule %s with", view.Name)
			}
			obj := apiObject(res, &leaseobject.Object{Namespace: ns, Name: name}, 0)
			body, _ := json.Marshal(obj)
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, err := e.do(ctx, stranger, http.MethodPost, objectPath(res, ns, "", ""), body, url.Values{"dryRun": {"All"}})
				if err != nil {
					return err
				}
				if out.Code == http.StatusForbidden || len(out.guardWarnings()) > 0 {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s: rule %s is not enforced on %s after 60s: HTTP %d %s", e.name, view.Name, res, out.Code, out.Message)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	return nil
}

// probeTarget is a lease the rule itself selects.
func probeTarget(r *policy.Rule, res leaseobject.Resource) (string, string) {
	for _, ns := range r.View().Namespaces {
		for _, name := range append([]string{"probe"}, generatedNames...) {
			if pol.Select(res, ns, name) == r {
				return ns, name
			}
		}
	}
	return "", ""
}

// outcome is what a client sees.
type outcome struct {
	Code     int
	Message  string
	Warnings []string
	Body     map[string]any
}

func (o *outcome) allowed() bool { return o.Code >= 200 && o.Code < 300 }

// guardWarnings are the warnings of leaseguard's webhook or of an
// admission policy (other warnings, the API server's own, are left out).
func (o *outcome) guardWarnings() []string {
	var out []string
	for _, w := range o.Warnings {
		if strings.HasPrefix(w, "leaseguard:") || strings.HasPrefix(w, "Validation failed for ValidatingAdmissionPolicy") {
			out = append(out, w)
		}
	}
	return out
}

// refusal is the guard's own message in a denial: without the API
// server's prefix naming the webhook or the policy and binding.
func (o *outcome) refusal() string {
	for _, sep := range []string{" denied the request: ", " denied request: "} {
		if _, rest, ok := strings.Cut(o.Message, sep); ok {
			return rest
		}
	}
	return o.Message
}

func (e *env) client(caller leaseobject.Caller) (*http.Client, error) {
	key := caller.Username + "\x00" + strings.Join(caller.Groups, ",") + "\x00" + caller.PodName
	if c, ok := e.clients[key]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: caller.Username, Groups: caller.Groups}
	if caller.PodName != "" {
		cfg.Impersonate.Extra = map[string][]string{leaseobject.PodNameExtra: {caller.PodName}}
	}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	e.clients[key] = c
	return c, nil
}

// do sends one request as caller, without client-go's retries, and
// returns what the client sees.
func (e *env) do(ctx context.Context, caller leaseobject.Caller, method, path string, body []byte, query url.Values) (*outcome, error) {
	c, err := e.client(caller)
	if err != nil {
		return nil, err
	}
	u := strings.TrimSuffix(e.cp.Config.Host, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &outcome{Code: resp.StatusCode}
	for _, w := range resp.Header.Values("Warning") {
		out.Warnings = append(out.Warnings, warningText(w))
	}
	var m map[string]any
	if json.Unmarshal(data, &m) == nil {
		if m["kind"] == "Status" {
			out.Message, _ = m["message"].(string)
		} else {
			out.Body = m
		}
	}
	return out, nil
}

// warningText takes the text out of a Warning header: 299 - "text".
func warningText(h string) string {
	if _, rest, ok := strings.Cut(h, " - "); ok {
		if s, err := strconv.Unquote(rest); err == nil {
			return s
		}
		return rest
	}
	return h
}

func objectPath(res leaseobject.Resource, ns, name, sub string) string {
	var p string
	if res == leaseobject.Leases {
		p = "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases"
	} else {
		p = "/apis/" + mcl.Group + "/" + mcl.Version + "/namespaces/" + ns + "/multiclusterleases"
	}
	if name != "" {
		p += "/" + name
	}
	if sub != "" {
		p += "/" + sub
	}
	return p
}

// microTime is how client-go and Config Connector write lease times.
func microTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// apiObject renders the core's normalised object as the API object a
// client writes, its times moved by shift.
func apiObject(res leaseobject.Resource, o *leaseobject.Object, shift time.Duration) map[string]any {
	spec := map[string]any{"holderIdentity": o.Spec.Holder}
	if !o.Spec.RenewTime.IsZero() {
		spec["renewTime"] = microTime(o.Spec.RenewTime.Add(shift))
	}
	if o.Spec.LeaseDuration > 0 {
		spec["leaseDurationSeconds"] = int64(o.Spec.LeaseDuration / time.Second)
	}
	apiVersion, kind := "coordination.k8s.io/v1", "Lease"
	if res == leaseobject.Leases {
		if !o.Spec.AcquireTime.IsZero() {
			spec["acquireTime"] = microTime(o.Spec.AcquireTime.Add(shift))
		}
		spec["leaseTransitions"] = int64(o.Spec.Transitions)
	} else {
		apiVersion, kind = mcl.Group+"/"+mcl.Version, mcl.Kind
		if o.Spec.RenewDeadline > 0 {
			spec["renewDeadlineSeconds"] = int64(o.Spec.RenewDeadline / time.Second)
		}
		if o.Spec.RetryPeriod > 0 {
			spec["retryPeriodSeconds"] = int64(o.Spec.RetryPeriod / time.Second)
		}
	}
	meta := map[string]any{"name": o.Name, "namespace": o.Namespace}
	if l := textMap(o.Labels); len(l) > 0 {
		meta["labels"] = l
	}
	annotations := textMap(o.Annotations)
	if o.HasDesignation {
		annotations[leaseobject.DesignationAnnotation] = o.Designated
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	if f := finalizers(o.Finalizers); len(f) > 0 {
		meta["finalizers"] = f
	}
	if r := ownerReferences(o.OwnerReferences); len(r) > 0 {
		meta["ownerReferences"] = r
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "spec": spec}
}

// textMap turns the core's JSON text of labels or annotations into the map
// (empty for none).
func textMap(raw string) map[string]any {
	m := map[string]any{}
	if raw != "" {
		_ = json.Unmarshal([]byte(raw), &m)
	}
	return m
}

// rewritten is the stored map with what the case's old text holds taken
// out and what its new text holds put in: the labels or annotations a
// case's write changes.
func rewritten(stored any, oldText, newText string) map[string]any {
	out := map[string]any{}
	if m, ok := stored.(map[string]any); ok {
		for k, v := range m {
			out[k] = v
		}
	}
	for k := range textMap(oldText) {
		delete(out, k)
	}
	for k, v := range textMap(newText) {
		out[k] = v
	}
	return out
}

// finalizers turns the core's JSON text of finalizers into names the API
// server accepts without a warning (domain-qualified).
func finalizers(raw string) []any {
	if raw == "" {
		return nil
	}
	var names []string
	if err := json.Unmarshal([]byte(raw), &names); err != nil {
		names = []string{raw}
	}
	var out []any
	for _, n := range names {
		if !strings.Contains(n, "/") {
			n = "parity.leaseguard.io/" + n
		}
		out = append(out, n)
	}
	return out
}

// ownerReferences turns the core's JSON text of owner references, which
// it only compares, into valid ones: distinct texts give distinct lists.
func ownerReferences(raw string) []any {
	if raw == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(raw))
	uid := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": fmt.Sprintf("owner-%x", sum[:6]), "uid": uid}}
}

// stored is the old object of a case as the API server stored it.
type stored struct {
	obj       map[string]any
	created   time.Time
	renewTime time.Time // zero when no managedFields entry owns spec.renewTime
}

// store creates the old object as the fixture identity and sets the time
// of the managedFields entry owning spec.renewTime to renewWrite (truncated
// to the second, as the API server keeps it): what a stored object last
// renewed at that time carries.
func (e *env) store(ctx context.Context, res leaseobject.Resource, o *leaseobject.Object, shift time.Duration, renewWrite time.Time) (*stored, error) {
	body, _ := json.Marshal(apiObject(res, o, shift))
	out, err := e.do(ctx, fixture, http.MethodPost, objectPath(res, o.Namespace, "", ""), body, url.Values{"fieldManager": {renewerManager}})
	if err != nil {
		return nil, err
	}
	if !out.allowed() {
		return nil, fmt.Errorf("%s: storing %s/%s: HTTP %d %s", e.name, o.Namespace, o.Name, out.Code, out.Message)
	}
	obj := out.Body
	if !renewWrite.IsZero() {
		mf, _ := nested(obj, "metadata", "managedFields").([]any)
		for _, entry := range mf {
			m, _ := entry.(map[string]any)
			if nested(m, "fieldsV1", "f:spec", "f:renewTime") != nil {
				m["time"] = renewWrite.UTC().Truncate(time.Second).Format(time.RFC3339)
			}
		}
		// The API server reverts a write that changes nothing but
		// managedFields times: another manager labels the object in the
		// same write.
		meta := obj["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		labels["parity.leaseguard.io/stored"] = "true"
		meta["labels"] = labels
		body, _ = json.Marshal(obj)
		out, err = e.do(ctx, fixture, http.MethodPut, objectPath(res, o.Namespace, o.Name, ""), body, url.Values{"fieldManager": {fixtureManager}})
		if err != nil {
			return nil, err
		}
		if !out.allowed() {
			return nil, fmt.Errorf("%s: dating the last renewal of %s/%s: HTTP %d %s", e.name, o.Namespace, o.Name, out.Code, out.Message)
		}
		obj = out.Body
	}
	s := &stored{obj: obj}
	if t, err := time.Parse(time.RFC3339, str(nested(obj, "metadata", "creationTimestamp"))); err == nil {
		s.created = t
	}
	mf, _ := nested(obj, "metadata", "managedFields").([]any)
	for _, entry := range mf {
		m, _ := entry.(map[string]any)
		if nested(m, "fieldsV1", "f:spec", "f:renewTime") != nil {
			if t, err := time.Parse(time.RFC3339, str(m["time"])); err == nil && t.After(s.renewTime) {
				s.renewTime = t
			}
		}
	}
	if !renewWrite.IsZero() && !s.renewTime.Equal(renewWrite.UTC().Truncate(time.Second)) {
		return nil, fmt.Errorf("%s: the API server keeps %v as the time of the last renewal, not %v", e.name, s.renewTime, renewWrite)
	}
	return s, nil
}

// written builds the body of an UPDATE: the stored object with the case's
// new fields and, unless the write changes the finalizers, a label that
// changes on every write (so that no write is one that changes nothing; a
// status writer's finalizer write must change nothing else to be
// admitted). rewind, when set, is written as the time of the managedFields
// entry owning spec.renewTime; otherwise managedFields is left to the API
// server.
func written(req *leaseobject.Request, st *stored, shift time.Duration, n int, rewind time.Time) map[string]any {
	res, o := req.Resource, req.New
	w := deepCopy(st.obj)
	fresh := apiObject(res, o, shift)
	w["spec"] = fresh["spec"]
	meta := w["metadata"].(map[string]any)
	freshMeta := fresh["metadata"].(map[string]any)
	annotations := rewritten(meta["annotations"], req.Old.Annotations, o.Annotations)
	delete(annotations, leaseobject.DesignationAnnotation)
	if a, ok := freshMeta["annotations"].(map[string]any); ok {
		annotations[leaseobject.DesignationAnnotation] = a[leaseobject.DesignationAnnotation]
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	} else {
		delete(meta, "annotations")
	}
	labels := rewritten(meta["labels"], req.Old.Labels, o.Labels)
	if labelled(req) {
		labels[parityLabel] = strconv.Itoa(n)
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	} else {
		delete(meta, "labels")
	}
	for _, k := range []string{"finalizers", "ownerReferences"} {
		if v, ok := freshMeta[k]; ok {
			meta[k] = v
		} else {
			delete(meta, k)
		}
	}
	if rewind.IsZero() {
		delete(meta, "managedFields")
	} else {
		mf, _ := meta["managedFields"].([]any)
		for _, entry := range mf {
			m, _ := entry.(map[string]any)
			if nested(m, "fieldsV1", "f:spec", "f:renewTime") != nil {
				m["time"] = rewind.UTC().Truncate(time.Second).Format(time.RFC3339)
			}
		}
	}
	return w
}

// labelled reports whether the replay of an UPDATE changes a label
// (written), so that it changes something the API server stores: every one
// but those that change the finalizers or move renewTime, which change
// something already. A renewal must not: a label change takes it off the
// fail-open route, so that neither the renewals policy nor the renewals
// webhook would ever be compared.
func labelled(req *leaseobject.Request) bool {
	return req.Old == nil || req.New == nil ||
		(req.Old.Finalizers == req.New.Finalizers && req.New.Spec.RenewTime.Equal(req.Old.Spec.RenewTime))
}

// send makes the case's write as its caller.
func (e *env) send(ctx context.Context, req *leaseobject.Request, st *stored, shift time.Duration, n int, rewind time.Time) (*outcome, error) {
	q := url.Values{"fieldManager": {writeManager}}
	if req.FieldManager != "" {
		q.Set("fieldManager", req.FieldManager)
	}
	if req.DryRun {
		q.Set("dryRun", "All")
	}
	obj := req.New
	if obj == nil {
		obj = req.Old
	}
	switch {
	case req.Operation == leaseobject.Create:
		body := apiObject(req.Resource, req.New, shift)
		body["metadata"].(map[string]any)["labels"] = map[string]any{parityLabel: strconv.Itoa(n)}
		data, _ := json.Marshal(body)
		return e.do(ctx, req.Caller, http.MethodPost, objectPath(req.Resource, obj.Namespace, "", ""), data, q)
	case req.Operation == leaseobject.Delete:
		q.Del("fieldManager")
		return e.do(ctx, req.Caller, http.MethodDelete, objectPath(req.Resource, obj.Namespace, obj.Name, ""), nil, q)
	case req.Subresource == leaseobject.StatusSubresource:
		w := deepCopy(st.obj)
		w["status"] = map[string]any{"globalHolderIdentity": "parity-" + strconv.Itoa(n)}
		delete(w["metadata"].(map[string]any), "managedFields")
		data, _ := json.Marshal(w)
		return e.do(ctx, req.Caller, http.MethodPut, objectPath(req.Resource, obj.Namespace, obj.Name, "status"), data, q)
	}
	data, _ := json.Marshal(written(req, st, shift, n, rewind))
	return e.do(ctx, req.Caller, http.MethodPut, objectPath(req.Resource, obj.Namespace, obj.Name, ""), data, q)
}

// remove deletes an object as the fixture identity, its finalizers first,
// and waits until it is gone.
func (e *env) remove(ctx context.Context, res leaseobject.Resource, ns, name string) error {
	path := objectPath(res, ns, name, "")
	for i := 0; i < 100; i++ {
		out, err := e.do(ctx, fixture, http.MethodGet, path, nil, nil)
		if err != nil {
			return err
		}
		if out.Code == http.StatusNotFound {
			return nil
		}
		if f, _ := nested(out.Body, "metadata", "finalizers").([]any); len(f) > 0 {
			if _, err := e.do(ctx, fixture, http.MethodPatch, path, []byte(`{"metadata":{"finalizers":null}}`), nil); err != nil {
				return err
			}
		}
		if _, err := e.do(ctx, fixture, http.MethodDelete, path, nil, nil); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s/%s is not gone", e.name, ns, name)
}

func nested(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func str(v any) string { s, _ := v.(string); return s }

func deepCopy(m map[string]any) map[string]any {
	data, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}
