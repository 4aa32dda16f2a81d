package policy

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leaseguard/leaseguard/api/v1alpha1"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/pattern"
)

// NeverIntercepted are the namespaces the webhook configuration never sends
// to leaseguard (docs/design.md §5); a rule that selects only these matches nothing.
// leaseguard's own namespace is added by the caller of Compile.
var NeverIntercepted = []string{"kube-system", "kube-node-lease"}

// CompileOptions tune validation to the deployment.
type CompileOptions struct {
	// OwnNamespace is leaseguard's namespace, never intercepted either.
	OwnNamespace string
}

// Compile validates a policy file as a whole and builds the rule set. All
// problems are reported at once, each with its field path.
func Compile(spec *v1alpha1.LeasePolicy, opts CompileOptions) (*Policy, field.ErrorList) {
	var errs field.ErrorList
	if spec.APIVersion != v1alpha1.APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), spec.APIVersion, []string{v1alpha1.APIVersion}))
	}
	if spec.Kind != v1alpha1.Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), spec.Kind, []string{v1alpha1.Kind}))
	}
	p := &Policy{ClockSkew: DefaultClockSkew}
	if spec.ClockSkew != nil {
		p.ClockSkew = spec.ClockSkew.Duration
		if p.ClockSkew < 0 || p.ClockSkew > time.Minute {
			errs = append(errs, field.Invalid(field.NewPath("clockSkew"), p.ClockSkew.String(), "must be between 0s and 1m"))
			// Judge the rules with the default rather than report
			// consequences of the bad value as problems of their own.
			p.ClockSkew = DefaultClockSkew
		}
	}
	if len(spec.Rules) == 0 {
		errs = append(errs, field.Required(field.NewPath("rules"), "a policy needs at least one rule"))
	}
	never := append(append([]string(nil), NeverIntercepted...), opts.OwnNamespace)
	seen := map[string]int{}
	for i := range spec.Rules {
		path := field.NewPath("rules").Index(i)
		rule, ruleErrs := compileRule(&spec.Rules[i], path, never, p.ClockSkew)
		errs = append(errs, ruleErrs...)
		if rule == nil {
			continue
		}
		if rule.Name != "" {
			if first, dup := seen[rule.Name]; dup {
				errs = append(errs, field.Duplicate(path.Child("name"), fmt.Sprintf("%s (also rules[%d])", rule.Name, first)))
			} else {
				seen[rule.Name] = i
			}
		}
		for j, earlier := range p.Rules {
			if rule.selectsNoResource() {
				break // already reported under resources
			}
			if earlier.shadows(rule) {
				errs = append(errs, field.Invalid(path, rule.Name,
					fmt.Sprintf("matches nothing: rule %q (rules[%d]) comes first and selects every object this rule selects", earlier.Name, j)))
				break
			}
		}
		p.Rules = append(p.Rules, rule)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func compileRule(in *v1alpha1.Rule, path *field.Path, never []string, skew time.Duration) (*Rule, field.ErrorList) {
	r := &Rule{Name: in.Name}
	var errs field.ErrorList
	errs = append(errs, r.compileSelection(in, path, never)...)
	errs = append(errs, r.compileIdentities(in, path)...)
	errs = append(errs, r.compileRenewals(in, path, skew)...)
	errs = append(errs, r.compileEnforcement(in, path)...)
	return r, errs
}

// compileSelection reads what the rule selects: its name, resources,
// namespaces and names.
func (r *Rule) compileSelection(in *v1alpha1.Rule, path *field.Path, never []string) field.ErrorList {
	var errs field.ErrorList
	if in.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), "rules are named in messages and metrics"))
	} else if msgs := validation.IsDNS1123Subdomain(in.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(path.Child("name"), in.Name, strings.Join(msgs, "; ")))
	}
	if len(in.Resources) == 0 {
		errs = append(errs, field.Required(path.Child("resources"), "name leases and/or multiclusterleases"))
	}
	for i, res := range in.Resources {
		switch leaseobject.Resource(res) {
		case leaseobject.Leases, leaseobject.MultiClusterLeases:
			r.resources[resourceIndex(leaseobject.Resource(res))] = true
		default:
			errs = append(errs, field.NotSupported(path.Child("resources").Index(i), res, []string{string(leaseobject.Leases), string(leaseobject.MultiClusterLeases)}))
		}
	}
	r.namespaces, errs = compileGlobs(in.Namespaces, path.Child("namespaces"), errs)
	r.names, errs = compileGlobs(in.Names, path.Child("names"), errs)
	if len(r.namespaces) > 0 && onlyNeverIntercepted(r.namespaces, never) {
		errs = append(errs, field.Invalid(path.Child("namespaces"), in.Namespaces,
			"matches nothing: leaseguard is never called for "+strings.Join(never, ", ")))
	}
	return errs
}

