package policy

import (
	"fmt"
	"strings"
)

// maxCaptures bounds the captures of a bind template so that matching can
// keep the captured values in a fixed array instead of allocating.
const maxCaptures = 4

// template is a pattern with named captures, such as
// "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}". It is
// stored as literals interleaved with captures: lits[0] cap[0] lits[1] ...
type template struct {
	text string
	lits []string
	caps []string
}

type captures [maxCaptures]string

func parseTemplate(text string) (template, error) {
	t := template{text: text}
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
	if len(t.caps) > maxCaptures {
		return t, fmt.Errorf("at most %d captures are supported", maxCaptures)
	}
	if strings.Contains(text, "*") {
		return t, fmt.Errorf("'*' is not allowed in a bind template; use a capture such as {ns}")
	}
	return t, nil
}

func (t *template) captureIndex(name string) int {
	for i, c := range t.caps {
		if c == name {
			return i
		}
	}
	return -1
}

// match matches s against the template and returns the captured values. A
// capture matches a non-empty run without ':' (a username's separator); where
// a literal recurs, later positions are tried too, so every instance of the
// template matches.
func (t *template) match(s string) (captures, bool) {
	var vals captures
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
func (t *template) matchFrom(i int, s string, vals *captures) bool {
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

// bind ties a manager, through the captures of its username, to one lease
// name.
type bind struct {
	manager template
	lease   template
	// leaseCap maps each capture of the lease template to the index of the
	// same capture in the manager template.
	leaseCap []int
}

func compileBind(manager, lease string) (*bind, error) {
	m, err := parseTemplate(manager)
	if err != nil {
		return nil, fmt.Errorf("manager %q: %w", manager, err)
	}
	l, err := parseTemplate(lease)
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", lease, err)
	}
	if len(m.caps) == 0 {
		return nil, fmt.Errorf("manager %q has no capture such as {ns}; without one every manager would be bound to the same lease", manager)
	}
	b := &bind{manager: m, lease: l}
	for _, c := range l.caps {
		i := m.captureIndex(c)
		if i < 0 {
			return nil, fmt.Errorf("lease %q uses {%s}, which manager %q does not capture", lease, c, manager)
		}
		b.leaseCap = append(b.leaseCap, i)
	}
	for _, c := range m.caps {
		if l.captureIndex(c) < 0 {
			return nil, fmt.Errorf("capture {%s} of manager %q is unused in lease %q, so it would not tell managers apart", c, manager, lease)
		}
	}
	return b, nil
}

// leaseMatches reports whether name is the lease bound to the manager whose
// username produced vals. It compares piecewise and does not allocate.
func (b *bind) leaseMatches(name string, vals *captures) bool {
	for i, lit := range b.lease.lits {
		if !strings.HasPrefix(name, lit) {
			return false
		}
		name = name[len(lit):]
		if i < len(b.leaseCap) {
			v := vals[b.leaseCap[i]]
			if !strings.HasPrefix(name, v) {
				return false
			}
			name = name[len(v):]
		}
	}
	return name == ""
}

// leaseName renders the lease bound to the manager whose username produced
// vals; it is only used to explain a denial.
func (b *bind) leaseName(vals *captures) string {
	var sb strings.Builder
	for i, lit := range b.lease.lits {
		sb.WriteString(lit)
		if i < len(b.leaseCap) {
			sb.WriteString(vals[b.leaseCap[i]])
		}
	}
	return sb.String()
}
