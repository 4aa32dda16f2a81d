package pattern

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxCaptures bounds the captures of a bind template so that matching can
// keep the captured values in a fixed array instead of allocating.
const MaxCaptures = 4

// Template is a pattern with named captures, such as
// "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}". It is
// stored as literals interleaved with captures: lits[0] cap[0] lits[1] ...
type Template struct {
	text string
	lits []string
	caps []string
}

type Captures [MaxCaptures]string

func ParseTemplate(text string) (Template, error) {
	t := Template{text: text}
	rest := text
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return t, fmt.Errorf("unmatched '}'")
			}
			t.lits = append(t.lits, rest)
			break
		}
		closing := strings.IndexByte(rest[open:], '}')
		if closing < 0 {
			return t, fmt.Errorf("unmatched '{'")
		}
		name := rest[open+1 : open+closing]
		if name == "" || strings.ContainsAny(name, "{*") {
			return t, fmt.Errorf("capture %q must be a plain name such as {ns}", "{"+name+"}")
		}
		lit := rest[:open]
		if strings.IndexByte(lit, '}') >= 0 {
			return t, fmt.Errorf("unmatched '}'")
		}
		if len(t.caps) > 0 && lit == "" {
			return t, fmt.Errorf("captures must be separated by literal text")
		}
		for _, c := range t.caps {
			if c == name {
				return t, fmt.Errorf("capture {%s} appears twice", name)
			}
		}
		t.lits = append(t.lits, lit)
		t.caps = append(t.caps, name)
		rest = rest[open+closing+1:]
	}
	if len(t.caps) > MaxCaptures {
		return t, fmt.Errorf("at most %d captures are supported", MaxCaptures)
	}
	if strings.Contains(text, "*") {
		return t, fmt.Errorf("'*' is not allowed in a bind template; use a capture such as {ns}")
	}
	return t, nil
}

func (t *Template) CaptureIndex(name string) int {
	for i, c := range t.caps {
		if c == name {
			return i
		}
	}
	return -1
}

// Match matches s against the template and returns the captured values. A
// capture matches a non-empty run without ':' (a username's separator); where
// a literal recurs, later positions are tried too, so every instance of the
// template matches.
func (t *Template) Match(s string) (Captures, bool) {
	var vals Captures
	if !strings.HasPrefix(s, t.lits[0]) {
		return vals, false
	}
	rest := s[len(t.lits[0]):]
	if len(t.caps) == 0 {
		return vals, rest == ""
	}
	return vals, t.matchFrom(0, rest, &vals)
}

// matchFrom matches capture i and everything after it against s.
func (t *Template) matchFrom(i int, s string, vals *Captures) bool {
	next := t.lits[i+1]
	if i == len(t.caps)-1 {
		if !strings.HasSuffix(s, next) {
			return false
		}
		v := s[:len(s)-len(next)]
		if v == "" || strings.IndexByte(v, ':') >= 0 {
			return false
		}
		vals[i] = v
		return true
	}
	// The capture ends at an occurrence of the next literal; it may not
	// cross a ':', so the search stops at the first one.
	limit := len(s)
	if c := strings.IndexByte(s, ':'); c >= 0 {
		limit = c + len(next)
		if limit > len(s) {
			limit = len(s)
		}
	}
	for end := 1; end < limit; end++ {
		if !strings.HasPrefix(s[end:], next) {
			continue
		}
		v := s[:end]
		if strings.IndexByte(v, ':') >= 0 {
			return false
		}
		vals[i] = v
		if t.matchFrom(i+1, s[end+len(next):], vals) {
			return true
		}
	}
	return false
}

// Bind ties a manager, through the captures of its username, to one lease
// name, and where a namespace template is given, to one namespace: Config
// Connector's managers run as cnrm-controller-manager-<ns> in cnrm-system,
// or, with a ConfigConnectorContext's managerNamespace, in that namespace,
// which also holds their leases.
type Bind struct {
	manager Template
	lease   Template
	// namespace, when set, is the namespace of the bound lease; otherwise
	// the rule's namespaces select it.
	namespace *Template
	// leaseCap and namespaceCap map each capture of the lease and namespace
	// templates to the index of the same capture in the manager template.
	leaseCap, namespaceCap []int
}

func CompileBind(manager, lease, namespace string) (*Bind, error) {
	m, err := ParseTemplate(manager)
	if err != nil {
		return nil, fmt.Errorf("manager %q: %w", manager, err)
	}
	l, err := ParseTemplate(lease)
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", lease, err)
	}
	if len(m.caps) == 0 {
		return nil, fmt.Errorf("manager %q has no capture such as {ns}; without one every manager would be bound to the same lease", manager)
	}
	b := &Bind{manager: m, lease: l}
	if b.leaseCap, err = captureIndexes(&m, &l, "lease", lease, manager); err != nil {
		return nil, err
	}
	used := func(c string) bool { return l.CaptureIndex(c) >= 0 }
	if namespace != "" {
		n, err := ParseTemplate(namespace)
		if err != nil {
			return nil, fmt.Errorf("namespace %q: %w", namespace, err)
		}
		if b.namespaceCap, err = captureIndexes(&m, &n, "namespace", namespace, manager); err != nil {
			return nil, err
		}
		b.namespace = &n
		used = func(c string) bool { return l.CaptureIndex(c) >= 0 || n.CaptureIndex(c) >= 0 }
	}
	for _, c := range m.caps {
		if !used(c) {
			where := "lease " + strconv.Quote(lease)
			if namespace != "" {
				where += " or namespace " + strconv.Quote(namespace)
			}
			return nil, fmt.Errorf("capture {%s} of manager %q is unused in %s, so it would not tell managers apart", c, manager, where)
		}
	}
	return b, nil
}

