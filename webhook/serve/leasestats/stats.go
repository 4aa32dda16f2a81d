// Package leasestats keeps, in bounded memory, the heaviest leases and
// writers the webhook has judged — per-lease insight without per-lease
// metric labels — and serves them as JSON (GET /debug/leases on the metrics
// port). Two space-saving sketches count requests per lease and per user,
// each lease with its verdicts and its busiest users.
package leasestats

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// Path is where the metrics server serves the snapshot.
const Path = "/debug/leases"

// Default capacities: the counters kept per sketch.
const (
	DefaultLeases  = 1000
	DefaultWriters = 1000
	// usersPerLease bounds the users remembered per lease.
	usersPerLease = 4
	// DefaultLimit is how many rows a snapshot lists unless ?limit= says.
	DefaultLimit = 50
)

type leaseKey struct {
	resource  leaseobject.Resource
	namespace string
	name      string
}

type verdictCounts [4]int64 // indexed by policy.Verdict

type userCount struct {
	user  string
	count int64
}

type leaseValue struct {
	verdicts verdictCounts
	users    [usersPerLease]userCount
}

type writerValue struct{ verdicts verdictCounts }

// Stats is safe for concurrent use; a nil *Stats ignores observations.
type Stats struct {
	mu      sync.Mutex
	since   time.Time
	total   int64
	leases  *sketch[leaseKey, leaseValue]
	writers *sketch[string, writerValue]
}

// New returns Stats keeping at most leases lease counters and writers user
// counters (the defaults when zero).
func New(leases, writers int) *Stats {
	if leases <= 0 {
		leases = DefaultLeases
	}
	if writers <= 0 {
		writers = DefaultWriters
	}
	return &Stats{since: time.Now(), leases: newSketch[leaseKey, leaseValue](leases), writers: newSketch[string, writerValue](writers)}
}

// Observe counts one judged write.
func (s *Stats) Observe(resource leaseobject.Resource, namespace, name, user string, verdict policy.Verdict) {
	if s == nil {
		return
	}
	v := int(verdict)
	if v >= len(verdictCounts{}) {
		v = int(policy.Allow)
	}
	// Keys are kept until others push them out: cut and copied, so that a
	// caller who posts reviews straight to the port with megabyte names
	// cannot make the table hold megabytes (the API server allows 253
	// bytes of name, 63 of namespace).
	namespace, name, user = keyText(namespace), keyText(name), keyText(user)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	le, reset := s.leases.observe(leaseKey{resource, namespace, name})
	if reset {
		le.value = leaseValue{}
	}
	le.value.verdicts[v]++
	le.value.countUser(user)
	we, reset := s.writers.observe(user)
	if reset {
		we.value = writerValue{}
	}
	we.value.verdicts[v]++
}

// maxKeyBytes bounds a name, namespace or user kept as a key.
const maxKeyBytes = 256

// keyText cuts s to maxKeyBytes (on a character boundary) into a string of
// its own, which does not keep the rest of s alive.
func keyText(s string) string {
	if len(s) <= maxKeyBytes {
		return s
	}
	cut := maxKeyBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.Clone(s[:cut]) + "..."
}

// ObserveRequest counts a judged admission request: the object it is about
// (the new one, or the old one of a DELETE) and the caller.
func (s *Stats) ObserveRequest(req *leaseobject.Request, verdict policy.Verdict) {
	if s == nil || req == nil {
		return
	}
	obj := req.New
	if obj == nil {
		obj = req.Old
	}
	if obj == nil {
		return
	}
	s.Observe(req.Resource, obj.Namespace, obj.Name, req.Caller.Username, verdict)
}

// countUser counts user among a lease's few users; a new user replaces the
// least counted one (a small space-saving of its own).
func (v *leaseValue) countUser(user string) {
	least := 0
	for i := range v.users {
		u := &v.users[i]
		if u.user == user && u.count > 0 {
			u.count++
			return
		}
		if u.count < v.users[least].count {
			least = i
		}
	}
	v.users[least] = userCount{user: user, count: v.users[least].count + 1}
}

