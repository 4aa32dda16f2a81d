package topui

import (
	"bytes"
	"encoding/json"
	"k8s.io/cli-runtime/pkg/printers"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// What a client can write into a Lease's holderIdentity or an annotation
// (the API server accepts any string there), and what an API server's or
// a webhook replica's error can quote.
const (
	// The holder: sets the window title, then clears the screen.
	titleAndClear = "\x1b]0;pwned\x1b\\\x1b[2J"
	// OSC 52 writes the operator's clipboard.
	clipboard = "\x1b]52;c;cHduZWQ=\x07"
	// A C1 CSI (U+009B, xterm reads it as ESC [), the same as a raw
	// byte (invalid UTF-8), DEL, a bidirectional override and isolate,
	// a line separator, a newline and a tab.
	c1       = "\u009b2J"
	rawC1    = "\x9b2J"
	bidi     = "evil\u202eredloh\u2066x\u2069"
	breakers = "a\nb\tc\u2028d\x7fe"
	// Printable, but wide (two columns each) or of no width: the columns
	// must still line up.
	cjk       = "選挙リーダー"
	combining = "e\u0301e\u0301e\u0301"
)

var hostile = []string{titleAndClear, clipboard, c1, rawC1, bidi, breakers, cjk, combining}

// hostileReport puts a hostile string in every client-written field top
// prints.
func hostileReport() *leasetraffic.Report {
	r := &leasetraffic.Report{Time: t0, WindowSeconds: 10, ObservedSeconds: 10, WebhookSources: []string{"http://127.0.0.1:1/debug/leases"}}
	for i, h := range hostile {
		l := leasetraffic.LeaseTraffic{
			Resource: "leases", Namespace: "ns-" + h, Name: "lease-" + h, Holder: h, DesignatedManager: "designated-" + h,
			WritesPerSecond: 0.5, Writes: 5, LeaseDurationSeconds: 15, ExpiresInSeconds: 10,
			Writers:   []leasetraffic.Writer{{Manager: "mgr-" + h, Writes: 3}, {Manager: "ctl", Subresource: "sub-" + h, Writes: 2}},
			Contested: true, ContestedReason: "2 writers",
			Webhook: &leasetraffic.WebhookTraffic{Requests: 2, Verdicts: leasetraffic.WebhookVerdicts{Allow: 1, Deny: 1},
				Users: []leasetraffic.UserRequests{{User: "system:serviceaccount:a:" + h, Requests: 2}}},
			Projected: &leasetraffic.Effects{Refused: i},
		}
		r.Leases = append(r.Leases, l)
		r.Namespaces = append(r.Namespaces, leasetraffic.NamespaceTotals{Namespace: l.Namespace, Totals: leasetraffic.Totals{Leases: 1, Writes: 5}})
	}
	r.Cluster = leasetraffic.Totals{Leases: len(hostile), Writes: 5 * len(hostile)}
	r.Policy = &leasetraffic.PolicyReport{Note: leasetraffic.ProjectionNote,
		Outcomes: []leasetraffic.ProjectedOutcome{{Rule: "rule-" + titleAndClear, Verdict: "deny", Invariant: "I4", Effect: "refuse", WriterBasis: "designation", Writes: 1}}}
	return r
}

// rawControl returns the first character of out that would act on a
// terminal rather than print: a C0 control but the line's own newline,
// DEL, a C1 control, a format character (bidirectional overrides) or a
// byte that is not UTF-8.
func rawControl(out string) (rune, bool) {
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			return rune(out[i]), true
		}
		if r != '\n' && !oneline.Printable(r) {
			return r, true
		}
	}
	return 0, false
}

// cellStarts are the terminal columns where the cells of a table line
// start: after two spaces or more.
func cellStarts(line string) []int {
	starts := []int{0}
	col, spaces := 0, 0
	for _, g := range graphemes(line) {
		if g == " " {
			spaces++
		} else {
			if spaces >= 2 {
				starts = append(starts, col)
			}
			spaces = 0
		}
		col += ansi.StringWidth(g)
	}
	return starts
}

func graphemes(s string) []string {
	var out []string
	for s != "" {
		g, _ := ansi.FirstGraphemeCluster(s, ansi.GraphemeWidth)
		out = append(out, g)
		s = s[len(g):]
	}
	return out
}

