// Package topui renders `leaseguard top` reports: as a plain table (table
// or wide), as JSON or YAML for scripts, through kubectl's template
// printers (jsonpath, go-template), and as a live terminal UI
// (bubbletea) when attached to a terminal.
package topui

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// Format is an output format (-o).
type Format string

// Output formats.
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// ParseFormat checks an -o value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Table, Wide, JSON, YAML:
		return f, nil
	case "":
		return Table, nil
	}
	return "", fmt.Errorf("-o %q: want table, wide, json or yaml", s)
}

// Write prints a report in the given format. Client-written values are
// escaped in every format (escape.go): for the terminal in table and wide,
// in the format's own notation, exactly, in JSON and YAML.
func Write(w io.Writer, r *leasetraffic.Report, f Format) error {
	switch f {
	case JSON:
		return writeJSON(w, r)
	case YAML:
		return writeYAML(w, r)
	}
	_, err := io.WriteString(w, strings.Join(Lines(r, f == Wide, nil), "\n")+"\n")
	return err
}

// Status is the extra header line of the terminal UI and of a plain report:
// what is watched and the last watch error. Lines escapes them: an error
// of the API server or of a webhook replica can quote client data.
type Status struct {
	Sort    string
	Filter  string
	Skipped []string
	LastErr string
}

// Lines renders a report as text lines: a summary, the namespaces, the
// leases and, with a policy, the projection.
func Lines(r *leasetraffic.Report, wide bool, st *Status) []string {
	var lines []string
	head := fmt.Sprintf("leaseguard top  %s  window %s (observed %s)",
		r.Time.UTC().Format(time.RFC3339), seconds(r.WindowSeconds), seconds(r.ObservedSeconds))
	if st != nil && st.Sort != "" {
		head += "  sort " + st.Sort
	}
	if st != nil && st.Filter != "" {
		head += "  " + cell(st.Filter)
	}
	lines = append(lines, head)
	lines = append(lines, "cluster: "+totals(&r.Cluster))
	if b := r.AdmissionBypass; b != nil {
		// The reason is whatever the annotation says: quoted, so that it
		// cannot write to the terminal.
		lines = append(lines, "admission configuration "+b.Configuration+": BYPASSED (leaseguard.io/bypass: "+strconv.Quote(b.Reason)+"): leaseguard does not repair it")
	}
	if st != nil {
		for _, s := range st.Skipped {
			lines = append(lines, "not watched: "+cell(s))
		}
		if st.LastErr != "" {
			lines = append(lines, "watch error: "+cell(st.LastErr))
		}
	}
	lines = append(lines, "")
	lines = append(lines, table(namespaceRows(r))...)
	lines = append(lines, "")
	lines = append(lines, table(leaseRows(r, wide))...)
	if r.Policy != nil {
		lines = append(lines, "")
		lines = append(lines, table(policyRows(r.Policy))...)
		lines = append(lines, "note: "+r.Policy.Note)
	}
	return lines
}

func totals(t *leasetraffic.Totals) string {
	s := fmt.Sprintf("%d leases, %s writes/s, %d writes, %d contested", t.Leases, rate(t.WritesPerSecond), t.Writes, t.Contested)
	if p := t.Projected; p != nil {
		s += fmt.Sprintf("; policy would refuse %d, hold back %d, warn %d, audit %d, coalesce %d of them", p.Refused, p.HeldBack, p.Warned, p.Audited, p.Coalesced)
	}
	return s
}

func namespaceRows(r *leasetraffic.Report) [][]string {
	rows := [][]string{{"NAMESPACE", "LEASES", "WRITES/S", "WRITES", "CONTESTED"}}
	if r.Policy != nil {
		rows[0] = append(rows[0], "POLICY")
	}
	for i := range r.Namespaces {
		ns := &r.Namespaces[i]
		row := []string{cell(ns.Namespace), strconv.Itoa(ns.Leases), rate(ns.WritesPerSecond), strconv.Itoa(ns.Writes), strconv.Itoa(ns.Contested)}
		if r.Policy != nil {
			row = append(row, effects(ns.Projected))
		}
		rows = append(rows, row)
	}
	return rows
}

func leaseRows(r *leasetraffic.Report, wide bool) [][]string {
	header := []string{"NAMESPACE", "NAME", "KIND", "HOLDER", "WRITES/S", "RENEW", "TRANS", "EXPIRES", "WRITERS", "CONTESTED"}
	if wide {
		header = append(header[:4], append([]string{"DESIGNATED"}, header[4:]...)...)
	}
	webhook := len(r.WebhookSources) > 0
	switch {
	case webhook && wide:
		header = append(header, "USERS", "WEBHOOK")
	case webhook:
		header = append(header, "WEBHOOK")
	}
	if r.Policy != nil {
		header = append(header, "POLICY")
	}
	rows := [][]string{header}
	for i := range r.Leases {
		l := &r.Leases[i]
		name, holder := cell(l.Name), cell(l.Holder)
		if !wide {
			name, holder = clip(l.Name, 32), clip(l.Holder, 24)
		}
		row := []string{cell(l.Namespace), name, kind(l.Resource), orDash(holder)}
		if wide {
			row = append(row, orDash(cell(l.DesignatedManager)))
		}
		renew := "-"
		if l.RenewIntervalSeconds > 0 {
			renew = seconds(l.RenewIntervalSeconds)
		}
		row = append(row, rate(l.WritesPerSecond), renew, strconv.Itoa(int(l.Transitions)), expires(l.ExpiresInSeconds), writers(l.Writers, wide), contestedCell(l, wide))
		switch {
		case webhook && wide:
			row = append(row, users(l.Webhook), verdicts(l.Webhook))
		case webhook && l.Webhook != nil:
			row = append(row, strconv.Itoa(len(l.Webhook.Users))+"u "+verdicts(l.Webhook))
		case webhook:
			row = append(row, "-")
		}
		if r.Policy != nil {
			row = append(row, effects(l.Projected))
		}
		rows = append(rows, row)
	}
	return rows
}

