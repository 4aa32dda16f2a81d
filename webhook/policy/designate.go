package policy

// Designate says whether the mutating webhook should record the caller as the
// designated manager of the object (designation: auto), and returns the
// username to record. It stamps only where the validating webhook will admit
// the result: a manager's lease write when the designation is absent or
// stale. Everything else is left to validation, which judges whoever set the
// annotation.
func Designate(p *Policy, req *Request) (string, bool) {
	if req.Operation == Delete || req.Subresource != "" || req.New == nil {
		return "", false
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	if rule == nil || rule.designation != DesignationAuto {
		return "", false
	}
	caller := &req.Caller
	if rule.operators.matchCaller(caller) || !rule.isManager(caller.Username) {
		return "", false
	}
	if !sameDesignation(req.Old, req.New) {
		return "", false
	}
	old := req.Old
	if old != nil && old.Spec.Equal(&req.New.Spec) {
		return "", false
	}
	if old != nil && old.HasDesignation && old.Designated != "" {
		c := check{rule: rule, skew: p.ClockSkew, req: req, obj: old}
		if old.Designated == caller.Username || c.fresh(old) {
			return "", false
		}
	}
	return caller.Username, true
}

// isManager reports whether username counts as a manager under the rule,
// through the bind template, the managers patterns or a fixed designation.
func (r *Rule) isManager(username string) bool {
	if r.bind != nil {
		if _, ok := r.bind.manager.match(username); ok {
			return true
		}
	}
	return r.managers.match(username) || (r.designation == DesignationFixed && username == r.fixedManager)
}
