package leaseobject

import "time"

// The decision core's view of a write: what arrived (Request: the caller,
// the operation, both objects, the server's clock) in a form that does not
// depend on which API version or kind carried it. ReadRequest fills it from
// an AdmissionReview; policy.Decide reads it.

// Resource is a guarded resource, by its plural name.
type Resource string

// The guarded resources.
const (
	Leases             Resource = "leases"
	MultiClusterLeases Resource = "multiclusterleases"
)

// Kind is the lower-case singular used in messages.
func (r Resource) Kind() string {
	switch r {
	case Leases:
		return "lease"
	case MultiClusterLeases:
		return "multiclusterlease"
	}
	return string(r)
}

// Operation is the admission operation. A PATCH arrives as an UPDATE.
type Operation string

// The operations the webhook is registered for.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// StatusSubresource is the only subresource leaseguard distinguishes.
const StatusSubresource = "status"

// DesignationAnnotation records, on the guarded object, the username of the
// manager designated to write it (docs/design.md §3).
const DesignationAnnotation = "leaseguard.io/designated-manager"

// ControllerFinalizer is the finalizer the MultiClusterLease controller
// adds to a MultiClusterLease and removes once it has released the global
// lock (docs/design.md §2): the one thing of the object a status writer
// that is not a manager may change (I11).
const ControllerFinalizer = "multiclusterlease.core.cnrm.cloud.google.com/finalizer"

// PodNameExtra is the user-info extra a bound service-account token carries
// with the name of the pod it was issued to.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

// DefaultLeaseDuration is assumed for an object that declares none; it is
// client-go's and controller-runtime's default.
const DefaultLeaseDuration = 15 * time.Second

// Caller is the identity of the requester, derived once per request.
type Caller struct {
	Username string
	Groups   []string
	// PodName comes from the bound token's pod-name extra; empty if absent.
	PodName string
}

// Object is the normalised view of a Lease or a MultiClusterLease: the fields
// the invariants read, so both kinds go through one code path.
type Object struct {
	Namespace string
	Name      string
	// GenerateName is set on a CREATE that leaves the name to the API
	// server; the mutating webhook sees the object before it is named.
	GenerateName      string
	CreationTimestamp time.Time
	// Designated is the value of DesignationAnnotation; HasDesignation says
	// whether the annotation is present at all.
	Designated     string
	HasDesignation bool
	// HasAnnotations says whether metadata.annotations exists, and
	// RenewTimeText is spec.renewTime as written: plumbing for the mutating
	// webhook's patches, which must add to the map that exists and put back
	// the very text that is stored.
	HasAnnotations bool
	RenewTimeText  string
	// Finalizers and OwnerReferences are kept as their JSON text: the core
	// only asks whether a write changes them (I11).
	Finalizers      string
	OwnerReferences string
	// Labels and Annotations are those maps' JSON text (past 4 KiB, their
	// length and SHA-256), "" when absent or empty: the core only asks
	// whether a status writer's write changes them (I1, I11: the
	// MultiClusterLease controller changes nothing of the object but its
	// own finalizer).
	Labels      string
	Annotations string
	// RenewWrite is when the API server stored the last write of
	// spec.renewTime: the time of the managedFields entry that owns that
	// field, which the server stamps itself (whole seconds). Zero when no
	// entry owns it. I6 judges write frequency by it, so that a client
	// cannot pass the rate limit by writing an old renewTime.
	RenewWrite time.Time
	// ManagedTimes are the managedFields entries' times as written, by
	// entry (manager, operation, subresource, apiVersion). The API server
	// stamps the entry of the write it stores with its own clock, but keeps
	// whatever times a client sends with managedFields in the body: a write
	// that adds or re-dates an entry ahead of the server clock is refused,
	// so that no decision rests on a time a client chose (I7).
	ManagedTimes []ManagedTime
	Spec         Spec
	// Unreadable lists spec fields of a stored object that leaseguard cannot
	// read (a custom resource is stored as written, whatever its schema
	// let through). The core decides without them where it can and says so
	// in Decision.Notice; it never refuses an operator, a status writer or
	// a metadata-only write because of them.
	Unreadable []Unreadable
	// Untyped lists spec times leaseguard reads but typed clients cannot:
	// metav1.MicroTime parses exactly 2006-01-02T15:04:05.000000Z07:00, and
	// a custom resource's date-time is stored as written. A typed Get of
	// such an object fails, and so does a typed List of every object in its
	// namespace (a controller's cache), so no write may introduce one
	// (leaseobject.CheckWritten); one already stored is repaired by the
	// next write of a readable time.
	Untyped []Unreadable
}