func policyRows(p *leasetraffic.PolicyReport) [][]string {
	rows := [][]string{{"RULE", "VERDICT", "INVARIANT", "EFFECT", "WRITER", "WRITES"}}
	for _, o := range p.Outcomes {
		rows = append(rows, []string{cell(o.Rule), cell(o.Verdict), orDash(cell(o.Invariant)), cell(o.Effect), cell(o.WriterBasis), strconv.FormatInt(o.Writes, 10)})
	}
	if len(p.Outcomes) == 0 {
		rows = append(rows, []string{"(no write judged yet)", "", "", "", "", ""})
	}
	return rows
}

func kind(resource string) string {
	if resource == "multiclusterleases" {
		return "mcl"
	}
	return "lease"
}

func rate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func expires(s float64) string {
	if s < 0 {
		return "expired " + time.Duration(math.Ceil(-s)*float64(time.Second)).String()
	}
	return time.Duration(math.Floor(s) * float64(time.Second)).String()
}

func writers(ws []leasetraffic.Writer, wide bool) string {
	if !wide {
		return strconv.Itoa(len(ws))
	}
	if len(ws) == 0 {
		return "-"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		name := cell(w.Manager)
		if w.Subresource != "" {
			name += "/" + cell(w.Subresource)
		}
		parts[i] = name + "×" + strconv.Itoa(w.Writes)
	}
	return strings.Join(parts, ",")
}

// users lists the users behind a lease's webhook requests; service
// accounts are shortened to sa:<namespace>:<name>.
func users(w *leasetraffic.WebhookTraffic) string {
	if w == nil || len(w.Users) == 0 {
		return "-"
	}
	parts := make([]string, len(w.Users))
	for i, u := range w.Users {
		parts[i] = cell(strings.Replace(u.User, "system:serviceaccount:", "sa:", 1)) + "×" + strconv.FormatInt(u.Requests, 10)
	}
	return strings.Join(parts, ",")
}

// verdicts summarises what the webhook decided for a lease's requests.
func verdicts(w *leasetraffic.WebhookTraffic) string {
	if w == nil {
		return "-"
	}
	var parts []string
	for _, v := range []struct {
		n    int64
		what string
	}{{w.Verdicts.Allow, "allow"}, {w.Verdicts.Deny, "deny"}, {w.Verdicts.Warn, "warn"}, {w.Verdicts.Audit, "audit"}} {
		if v.n > 0 {
			parts = append(parts, v.what+" "+strconv.FormatInt(v.n, 10))
		}
	}
	return strings.Join(parts, ",")
}

func contestedCell(l *leasetraffic.LeaseTraffic, wide bool) string {
	switch {
	case !l.Contested:
		return "-"
	case wide:
		return "yes: " + l.ContestedReason
	}
	return "yes"
}

func effects(e *leasetraffic.Effects) string {
	if e == nil {
		return "-"
	}
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{e.Refused, "refuse"}, {e.HeldBack, "hold"}, {e.Warned, "warn"}, {e.Audited, "audit"}, {e.Coalesced, "coal"}} {
		if p.n > 0 {
			parts = append(parts, p.what+" "+strconv.Itoa(p.n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WritePrinted prints a report with one of cli-runtime's template printers
// (-o jsonpath=…, jsonpath-file=…, go-template=…, go-template-file=…,
// templatefile=…, as kubectl takes them): the data is the report as -o json
// prints it. Every client-written string, and every map key, is escaped as
// the table escapes it (policy.Escape) before the template sees it: a
// template prints values into the terminal as the table does. -o json
// carries them exactly.
func WritePrinted(w io.Writer, r *leasetraffic.Report, p printers.ResourcePrinter) error {
	js, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var data map[string]any
	if err := json.Unmarshal(js, &data); err != nil {
		return err
	}
	return p.PrintObj(&unstructured.Unstructured{Object: escapeStrings(data).(map[string]any)}, w)
}

// escapeStrings returns v, a value decoded from JSON, with every string and
// map key escaped by policy.Escape.
func escapeStrings(v any) any {
	switch v := v.(type) {
	case string:
		return oneline.Escape(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[oneline.Escape(k)] = escapeStrings(e)
		}
		return out
	case []any:
		for i, e := range v {
			v[i] = escapeStrings(e)
		}
		return v
	}
	return v
}