// compileIdentities reads who is who: managers, the bound-lease template,
// the designation, operators, status writers and the holder binding.
func (r *Rule) compileIdentities(in *v1alpha1.Rule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	r.managers, errs = compileGlobs(in.Managers, path.Child("managers"), errs)
	r.operators, errs = compileGlobs(in.Operators, path.Child("operators"), errs)
	r.statusWriters, errs = compileGlobs(in.StatusWriters, path.Child("statusWriters"), errs)
	if in.Bind != nil {
		b, err := pattern.CompileBind(in.Bind.Manager, in.Bind.Lease, in.Bind.Namespace)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("bind"), *in.Bind, err.Error()))
		}
		r.bind = b
	}
	switch d := strings.TrimSpace(in.Designation); {
	case d == "":
		r.designation = DesignationNone
	case d == "auto":
		r.designation = DesignationAuto
	case d == "annotation":
		r.designation = DesignationByAnnotation
	case strings.ContainsAny(d, "*{}"):
		errs = append(errs, field.Invalid(path.Child("designation"), d, `must be "auto", "annotation" or one username (no patterns)`))
	default:
		r.designation, r.fixedManager = DesignationFixed, d
	}
	if len(in.Managers) == 0 && in.Bind == nil && r.designation != DesignationFixed {
		errs = append(errs, field.Required(path.Child("managers"),
			"matches nothing: a rule without managers, bind or a fixed designation lets only operators write"))
	}
	switch in.HolderBinding {
	case "", "none":
		r.holderBinding = HolderBindingNone
	case "pod":
		r.holderBinding = HolderBindingPod
	case "username":
		r.holderBinding = HolderBindingUsername
	default:
		errs = append(errs, field.NotSupported(path.Child("holderBinding"), in.HolderBinding, []string{"none", "pod", "username"}))
	}
	return errs
}

// compileRenewals reads the clients' timings and what the rule does to
// renewals: the rate limit (I6), coalescing and the lease bounds (I10),
// checking each against what those clients survive.
func (r *Rule) compileRenewals(in *v1alpha1.Rule, path *field.Path, skew time.Duration) field.ErrorList {
	timings, errs := compileTimings(in.AssumedClient, path.Child("assumedClient"))
	timingsValid := len(errs) == 0
	r.maxRenewInterval = timings.MaxRenewInterval(skew)
	r.backOffLosers = in.BackOffLosers

	r.maxLeaseDuration = DefaultMaxLeaseDurationFactor * timings.LeaseDuration
	if in.MaxLeaseDuration != nil {
		r.maxLeaseDuration = in.MaxLeaseDuration.Duration
		switch p := path.Child("maxLeaseDuration"); {
		case r.maxLeaseDuration%time.Second != 0 || r.maxLeaseDuration <= 0:
			errs = append(errs, field.Invalid(p, r.maxLeaseDuration.String(), "must be a positive whole number of seconds, as leaseDurationSeconds is"))
		case timingsValid && r.maxLeaseDuration < timings.LeaseDuration:
			errs = append(errs, field.Invalid(p, r.maxLeaseDuration.String(), fmt.Sprintf(
				"is shorter than the assumed clients' lease duration %s: their own writes would be refused; raise it or declare the clients in assumedClient", timings.LeaseDuration)))
		}
	}

	if c := in.CoalesceRenewals; c != nil {
		errs = append(errs, r.compileCoalescing(c, path.Child("coalesceRenewals"), timings, timingsValid, skew)...)
	}

	limits := in.MinRenewInterval != nil && (in.MinRenewInterval.Auto || in.MinRenewInterval.Duration > 0)
	if limits && timingsValid && r.maxRenewInterval <= 0 {
		errs = append(errs, field.Invalid(path.Child("assumedClient"), timings.String(), fmt.Sprintf(
			"leaves no room for rate limiting with clockSkew %s: the longest interval these clients survive, "+
				"min(renewDeadline + retryPeriod, leaseDuration) - 2s - clockSkew, is %s; drop minRenewInterval or lower clockSkew",
			skew, r.maxRenewInterval)))
		timingsValid = false
	}
	if in.MinRenewInterval == nil {
		return errs
	}
	if r.coalesceInterval > 0 {
		// A renewal that leaves coalescing is one whose renewTime advanced
		// by the coalescing interval; by the server's clock that may look up
		// to clockSkew less. The rate limit must admit it.
		r.maxRenewInterval = min(r.maxRenewInterval, r.coalesceInterval-skew)
	}
	if in.MinRenewInterval.Auto {
		r.autoRenew = true
		return errs
	}
	iv := in.MinRenewInterval.Duration
	ivPath := path.Child("minRenewInterval")
	switch limit := r.maxRenewInterval; {
	case iv < 0:
		errs = append(errs, field.Invalid(ivPath, iv.String(), "must not be negative"))
	case timingsValid && iv > 0 && iv > limit && r.coalesceInterval > 0:
		errs = append(errs, field.Invalid(ivPath, iv.String(), fmt.Sprintf(
			"would refuse renewals that coalescing stores: they come coalesceRenewals (%s) apart, which with clockSkew %s may look like %s; use at most %s or \"auto\"",
			r.coalesceInterval, skew, limit, limit)))
	case timingsValid && iv > 0 && iv > limit:
		errs = append(errs, field.Invalid(ivPath, iv.String(), fmt.Sprintf(
			"clients with %s would lose their lease: a renewal held back that long misses the renew deadline (with clockSkew %s); "+
				"use at most %s or \"auto\", or, if the clients renew with longer timings, declare them in assumedClient",
			timings.Describe(), skew, limit)))
	}
	r.minRenewInterval = iv
	return errs
}

