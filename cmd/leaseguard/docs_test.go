package main

// Docs that cannot drift: the tables of flags and of metrics in the docs are
// checked against the commands and the metrics registry built here, in
// process, as the binaries and the server build them.

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/leaseguard/leaseguard/internal/cli"
	"github.com/leaseguard/leaseguard/internal/top/topcmd"
	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

// repoRoot is the repository, seen from this package's folder.
const repoRoot = "../.."

// docFiles are the files searched for tables of flags and metrics, relative
// to the repository.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(f, repoRoot+string(filepath.Separator))))
	}
	return out
}

// A flagsTable is a doc table listing the flags of one command.
type flagsTable struct {
	file, heading string // the table is the one with a "flag" header under heading
	command       string // as users type it
	cmd           func(t *testing.T) *cobra.Command
	// byReference: a row whose first cell starts with the key documents,
	// by reference, every flag of the set (flags it also names must exist).
	byReference map[string]map[string]bool
}

// standardFlags every command has without documenting them in a table, and why.
var standardFlags = map[string]string{
	"help": "cobra's own -h/--help on every command: it prints the flags themselves",
}

func flagsTables() []flagsTable {
	return []flagsTable{
		{
			file: "docs/operations.md", heading: "Running the webhook", command: "leaseguard serve",
			cmd: func(t *testing.T) *cobra.Command { return subcommand(t, newRootCommand(), "serve") },
		},
		{
			file: "docs/top.md", heading: "kubectl leaseguard top: live lease traffic", command: "kubectl leaseguard top",
			// The plugin's root adds topcmd.New as it is (cmd/kubectl-leaseguard).
			cmd: func(t *testing.T) *cobra.Command {
				root := &cobra.Command{Use: "kubectl-leaseguard"}
				root.AddCommand(topcmd.New(cli.Version("")))
				cli.AddVersion(root, "")
				cli.Prepare(root)
				return subcommand(t, root, "top")
			},
			byReference: map[string]map[string]bool{"kubectl's:": kubectlFlags()},
		},
	}
}

func subcommand(t *testing.T, root *cobra.Command, name string) *cobra.Command {
	t.Helper()
	cmd, _, err := root.Find([]string{name})
	if err != nil || cmd.Name() != name {
		t.Fatalf("no command %q: %v", name, err)
	}
	cmd.InitDefaultHelpFlag()
	return cmd
}

// kubectlFlags are the flags of kubectl's own client options
// (k8s.io/cli-runtime's genericclioptions), which top has as kubectl does.
func kubectlFlags() map[string]bool {
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}

// commandFlags are the flags cmd accepts: its own and those it inherits.
func commandFlags(cmd *cobra.Command) map[string]*pflag.Flag {
	flags := map[string]*pflag.Flag{}
	add := func(f *pflag.Flag) { flags[f.Name] = f }
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	return flags
}