// The case and its class: no client-written byte acts on the
// terminal in table or wide output, each is shown escaped as `leaseguard
// check` shows it, and every row's cells start at the header's columns.
func TestClientWrittenStringsAreEscapedInTables(t *testing.T) {
	r := hostileReport()
	for _, f := range []Format{Table, Wide} {
		t.Run(string(f), func(t *testing.T) {
			var out bytes.Buffer
			if err := Write(&out, r, f); err != nil {
				t.Fatal(err)
			}
			if c, ok := rawControl(out.String()); ok {
				t.Fatalf("%U reaches the terminal raw:\n%s", c, out.String())
			}
			for _, want := range []string{
				`\x1b]0;pwned\x1b\\`, `\x1b]52;c;cHduZWQ=\a`, `\u009b2J`, `\x9b2J`, `evil\u202eredloh`, `a\nb\tc\u2028d\x7fe`,
				cjk, combining, `ns-\x1b]0;pwned\x1b\\\x1b[2J`, `rule-\x1b]0;pwned\x1b\\\x1b[2J`,
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %s:\n%s", want, out.String())
				}
			}
			if f == Wide {
				for _, want := range []string{`designated-\x1b]0;pwned`, `mgr-\u009b2J×3,ctl/sub-\u009b2J×2`, `sa:a:evil\u202eredloh\u2066x\u2069×2`} {
					if !strings.Contains(out.String(), want) {
						t.Errorf("wide lacks %s:\n%s", want, out.String())
					}
				}
			}
			for _, section := range splitSections(strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"))[1:] {
				if !strings.HasPrefix(section[0], "NAMESPACE") && !strings.HasPrefix(section[0], "RULE") {
					continue
				}
				head := cellStarts(section[0])
				for _, row := range section[1:] {
					if strings.HasPrefix(row, "note: ") {
						continue
					}
					if got := cellStarts(row); !reflect.DeepEqual(got, head) {
						t.Errorf("cells start at columns %v, the header's at %v:\n%s\n%s", got, head, section[0], row)
					}
				}
			}
		})
	}
}

// The plain table cuts names and holders to their columns by what is
// shown: a CJK holder by terminal columns, an escaped one by its escapes,
// never inside one.
func TestClipMeasuresWhatIsShown(t *testing.T) {
	cases := []struct{ in, want string }{
		{"pod-0_abcdef", "pod-0_abcdef"},
		{strings.Repeat("選", 20), strings.Repeat("選", 11) + "…"}, // 22 columns and the mark
		{strings.Repeat("\x1b", 10), `\x1b\x1b\x1b\x1b\x1b…`},    // 23 columns would split the sixth
		{"ab\u202ecdefghijklmnopqrstuvwxyz", `ab\u202ecdefghijklmnopq…`},
		{"abcdefghijklmnopqrstu\u202eyz", `abcdefghijklmnopqrstu…`},
		{`a\b` + "\x1b", `a\\b\x1b`},
		{strings.Repeat("e\u0301", 30), strings.Repeat("e\u0301", 23) + "…"},
	}
	for _, c := range cases {
		got := clip(c.in, 24)
		if got != c.want {
			t.Errorf("clip(%q, 24) = %q, want %q", c.in, got, c.want)
		}
		if w := ansi.StringWidth(got); w > 24 {
			t.Errorf("clip(%q, 24) is %d columns wide", c.in, w)
		}
	}
}

// JSON and YAML are for programs: each value is carried exactly, in the
// format's own escapes, and no byte of the document acts on a terminal it
// is printed to. YAML through sigs.k8s.io/yaml printed nothing at all for
// a holder with a C1 control.
func TestMachineFormatsCarryValuesExactlyAndEscaped(t *testing.T) {
	r := hostileReport()
	r.Leases[0].Holder += "\U000E0001" // a format character beyond the BMP
	// The values a reader gets back: encoding/json reads a byte that is not
	// UTF-8 as U+FFFD, as the API server does; no stored object holds one.
	want := hostileReport()
	want.Leases[0].Holder += "\U000E0001"
	want.Time = want.Time.Local()
	for i := range want.Leases {
		for _, s := range []*string{&want.Leases[i].Holder, &want.Leases[i].Name, &want.Leases[i].Namespace, &want.Leases[i].DesignatedManager,
			&want.Leases[i].Writers[0].Manager, &want.Leases[i].Writers[1].Subresource, &want.Leases[i].Webhook.Users[0].User} {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
		want.Namespaces[i].Namespace = want.Leases[i].Namespace
	}
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			var out bytes.Buffer
			if err := Write(&out, r, f); err != nil {
				t.Fatal(err)
			}
			if c, ok := rawControl(out.String()); ok {
				t.Fatalf("%U reaches the terminal raw:\n%s", c, out.String())
			}
			var back leasetraffic.Report
			var err error
			if f == JSON {
				err = json.Unmarshal(out.Bytes(), &back)
			} else {
				err = yaml.Unmarshal(out.Bytes(), &back)
			}
			if err != nil {
				t.Fatalf("%v:\n%s", err, out.String())
			}
			back.Time = back.Time.Local()
			if !reflect.DeepEqual(&back, want) {
				t.Errorf("read back:\n%+v\nwant\n%+v\n%s", back.Leases, want.Leases, out.String())
			}
			if f == YAML {
				// Read as a YAML 1.2 parser reads it too, not only
				// through JSON.
				var doc map[string]any
				if err := yaml3.Unmarshal(out.Bytes(), &doc); err != nil {
					t.Fatal(err)
				}
				got := doc["leases"].([]any)[4].(map[string]any)["holder"]
				if got != bidi {
					t.Errorf("yaml.v3 reads the holder %q, want %q", got, bidi)
				}
			}
		})
	}
	// Without such characters the bytes are the encoders' own.
	plain, _ := source(3)
	var js bytes.Buffer
	if err := Write(&js, plain(leasetraffic.ReportOptions{}), JSON); err != nil {
		t.Fatal(err)
	}
	std, _ := json.MarshalIndent(plain(leasetraffic.ReportOptions{}), "", "  ")
	if js.String() != string(std)+"\n" {
		t.Errorf("JSON of plain values changed:\n%s\nwant\n%s", js.String(), std)
	}
}

