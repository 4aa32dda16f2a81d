//go:build !dev

package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/internal/cli"
)

// The dev command links the local control-plane harness (envtest), which
// has no place in the production image: its package init creates a cache
// folder and panics on a read-only root filesystem. It is built in with
// `-tags dev` (make run).
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "dev",
		Short:  "Run leaseguard on a local control plane (needs a build with -tags dev: make run)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return cli.Usage(errors.New("this leaseguard was built without the dev command; use `make run`, or build with `go build -tags dev ./cmd/leaseguard`"))
		},
	}
}