// Every flag a flags table names exists on its command, under that name and
// shorthand, and every flag of the command is in the table.
func TestDocsFlagTables(t *testing.T) {
	tables := flagsTables()
	checked := map[string]bool{}
	for _, ft := range tables {
		t.Run(ft.command, func(t *testing.T) {
			cmd := ft.cmd(t)
			flags := commandFlags(cmd)
			byShorthand := map[string]*pflag.Flag{}
			for _, f := range flags {
				if f.Shorthand != "" {
					byShorthand[f.Shorthand] = f
				}
			}
			tbl := findTable(t, ft.file, ft.heading, "flag")
			checked[tableKey(ft.file, tbl)] = true
			documented := map[string]bool{}
			// lookup resolves a flag as the docs write it (--name or -x).
			lookup := func(tok string) (*pflag.Flag, bool) {
				if name, ok := strings.CutPrefix(tok, "--"); ok {
					f, ok := flags[name]
					return f, ok
				}
				f, ok := byShorthand[strings.TrimPrefix(tok, "-")]
				return f, ok
			}
			for _, row := range tbl.rows {
				for i, cell := range row.cells {
					for _, tok := range flagTokens(cell) {
						f, ok := lookup(tok)
						switch {
						case !ok:
							t.Errorf("%s:%d: the flags table of `%s` names %s, which `%s` does not have (remove it from the table, or fix its name)",
								ft.file, row.line, ft.command, tok, ft.command)
						case i == 0:
							documented[f.Name] = true
						}
					}
				}
				for prefix, set := range ft.byReference {
					if strings.HasPrefix(row.cells[0], prefix) {
						for name := range set {
							documented[name] = true
						}
					}
				}
			}
			for name := range ft.byReference {
				found := false
				for _, row := range tbl.rows {
					found = found || strings.HasPrefix(row.cells[0], name)
				}
				if !found {
					t.Errorf("%s: the flags table of `%s` has no row starting %q, which documents those flags", ft.file, ft.command, name)
				}
			}
			for name := range standardFlags {
				if _, ok := flags[name]; !ok {
					t.Errorf("standard flag --%s is not a flag of `%s`: drop it from standardFlags", name, ft.command)
				}
			}
			var missing []string
			for name, f := range flags {
				if !documented[name] && standardFlags[name] == "" {
					missing = append(missing, fmt.Sprintf("--%s (%s)", name, f.Usage))
				}
			}
			sort.Strings(missing)
			for _, m := range missing {
				t.Errorf("%s: `%s` has flag %s, missing from its flags table (under %q): add a row", ft.file, ft.command, m, ft.heading)
			}
		})
	}
	// A new flags table must be checked too.
	for _, file := range docFiles(t) {
		for _, tbl := range parseTables(t, file) {
			if firstHeader(tbl) == "flag" && !checked[tableKey(file, tbl)] {
				t.Errorf("%s:%d: a flags table (under %q) this test does not check: add it to flagsTables with its command", file, tbl.line, tbl.heading)
			}
		}
	}
}

// Every metric the metrics table names is registered by leaseguard, every
// leaseguard_* metric registered is in the table, and every leaseguard_*
// name anywhere in the docs is a registered metric.
func TestDocsMetricsTable(t *testing.T) {
	registered := registeredMetrics(t)
	const file, heading = "docs/operations.md", "Metrics"
	tbl := findTable(t, file, heading, "metric")
	documented := map[string]bool{}
	for _, row := range tbl.rows {
		for _, name := range metricTokens(row.cells[0]) {
			documented[name] = true
			if !registered[name] {
				t.Errorf("%s:%d: the metrics table names %s, which leaseguard does not register (remove it from the table, or fix its name)", file, row.line, name)
			}
		}
	}
	var missing []string
	for name := range registered {
		if !documented[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("%s: leaseguard registers %s, missing from the metrics table (under %q): add a row", file, name, heading)
	}
	for _, file := range docFiles(t) {
		data := readDoc(t, file)
		for i, line := range strings.Split(data, "\n") {
			for _, name := range metricNameRe.FindAllString(line, -1) {
				if !registered[name] && !registered[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] {
					t.Errorf("%s:%d: %s is not a metric leaseguard registers", file, i+1, name)
				}
			}
		}
		for _, tbl := range parseTables(t, file) {
			if firstHeader(tbl) == "metric" && (file != "docs/operations.md" || tbl.heading != heading) {
				t.Errorf("%s:%d: a metrics table (under %q) this test does not check: check it, or merge it into %s's", file, tbl.line, tbl.heading, "docs/operations.md")
			}
		}
	}
}

var metricNameRe = regexp.MustCompile(`\bleaseguard_[a-z0-9_]*[a-z0-9]`)

func metricTokens(cell string) []string {
	var out []string
	for _, tok := range backticked(cell) {
		if metricNameRe.FindString(tok) == tok {
			out = append(out, tok)
		}
	}
	return out
}

// registeredMetrics are the names of the leaseguard_* metrics the server
// registers with every option on: webhook/serve/metrics' Recorder with each of its
// registering methods (as webhook/serve/server.Run calls them: New, then
// ManageAdmissionConfiguration, MetricsAuth, ...), and controller-runtime's
// registry, which /metrics serves too.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := &describingRegisterer{t: t, Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	rec, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	registererType := reflect.TypeOf((*prometheus.Registerer)(nil)).Elem()
	errorType := reflect.TypeOf((*error)(nil)).Elem()
	v := reflect.ValueOf(rec)
	var called []string
	for i := 0; i < v.NumMethod(); i++ {
		m, mt := v.Method(i), v.Type().Method(i)
		if m.Type().NumIn() == 1 && m.Type().In(0) == registererType && m.Type().NumOut() == 1 && m.Type().Out(0) == errorType {
			if out := m.Call([]reflect.Value{reflect.ValueOf(prometheus.Registerer(reg))}); !out[0].IsNil() {
				t.Fatalf("Recorder.%s: %v", mt.Name, out[0].Interface())
			}
			called = append(called, mt.Name)
		}
	}
	for _, want := range []string{"ManageAdmissionConfiguration", "MetricsAuth"} {
		if !contains(called, want) {
			t.Fatalf("Recorder has no method %s(prometheus.Registerer) error (found %v): update this test", want, called)
		}
	}
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "leaseguard_") {
			reg.names[f.GetName()] = true
		}
	}
	if len(reg.names) < 10 {
		t.Fatalf("only %d leaseguard_* metrics registered: %v", len(reg.names), reg.names)
	}
	return reg.names
}