// sgr matches the styling the live view adds itself.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// The live view shows the same escaped text: the only escape sequences in
// its frame are its own styling, and every line fits the terminal.
func TestLiveViewEscapesClientWrittenStrings(t *testing.T) {
	r := hostileReport()
	m := &model{src: func(leasetraffic.ReportOptions) *leasetraffic.Report { return r }, interval: 1,
		statusLine: func() ([]string, string) {
			return []string{"multiclusterleases: " + c1}, "watching leases: " + titleAndClear + clipboard
		}}
	m.refresh()
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 40})
	for _, wide := range []bool{false, true} {
		m.wide = wide
		frame := m.render()
		if c, ok := rawControl(sgr.ReplaceAllString(frame, "")); ok {
			t.Fatalf("wide %v: %U reaches the terminal raw:\n%s", wide, c, frame)
		}
		for _, want := range []string{`watch error: watching leases: \x1b]0;pwned\x1b\\\x1b[2J\x1b]52;c;`, `not watched: multiclusterleases: \u009b2J`, `\x1b]0;pwned`} {
			if !strings.Contains(frame, want) {
				t.Errorf("wide %v: frame lacks %s:\n%s", wide, want, frame)
			}
		}
		for _, l := range strings.Split(frame, "\n") {
			if w := ansi.StringWidth(l); w > 100 {
				t.Errorf("wide %v: line %d columns wide on a 100-column terminal: %q", wide, w, l)
			}
		}
	}
}

// kubectl's template printers (-o jsonpath=…, go-template=…) print values
// into the terminal as the table does: each client-written value escaped
// as the table shows it, none raw; what the template itself writes
// (newlines, tabs) stays.
func TestTemplateOutputsEscapeClientWrittenStrings(t *testing.T) {
	r := hostileReport()
	for name, tc := range map[string]struct {
		printer printers.ResourcePrinter
	}{
		"jsonpath":    {jsonPathPrinter(t, `{range .leases[*]}{.holder}{"\n"}{end}`)},
		"go-template": {goTemplatePrinter(t, `{{range .leases}}{{.holder}}{{"\n"}}{{end}}`)},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := WritePrinted(&out, r, tc.printer); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != len(r.Leases) {
				t.Fatalf("%d lines, want one per lease (%d):\n%s", len(lines), len(r.Leases), out.String())
			}
			for i, l := range r.Leases {
				// The data is the report's JSON: a byte that is not UTF-8
				// reads as U+FFFD there, as in -o json (no stored object
				// holds one).
				if want := cell(strings.ToValidUTF8(l.Holder, "\uFFFD")); lines[i] != want {
					t.Errorf("line %d: %q, want the holder as the table shows it, %q", i, lines[i], want)
				}
			}
			if c, ok := rawControl(strings.ReplaceAll(out.String(), "\n", "")); ok {
				t.Fatalf("%U reaches the terminal raw:\n%s", c, out.String())
			}
		})
	}
}

func jsonPathPrinter(t *testing.T, tmpl string) printers.ResourcePrinter {
	t.Helper()
	p, err := printers.NewJSONPathPrinter(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func goTemplatePrinter(t *testing.T, tmpl string) printers.ResourcePrinter {
	t.Helper()
	p, err := printers.NewGoTemplatePrinter([]byte(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
