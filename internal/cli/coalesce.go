package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// CoalesceFlag is --coalesce, one flag type wherever it appears: where
// early renewals are coalesced — "policy" (a MutatingAdmissionPolicy in the
// API server), "webhook" (leaseguard's mutating webhook) or "off". A command
// lists the places it can render (vap, which renders no webhook: policy
// and off). A bare --coalesce means --coalesce=policy (NormalizeArgs), which
// keeps `vap --coalesce`, once a bool, working.
type CoalesceFlag struct {
	value   manifests.Coalescing
	allowed []manifests.Coalescing
}

// NewCoalesceFlag is --coalesce with value def, accepting allowed.
func NewCoalesceFlag(def manifests.Coalescing, allowed ...manifests.Coalescing) *CoalesceFlag {
	return &CoalesceFlag{value: def, allowed: allowed}
}

// Value is the chosen place.
func (f *CoalesceFlag) Value() manifests.Coalescing { return f.value }

func (f *CoalesceFlag) String() string { return string(f.value) }

// Type names the values in --help.
func (f *CoalesceFlag) Type() string { return f.choices("|") }

// Set parses a value; the old bool form (`vap --coalesce=true`) is refused
// with the new one.
func (f *CoalesceFlag) Set(s string) error {
	for _, c := range f.allowed {
		if string(c) == s {
			f.value = c
			return nil
		}
	}
	if s == "true" || s == "false" {
		return fmt.Errorf("want %s: --coalesce is no longer a bool; write --coalesce=policy for --coalesce=true, --coalesce=off for --coalesce=false", f.choices(" or "))
	}
	return fmt.Errorf("want %s", f.choices(" or "))
}

func (f *CoalesceFlag) choices(sep string) string {
	s := make([]string, len(f.allowed))
	for i, c := range f.allowed {
		s[i] = string(c)
	}
	return strings.Join(s, sep)
}

// coalesceUsage is the help of --coalesce.
func (f *CoalesceFlag) usage() string {
	places := map[manifests.Coalescing]string{
		manifests.CoalesceInAPIServer: `"policy" (a MutatingAdmissionPolicy in the API server, Kubernetes 1.36 and later)`,
		manifests.CoalesceInWebhook:   `"webhook" (leaseguard's mutating webhook)`,
		manifests.CoalesceOff:         `"off"`,
	}
	s := make([]string, len(f.allowed))
	for i, c := range f.allowed {
		s[i] = places[c]
	}
	return "where early renewals are coalesced: " + strings.Join(s, ", ") + `; a bare --coalesce means "policy"`
}

// add registers the flag on fs.
func (f *CoalesceFlag) add(fs *pflag.FlagSet) {
	fs.Var(f, "coalesce", f.usage())
}

// NormalizeArgs rewrites a bare --coalesce (the last argument, or followed
// by another flag) to --coalesce=policy, so that the flag takes its value
// as every other string flag does (--coalesce off, --coalesce=off) and the
// old bool form of `vap --coalesce` still works. Nothing after "--" is
// touched.
func NormalizeArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "--coalesce" && (i+1 == len(out) || strings.HasPrefix(out[i+1], "-")) {
			out[i] = "--coalesce=" + string(manifests.CoalesceInAPIServer)
		}
	}
	return out
}