// describingRegisterer records the names of the metrics registered.
type describingRegisterer struct {
	prometheus.Registerer
	t     *testing.T
	names map[string]bool
}

var fqNameRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

func (d *describingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := fqNameRe.FindStringSubmatch(desc.String())
		if m == nil {
			d.t.Fatalf("cannot read the metric name of %s", desc)
		}
		if strings.HasPrefix(m[1], "leaseguard_") {
			d.names[m[1]] = true
		}
	}
	return d.Registerer.Register(c)
}

func (d *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// A table of a markdown file.
type table struct {
	heading string // the nearest heading above it
	line    int    // of its header
	header  []string
	rows    []tableRow
}

type tableRow struct {
	line  int
	cells []string
}

func tableKey(file string, tbl table) string { return fmt.Sprintf("%s:%d", file, tbl.line) }

func firstHeader(tbl table) string { return strings.ToLower(strings.TrimSpace(tbl.header[0])) }

func readDoc(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// parseTables reads the tables of a markdown file, outside fenced code.
func parseTables(t *testing.T, file string) []table {
	t.Helper()
	var tables []table
	var heading string
	fenced, inTable := false, false
	lines := strings.Split(readDoc(t, file), "\n")
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced {
			inTable = false
			continue
		}
		if strings.HasPrefix(line, "#") {
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := splitRow(line)
		switch {
		case !inTable:
			// A header is followed by its |---| line.
			if i+1 < len(lines) && isSeparator(strings.TrimSpace(lines[i+1])) {
				tables = append(tables, table{heading: heading, line: i + 1, header: cells})
				inTable = true
			}
		case isSeparator(line):
			// the separator
		default:
			tbl := &tables[len(tables)-1]
			tbl.rows = append(tbl.rows, tableRow{line: i + 1, cells: cells})
		}
	}
	return tables
}

func isSeparator(line string) bool {
	return strings.HasPrefix(line, "|") && strings.Contains(line, "-") && strings.Trim(line, "|-: ") == ""
}

// findTable is the table under heading whose first header cell is first.
func findTable(t *testing.T, file, heading, first string) table {
	t.Helper()
	var found []table
	for _, tbl := range parseTables(t, file) {
		if tbl.heading == heading && firstHeader(tbl) == first {
			found = append(found, tbl)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d tables with a %q column under the heading %q, want 1: update this test with the doc", file, len(found), first, heading)
	}
	if len(found[0].rows) == 0 {
		t.Fatalf("%s:%d: the %s table has no rows", file, found[0].line, first)
	}
	return found[0]
}

// splitRow splits a table row into its cells; a | inside backticks or
// escaped is no separator.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	code := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case c == '`':
			code = !code
			cell.WriteByte(c)
		case c == '|' && !code:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

var backtickRe = regexp.MustCompile("`([^`]+)`")

func backticked(cell string) []string {
	var out []string
	for _, m := range backtickRe.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// flagRe is a flag as the docs write it, at the start of a code span:
// `--name`, `--name=value`, `--name value`, `-x`.
var flagRe = regexp.MustCompile(`^(--[a-z0-9][a-z0-9-]*|-[a-zA-Z])(?:$|[= ])`)

func flagTokens(cell string) []string {
	var out []string
	for _, code := range backticked(cell) {
		if m := flagRe.FindStringSubmatch(code); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}