// Snapshot is the JSON of /debug/leases.
type Snapshot struct {
	Since time.Time `json:"since"`
	// Requests counts every judged request since Since.
	Requests int64 `json:"requests"`
	// Capacity is how many leases and writers are counted at most; a key
	// past it shares a counter, and Error bounds the overcount.
	Capacity Capacity      `json:"capacity"`
	Leases   []LeaseCount  `json:"leases"`
	Writers  []WriterCount `json:"writers"`
}

// Capacity of the sketches.
type Capacity struct {
	Leases  int `json:"leases"`
	Writers int `json:"writers"`
}

// Verdicts count requests by verdict, counted since the counter was taken
// (Requests - Error of them).
type Verdicts struct {
	Allow int64 `json:"allow"`
	Deny  int64 `json:"deny"`
	Warn  int64 `json:"warn"`
	Audit int64 `json:"audit"`
}

// LeaseCount is one of the heaviest leases.
type LeaseCount struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Requests is an upper bound; Requests - Error a lower bound.
	Requests int64       `json:"requests"`
	Error    int64       `json:"error"`
	Verdicts Verdicts    `json:"verdicts"`
	Users    []UserCount `json:"users"`
}

// UserCount is a user's requests to one lease (approximate past four users).
type UserCount struct {
	User     string `json:"user"`
	Requests int64  `json:"requests"`
}

// WriterCount is one of the busiest users.
type WriterCount struct {
	User     string   `json:"user"`
	Requests int64    `json:"requests"`
	Error    int64    `json:"error"`
	Verdicts Verdicts `json:"verdicts"`
}

func verdicts(c *verdictCounts) Verdicts {
	return Verdicts{Allow: c[policy.Allow], Deny: c[policy.Deny], Warn: c[policy.Warn], Audit: c[policy.Audit]}
}

// Snapshot returns the limit heaviest leases and writers, heaviest first.
func (s *Stats) Snapshot(limit int) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{
		Since: s.since, Requests: s.total,
		Capacity: Capacity{Leases: s.leases.capacity, Writers: s.writers.capacity},
		Leases:   []LeaseCount{}, Writers: []WriterCount{},
	}
	for _, e := range s.leases.heap {
		lc := LeaseCount{Resource: string(e.key.resource), Namespace: e.key.namespace, Name: e.key.name,
			Requests: e.count, Error: e.err, Verdicts: verdicts(&e.value.verdicts), Users: []UserCount{}}
		for _, u := range e.value.users {
			if u.count > 0 {
				lc.Users = append(lc.Users, UserCount{User: u.user, Requests: u.count})
			}
		}
		sort.Slice(lc.Users, func(i, j int) bool { return lc.Users[i].Requests > lc.Users[j].Requests })
		snap.Leases = append(snap.Leases, lc)
	}
	for _, e := range s.writers.heap {
		snap.Writers = append(snap.Writers, WriterCount{User: e.key, Requests: e.count, Error: e.err, Verdicts: verdicts(&e.value.verdicts)})
	}
	sort.Slice(snap.Leases, func(i, j int) bool {
		a, b := &snap.Leases[i], &snap.Leases[j]
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	sort.Slice(snap.Writers, func(i, j int) bool {
		a, b := &snap.Writers[i], &snap.Writers[j]
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
		return a.User < b.User
	})
	if limit > 0 && len(snap.Leases) > limit {
		snap.Leases = snap.Leases[:limit]
	}
	if limit > 0 && len(snap.Writers) > limit {
		snap.Writers = snap.Writers[:limit]
	}
	return snap
}

// ServeHTTP serves the snapshot as JSON; ?limit=N lists N rows of each
// (DefaultLimit when absent, every counter with 0).
func (s *Stats) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
		return
	}
	limit := DefaultLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "limit "+strconv.Quote(v)+": want a whole number, 0 for all", http.StatusBadRequest)
			return
		}
		limit = n
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.Snapshot(limit))
}
