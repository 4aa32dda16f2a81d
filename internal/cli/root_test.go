package cli

import "github.com/spf13/cobra"

// version is what the test root's version command prints.
const version = "v0.0.0-test"

// newRootCommand is a root with this package's commands, prepared as the
// binaries prepare theirs.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{Use: "leaseguard"}
	root.AddCommand(NewCheckCommand(), NewManifestsCommand(), NewVAPCommand(), NewVersionCommand(version))
	Prepare(root)
	return root
}