// compileCoalescing reads coalesceRenewals: "auto" is the longest interval
// the clients' followers survive, in whole seconds; a fixed one may not be
// longer.
func (r *Rule) compileCoalescing(c *v1alpha1.CoalesceInterval, p *field.Path, timings ClientTimings, timingsValid bool, skew time.Duration) field.ErrorList {
	limit := timings.MaxCoalesceInterval(skew)
	if c.Auto {
		r.coalesceInterval = limit.Truncate(time.Second)
		if timingsValid && r.coalesceInterval <= 0 {
			return field.ErrorList{field.Invalid(p, "auto", fmt.Sprintf(
				"clients with %s leave no room for coalescing with clockSkew %s (docs/rate-limiting.md); drop coalesceRenewals or declare the clients in assumedClient",
				timings.Describe(), skew))}
		}
		return nil
	}
	r.coalesceInterval = c.Duration
	switch {
	case c.Duration < 0:
		return field.ErrorList{field.Invalid(p, c.Duration.String(), "must not be negative")}
	case timingsValid && c.Duration > limit:
		return field.ErrorList{field.Invalid(p, c.Duration.String(), fmt.Sprintf(
			"followers of clients with %s would think the lease expired: stored renewals would come up to %s apart and a follower polls only every %s to %s (with clockSkew %s); use at most %s or \"auto\"",
			timings.Describe(), c.Duration+timings.RetryPeriod, timings.RetryPeriod,
			timings.RetryPeriod+time.Duration(float64(timings.RetryPeriod)*followerJitter), skew, limit))}
	}
	return nil
}

func (r *Rule) compileEnforcement(in *v1alpha1.Rule, path *field.Path) field.ErrorList {
	switch in.Enforcement {
	case "", "deny":
		r.enforcement = EnforceDeny
	case "warn":
		r.enforcement = EnforceWarn
	case "audit":
		r.enforcement = EnforceAudit
	default:
		return field.ErrorList{field.NotSupported(path.Child("enforcement"), in.Enforcement, []string{"deny", "warn", "audit"})}
	}
	return nil
}

func compileGlobs(in []string, path *field.Path, errs field.ErrorList) (pattern.Globs, field.ErrorList) {
	out := make(pattern.Globs, 0, len(in))
	for i, s := range in {
		if err := pattern.ValidateGlob(s); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), s, err.Error()))
			continue
		}
		out = append(out, pattern.Glob(s))
	}
	return out, errs
}

func onlyNeverIntercepted(namespaces pattern.Globs, never []string) bool {
	for _, g := range namespaces {
		if !strings.Contains(string(g), "*") {
			found := false
			for _, n := range never {
				if string(g) == n {
					found = true
				}
			}
			if found {
				continue
			}
		}
		return false
	}
	return true
}

func (r *Rule) selectsNoResource() bool { return !r.resources[0] && !r.resources[1] }

// shadows reports whether every object later selects is selected by r first.
func (r *Rule) shadows(later *Rule) bool {
	for i := range later.resources {
		if later.resources[i] && !r.resources[i] {
			return false
		}
	}
	return r.namespaces.Covers(later.namespaces) && r.names.Covers(later.names)
}

// compileTimings reads assumedClient, defaulting each field to client-go's
// value, and checks the settings are ones a client-go elector accepts.
func compileTimings(in *v1alpha1.ClientTimings, path *field.Path) (ClientTimings, field.ErrorList) {
	t := DefaultClientTimings
	if in == nil {
		return t, nil
	}
	var errs field.ErrorList
	set := func(d *v1alpha1.Duration, name string, into *time.Duration) {
		if d == nil {
			return
		}
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(path.Child(name), d.Duration.String(), "must be positive"))
			return
		}
		*into = d.Duration
	}
	set(in.LeaseDuration, "leaseDuration", &t.LeaseDuration)
	set(in.RenewDeadline, "renewDeadline", &t.RenewDeadline)
	set(in.RetryPeriod, "retryPeriod", &t.RetryPeriod)
	if len(errs) == 0 && !(t.RetryPeriod < t.RenewDeadline && t.RenewDeadline < t.LeaseDuration) {
		errs = append(errs, field.Invalid(path, t.String(),
			"want retryPeriod < renewDeadline < leaseDuration, as client-go's leader election requires"))
	}
	return t, errs
}