// ManagedTime is one managedFields entry's time.
type ManagedTime struct {
	// Key names the entry: manager, operation, subresource and apiVersion,
	// newline-separated.
	Key string
	// Raw is the time as written; Time is zero when it is not a time.
	Raw  string
	Time time.Time
	// RenewWriter marks the main resource's entry that owns
	// spec.renewTime: after a write that moves renewTime, the API server's
	// stamp of that write (HarmlessRenewal).
	RenewWriter bool
}

// Unreadable is a field that could not be read, with its JSON text.
type Unreadable struct {
	Field   string // e.g. "spec.renewTime"
	Raw     string // the JSON text, compared to tell whether a write changed it
	Problem string
}

// UnreadableEntry returns the entry for field, or nil.
func (o *Object) UnreadableEntry(field string) *Unreadable {
	for i := range o.Unreadable {
		if o.Unreadable[i].Field == field {
			return &o.Unreadable[i]
		}
	}
	return nil
}

// UntypedEntry returns the Untyped entry for field, or nil.
func (o *Object) UntypedEntry(field string) *Unreadable {
	for i := range o.Untyped {
		if o.Untyped[i].Field == field {
			return &o.Untyped[i]
		}
	}
	return nil
}

// Spec holds the lease fields. Zero values mean "not set".
type Spec struct {
	Holder        string
	RenewTime     time.Time
	AcquireTime   time.Time
	LeaseDuration time.Duration
	// RenewDeadline and RetryPeriod are declared by MultiClusterLeases only.
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Transitions, Strategy and PreferredHolder exist on Leases only.
	Transitions     int32
	Strategy        string
	PreferredHolder string
}

// Equal reports whether two specs hold the same lease fields. Times compare
// as instants, whatever their location.
func (s *Spec) Equal(o *Spec) bool {
	return s.Holder == o.Holder &&
		s.RenewTime.Equal(o.RenewTime) &&
		s.AcquireTime.Equal(o.AcquireTime) &&
		s.LeaseDuration == o.LeaseDuration &&
		s.RenewDeadline == o.RenewDeadline &&
		s.RetryPeriod == o.RetryPeriod &&
		s.Transitions == o.Transitions &&
		s.Strategy == o.Strategy &&
		s.PreferredHolder == o.PreferredHolder
}

// EffectiveRenewDeadline is the renew deadline the object declares, or two thirds of
// its lease duration (client-go's ratio) when it declares none.
func (s *Spec) EffectiveRenewDeadline() time.Duration {
	if s.RenewDeadline > 0 {
		return s.RenewDeadline
	}
	l := s.LeaseDuration
	if l <= 0 {
		l = DefaultLeaseDuration
	}
	return l * 2 / 3
}

// Request is everything a decision depends on.
type Request struct {
	Resource    Resource
	Operation   Operation
	Subresource string
	Caller      Caller
	// Old is nil on CREATE; New is nil on DELETE.
	Old *Object
	New *Object
	// Now is the server's clock when the request is decided.
	Now time.Time
	// DryRun and FieldManager describe how the write was sent: a dry run, or
	// a write by kubectl (its field managers start with "kubectl"), always
	// gets an immediate answer rather than a back-off (backOffLosers).
	DryRun       bool
	FieldManager string
}

// Target returns the object the request is about: the new one, or the
// stored one of a DELETE.
func (r *Request) Target() *Object {
	if r.New != nil {
		return r.New
	}
	return r.Old
}
