package policy

import "strings"

// WriterBasis says how AssumedWriter derived the writer of an object.
type WriterBasis string

// The bases of an assumed writer, from the most to the least certain.
const (
	// WriterDesignated: the designation annotation on the object names it.
	WriterDesignated WriterBasis = "designation"
	// WriterFixed: the rule's fixed designation names it.
	WriterFixed WriterBasis = "fixed"
	// WriterBound: the rule's bind template maps the lease name to it.
	WriterBound WriterBasis = "bind"
	// WriterPattern: only a managers pattern is known; the username is the
	// pattern itself, so the real writer stays unknown.
	WriterPattern WriterBasis = "pattern"
)

// AssumedWriter returns the caller that the rule selecting obj admits as its
// writer, for a watcher (leaseguard top) that sees stored objects but not
// who wrote them: the API server's managedFields name field managers, not
// users. The caller is derived from, in order, the designation annotation,
// a fixed designation, the rule's bind template (the lease name gives the
// captures, the manager template the username) and its first managers
// pattern. The pod name is taken from the holder identity (`<pod>` or
// `<pod>_<id>`), and with holderBinding username the holder is the username:
// identity invariants (I1, I2, I3, I5, I9) are thereby assumed kept, and
// Decide judges what a watcher can see (I4, I6, I7). ok is false when no
// rule selects obj or the rule names no manager.
func AssumedWriter(p *Policy, res Resource, obj *Object) (rule string, c Caller, basis WriterBasis, ok bool) {
	r := p.Select(res, obj.Namespace, obj.Name)
	if r == nil {
		return "", Caller{}, "", false
	}
	holder := obj.Spec.Holder
	if holder != "" {
		c.PodName = holder
		if i := strings.IndexByte(holder, '_'); i > 0 {
			c.PodName = holder[:i]
		}
	}
	switch {
	case obj.HasDesignation && obj.Designated != "" && r.designation != DesignationNone && r.designation != DesignationFixed:
		c.Username, basis = obj.Designated, WriterDesignated
	case r.designation == DesignationFixed:
		c.Username, basis = r.fixedManager, WriterFixed
	case r.bind != nil && r.bind.boundManager(obj.Name) != "":
		c.Username, basis = r.bind.boundManager(obj.Name), WriterBound
	case r.holderBinding == HolderBindingUsername && holder != "" && r.isManager(holder):
		c.Username, basis = holder, WriterPattern
	case len(r.managers) > 0:
		c.Username, basis = string(r.managers[0]), WriterPattern
	default:
		return r.Name, Caller{}, "", false
	}
	return r.Name, c, basis, true
}

// boundManager returns the username whose bound lease is name, or "" when
// name does not fit the lease template.
func (b *bind) boundManager(name string) string {
	leaseVals, ok := b.lease.match(name)
	if !ok {
		return ""
	}
	var sb strings.Builder
	for i, lit := range b.manager.lits {
		sb.WriteString(lit)
		if i < len(b.manager.caps) {
			sb.WriteString(leaseVals[b.lease.captureIndex(b.manager.caps[i])])
		}
	}
	return sb.String()
}
