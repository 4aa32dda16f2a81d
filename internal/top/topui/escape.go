package topui

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
	yaml "go.yaml.in/yaml/v3"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// Every string a client wrote (a holder identity, an annotation, a field
// manager, a username, an error quoting any of them) reaches the operator's
// terminal. In the table, wide and live outputs each is escaped with the
// webhook's own escaper, as `leaseguard check` and the denial messages
// escape them (policy.Escape: ESC, C1, DEL, newlines, bidirectional
// overrides and every other character that does not print as itself, as
// Go quotes them), before anything measures or cuts it: so a holder cannot
// set the window title, clear the screen, write the clipboard (OSC 52) or
// make a row read backwards, and the columns hold. JSON and YAML carry the
// values exactly, in their own escapes (docs/security.md).

// cell is a client-written value as a table shows it in full.
func cell(s string) string { return oneline.Escape(s) }

// clip is a client-written value escaped and cut to at most n terminal
// columns, marked with "…": the width is that of what is shown (an
// escape is as wide as its text, a CJK character two columns, a combining
// mark none), and the cut never splits an escape.
func clip(s string, n int) string {
	e := oneline.Escape(s)
	if ansi.StringWidth(e) <= n {
		return e
	}
	kept := strings.TrimSuffix(ansi.Truncate(e, n, "…"), "…")
	if e != s {
		kept = wholeEscapes(kept, e)
	}
	return kept + "…"
}

// wholeEscapes cuts prefix, a prefix of the escaped value e, before an
// escape it splits. In an escaped value every backslash starts an escape
// (a backslash of the value is itself escaped, \\), as strconv.Quote
// writes them: \xHH, \uHHHH, \UHHHHHHHH or one character.
func wholeEscapes(prefix, e string) string {
	for i := 0; i < len(prefix); {
		if prefix[i] != '\\' {
			i++
			continue
		}
		n := 2
		if i+1 < len(e) {
			switch e[i+1] {
			case 'x':
				n = 4
			case 'u':
				n = 6
			case 'U':
				n = 10
			}
		}
		if i+n > len(prefix) {
			return prefix[:i]
		}
		i += n
	}
	return prefix
}

// table aligns rows in columns two spaces apart, as text/tabwriter did,
// but measured in terminal columns (tabwriter counts runes: a CJK holder
// would push its row's later columns out of line). The last cell of a row
// is not padded.
func table(rows [][]string) []string {
	var widths []int
	for _, row := range rows {
		for i := 0; i < len(row)-1; i++ {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], ansi.StringWidth(row[i]))
		}
	}
	lines := make([]string, len(rows))
	var b strings.Builder
	for r, row := range rows {
		b.Reset()
		for i, c := range row {
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-ansi.StringWidth(c)+2))
			}
		}
		lines[r] = b.String()
	}
	return lines
}

// writeJSON writes the report as JSON whose every string holds exactly the
// value written, and whose bytes carry no character that does not print as
// itself: encoding/json escapes C0 controls itself but writes DEL, C1
// controls (U+009B is a CSI to xterm) and bidirectional overrides raw;
// these are escaped too (\u009b), which a JSON reader reads back as the
// same character.
func writeJSON(w io.Writer, r *leasetraffic.Report) error {
	js, err := encodeJSON(r, jsonEscape)
	if err != nil {
		return err
	}
	_, err = w.Write(js)
	return err
}

// encodeJSON is the report as indented JSON, the characters that do not
// print as themselves escaped with esc.
func encodeJSON(r *leasetraffic.Report, esc func(*bytes.Buffer, rune)) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return escapeUnprintable(buf.Bytes(), esc), nil
}

// writeYAML writes the report as YAML carrying every value exactly, with
// no character that does not print as itself in its bytes. sigs.k8s.io/yaml
// (JSON through yaml.v2) fails outright on a value with DEL or a C1
// control (its reader refuses them: one such holder made `-o yaml` print
// nothing) and writes bidirectional overrides raw. Here the escaped JSON is
// read into a YAML node tree, every string that holds such a character is
// written double-quoted, and those the emitter still writes raw (it escapes
// only what YAML cannot print) are escaped in YAML's own \u notation,
// valid there because nothing else in the document can hold them: the keys
// are the report's field names.
func writeYAML(w io.Writer, r *leasetraffic.Report) error {
	// JSON is YAML, but YAML reads no UTF-16 surrogate pair: the JSON
	// read here escapes as YAML does (\U000e0001).
	js, err := encodeJSON(r, yamlEscape)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil {
		return err
	}
	blockStyle(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(escapeUnprintable(buf.Bytes(), yamlEscape))
	return err
}

// blockStyle undoes the flow style of the JSON the tree was read from:
// block mappings and sequences, strings plain where the emitter may write
// them so, double-quoted where they hold a character that does not print
// as itself. Keys are sorted, as sigs.k8s.io/yaml wrote them.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" && strings.ContainsFunc(n.Value, func(r rune) bool { return !oneline.Printable(r) }) {
			n.Style = yaml.DoubleQuotedStyle
		}
	case yaml.MappingNode:
		pairs := make([][2]*yaml.Node, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			pairs = append(pairs, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
		}
		sort.SliceStable(pairs, func(i, j int) bool { return pairs[i][0].Value < pairs[j][0].Value })
		n.Content = n.Content[:0]
		for _, p := range pairs {
			n.Content = append(n.Content, p[0], p[1])
		}
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// escapeUnprintable rewrites every character of data at or above DEL that
// does not print as itself (oneline.Printable) with esc. Below DEL the
// encoders have escaped all but the document's own newlines.
func escapeUnprintable(data []byte, esc func(*bytes.Buffer, rune)) []byte {
	i := bytes.IndexFunc(data, func(r rune) bool { return r >= utf8.RuneSelf-1 && !oneline.Printable(r) })
	if i < 0 {
		return data
	}
	var b bytes.Buffer
	b.Grow(len(data) + 16)
	b.Write(data[:i])
	for _, r := range string(data[i:]) {
		if r >= utf8.RuneSelf-1 && !oneline.Printable(r) {
			esc(&b, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.Bytes()
}

const hexDigits = "0123456789abcdef"

func hex4(b *bytes.Buffer, r rune) {
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[r>>shift&0xf])
	}
}

// jsonEscape writes r as JSON does: \uHHHH, as a UTF-16 surrogate pair
// beyond the Basic Multilingual Plane.
func jsonEscape(b *bytes.Buffer, r rune) {
	if r > 0xffff {
		r -= 0x10000
		hex4(b, 0xd800+(r>>10))
		hex4(b, 0xdc00+(r&0x3ff))
		return
	}
	hex4(b, r)
}

// yamlEscape writes r as a double-quoted YAML scalar escapes it.
func yamlEscape(b *bytes.Buffer, r rune) {
	if r > 0xffff {
		b.WriteString(`\U`)
		for shift := 28; shift >= 0; shift -= 4 {
			b.WriteByte(hexDigits[r>>shift&0xf])
		}
		return
	}
	hex4(b, r)
}