// InexpressibleBind says which bind templates CEL cannot tie to one lease
// (Bind.Expressible).
const InexpressibleBind = "several captures, but not one in the lease template and the other in the namespace template, after a ':'"

// Expressible reports whether CEL can say exactly which lease the bind
// binds a caller to: with one capture, from the username (celexpr.BoundLease);
// with several, from the lease's name and namespace, which is possible when
// the lease template captures one and the namespace template the other
// (CompileBind has made sure each capture is used) and the username splits
// one way only: every capture but the last is followed by ':', which no
// capture contains. Config Connector's dedicated manager namespaces,
// "system:serviceaccount:{managerNamespace}:cnrm-controller-manager-{ns}",
// are of that form.
func (b *Bind) Expressible() bool {
	if len(b.manager.caps) == 1 {
		return true
	}
	if len(b.manager.caps) != 2 || len(b.leaseCap) != 1 || b.namespace == nil || len(b.namespaceCap) != 1 {
		return false
	}
	return strings.HasPrefix(b.manager.lits[1], ":")
}

// captureIndexes maps each capture of t (the lease or namespace template)
// to its index in the manager template m.
func captureIndexes(m, t *Template, what, text, manager string) ([]int, error) {
	var out []int
	for _, c := range t.caps {
		i := m.CaptureIndex(c)
		if i < 0 {
			return nil, fmt.Errorf("%s %q uses {%s}, which manager %q does not capture", what, text, c, manager)
		}
		out = append(out, i)
	}
	return out, nil
}

// BoundTo reports whether namespace/name is the lease bound to the manager
// whose username produced vals. It compares piecewise and does not
// allocate.
func (b *Bind) BoundTo(namespace, name string, vals *Captures) bool {
	if b.namespace != nil && !fits(b.namespace, b.namespaceCap, namespace, vals) {
		return false
	}
	return fits(&b.lease, b.leaseCap, name, vals)
}

// fits reports whether s is the template t filled with vals.
func fits(t *Template, caps []int, s string, vals *Captures) bool {
	for i, lit := range t.lits {
		if !strings.HasPrefix(s, lit) {
			return false
		}
		s = s[len(lit):]
		if i < len(caps) {
			v := vals[caps[i]]
			if !strings.HasPrefix(s, v) {
				return false
			}
			s = s[len(v):]
		}
	}
	return s == ""
}

// BoundLease renders the lease bound to the manager whose username produced
// vals, namespace/name where the template binds the namespace; it is only
// used to explain a denial.
func (b *Bind) BoundLease(vals *Captures) string {
	name := fill(&b.lease, b.leaseCap, vals)
	if b.namespace == nil {
		return name
	}
	return fill(b.namespace, b.namespaceCap, vals) + "/" + name
}

func fill(t *Template, caps []int, vals *Captures) string {
	var sb strings.Builder
	for i, lit := range t.lits {
		sb.WriteString(lit)
		if i < len(caps) {
			sb.WriteString(vals[caps[i]])
		}
	}
	return sb.String()
}

// Text is the template as written.
func (t *Template) Text() string { return t.text }

// Lits returns a copy of the template's literals: Lits()[0], the first
// capture, Lits()[1], and so on.
func (t *Template) Lits() []string { return append([]string(nil), t.lits...) }

// CaptureCount is the number of the template's captures.
func (t *Template) CaptureCount() int { return len(t.caps) }

// Manager is the template of the manager's username.
func (b *Bind) Manager() *Template { return &b.manager }

// Lease is the template of the bound lease's name.
func (b *Bind) Lease() *Template { return &b.lease }

// Namespace is the template of the bound lease's namespace, nil when the
// rule's namespaces select it.
func (b *Bind) Namespace() *Template { return b.namespace }

// LeaseCaps returns, for each capture of the lease template, the index of
// the same capture among the manager template's.
func (b *Bind) LeaseCaps() []int { return append([]int(nil), b.leaseCap...) }

// NamespaceCaps is LeaseCaps for the namespace template (nil without one).
func (b *Bind) NamespaceCaps() []int { return append([]int(nil), b.namespaceCap...) }

// MatchManager matches a username against the manager template and returns
// the captured values.
func (b *Bind) MatchManager(username string) (Captures, bool) { return b.manager.Match(username) }

// BoundManager returns the username whose bound lease is name, or "" when
// name does not fit the lease template.
func (b *Bind) BoundManager(name string) string {
	leaseVals, ok := b.lease.Match(name)
	if !ok {
		return ""
	}
	var sb strings.Builder
	for i, lit := range b.manager.lits {
		sb.WriteString(lit)
		if i < len(b.manager.caps) {
			sb.WriteString(leaseVals[b.lease.CaptureIndex(b.manager.caps[i])])
		}
	}
	return sb.String()
}
