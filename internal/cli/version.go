package cli

import (
	"fmt"
	"regexp"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is the version a binary reports: what the build stamped into it
// (make stamps v$(cat VERSION) with -ldflags "-X main.version=..."), else
// what the Go toolchain recorded (VersionFromBuildInfo), so that a binary
// built without make still says which code it is.
func Version(stamped string) string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return VersionFromBuildInfo(info)
}

// pseudoVersion matches the tail of a Go pseudo-version
// (v0.0.0-20260102150405-abcdef012345, optionally +dirty), which says no
// more than the commit it was made from.
var pseudoVersion = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}(\+dirty)?$`)

// VersionFromBuildInfo is the version of an unstamped build:
//   - the module's release version, as `go install
//     github.com/leaseguard/leaseguard/cmd/...@v0.4.0` records it, and a
//     build of a checkout at a release tag (v0.4.0, or v0.4.0+dirty with
//     uncommitted changes);
//   - else the commit of the checkout it was built in, devel+<revision>,
//     with -dirty when the work tree had uncommitted changes (Go records a
//     pseudo-version there too, but the revision is what one looks up);
//   - else the module version Go recorded (a pseudo-version: go install
//     ...@<commit>), else "devel".
func VersionFromBuildInfo(info *debug.BuildInfo) string {
	if info == nil {
		return "devel"
	}
	module := info.Main.Version
	if module == "(devel)" {
		module = ""
	}
	if module != "" && !pseudoVersion.MatchString(module) {
		return module
	}
	var revision string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if revision != "" {
		if len(revision) > 12 {
			revision = revision[:12]
		}
		v := "devel+" + revision
		if dirty {
			v += "-dirty"
		}
		return v
	}
	if module != "" {
		return module
	}
	return "devel"
}

// AddVersion gives root a `version` command and a --version flag, both
// printing Version(stamped) and nothing else, so that scripts can read it.
func AddVersion(root *cobra.Command, stamped string) {
	v := Version(stamped)
	root.AddCommand(NewVersionCommand(v))
	root.Version = v
	root.SetVersionTemplate("{{.Version}}\n")
	// Declared here rather than left to cobra, which would also take -v:
	// --version only, and -v stays unknown instead of meaning the version.
	root.Flags().Bool("version", false, "print the version and exit")
}

// NewVersionCommand prints version.
func NewVersionCommand(version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version) },
	}
}
