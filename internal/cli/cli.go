// Package cli holds leaseguard's offline commands — check, manifests and
// vap — and what every command of both binaries shares: exit codes, the
// --coalesce flag type and running a root command. Each command is written
// once here and added to the binaries that carry it: cmd/leaseguard (the
// server: serve, version, check, manifests) and cmd/kubectl-leaseguard (the
// kubectl plugin: top, check, vap, manifests). `top`, which links client
// tooling and a terminal UI, is in the subpackage topcmd, so that the
// server's binary does not link it.
package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, the same for every command of both binaries.
const (
	// ExitOK: done; the write is admitted, the rendering written.
	ExitOK = 0
	// ExitRefused: the write is denied (check), --strict found limits
	// (manifests, vap), or the cluster refused or could not serve what a
	// command reads (top).
	ExitRefused = 1
	// ExitUsage: bad usage (flags, arguments) or unreadable input (a
	// policy, object or kubeconfig file).
	ExitUsage = 2
)

// ExitError carries a process exit code through cobra.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usage marks bad usage or unreadable input: exit status 2.
func Usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// Refused marks a refusal (a denied write, --strict limits): exit status
// 1. A nil err prints nothing more.
func Refused(err error) error { return &ExitError{Code: ExitRefused, Err: err} }

// ExitCode is the exit status for err, as main returns it: an ExitError's
// code; cobra's own usage errors (unknown command or flag, missing flag
// value) 2; anything else 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	if isCobraUsageError(err) {
		return ExitUsage
	}
	return ExitRefused
}

// isCobraUsageError recognises the errors cobra makes itself before a
// command runs (they are plain errors): an unknown command.
func isCobraUsageError(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command ")
}

// Run executes root with args (os.Args[1:] in main): flag and argument
// mistakes of every command exit 2. It returns what the process should
// exit with, after printing the error, if any, to stderr as "leaseguard:
// error".
func Run(root *cobra.Command, args []string, stderr io.Writer) int {
	Prepare(root)
	root.SetArgs(NormalizeArgs(args))
	err := root.Execute()
	if err != nil && err.Error() != "" {
		fmt.Fprintln(stderr, "leaseguard:", err)
	}
	return ExitCode(err)
}

// RunCaptured runs root on args as Run does, in process, and returns what
// it printed and its exit status: the binaries' tests run their commands
// as a user would.
func RunCaptured(root *cobra.Command, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = Run(root, args, &errOut)
	return out.String(), errOut.String(), code
}

// Main runs root on the process's arguments and exits with its status.
func Main(root *cobra.Command) {
	os.Exit(Run(root, os.Args[1:], os.Stderr))
}

// Prepare makes every command of root report usage mistakes as such (exit
// 2): flag errors, and positional arguments where a command takes none.
// Commands keep their own Args checks, wrapped.
func Prepare(root *cobra.Command) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil && c.Annotations[preparedAnnotation] == "" {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					var e *ExitError
					if errors.As(err, &e) {
						return err
					}
					return Usage(err)
				}
				return nil
			}
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[preparedAnnotation] = "true"
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

const preparedAnnotation = "leaseguard.io/cli-prepared"

// writeOutput writes a rendering to the file named by -o, or to standard
// output.
// yamlOutput is the output flags of a command that prints Kubernetes
// objects: -o/--output is the format, as in every command of both binaries
// (and kubectl), here yaml only; --output-file the file.
type yamlOutput struct{ format, file string }

func (y *yamlOutput) add(fs *pflag.FlagSet) {
	fs.StringVarP(&y.format, "output", "o", "yaml", "output format: yaml (the objects as a YAML stream)")
	fs.StringVar(&y.file, "output-file", "", "write to this file instead of standard output")
}

// check refuses any format but yaml, naming --output-file for what was
// likely meant: before -o meant the file here.
func (y *yamlOutput) check() error {
	if y.format == "yaml" {
		return nil
	}
	return Usage(fmt.Errorf("--output %q: the only output format is yaml; to write to a file, use --output-file %s", y.format, y.format))
}

func writeOutput(cmd *cobra.Command, outPath string, data []byte) error {
	if outPath != "" {
		return os.WriteFile(outPath, data, 0o644)
	}
	_, err := cmd.OutOrStdout().Write(data)
	return err
}
