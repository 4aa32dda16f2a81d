package cli

import (
	"fmt"
	"io"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// checkRoutable renders p as an install of leaseguard in namespace would
// (manifests.Render, the defaults) and reports on errOut, one line each,
// where the policy does not fit the API server's limits and what is
// routed instead. A policy the API server could not be given a routing
// for at all is bad input: leaseguard would enforce what nothing sends it.
func checkRoutable(p *policy.Policy, namespace, path string, errOut io.Writer) error {
	o := manifests.Defaults()
	o.Namespace = namespace
	r, err := manifests.Render(p, o)
	if err != nil {
		return fmt.Errorf("policy file %s: %w", path, err)
	}
	if errOut != nil {
		for _, n := range r.Limits {
			fmt.Fprintln(errOut, "leaseguard: note: routing broader than the policy:", n)
		}
	}
	return nil
}
