package topui

import (
	"context"
	"io"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// Source builds a report with the given options.
type Source func(o leasetraffic.ReportOptions) *leasetraffic.Report

// UIOptions configure the terminal UI.
type UIOptions struct {
	Report   leasetraffic.ReportOptions
	Wide     bool
	Interval time.Duration
	// StatusLine returns what is not watched and the last watch error.
	StatusLine func() (skipped []string, lastErr string)
	Input      io.Reader
	Output     io.Writer
}

// Run shows the live terminal UI until the user quits or ctx ends.
func Run(ctx context.Context, src Source, o UIOptions) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	m := &model{src: src, opts: o.Report, wide: o.Wide, interval: o.Interval, statusLine: o.StatusLine}
	m.refresh()
	opts := []tea.ProgramOption{tea.WithContext(ctx)}
	if o.Input != nil {
		opts = append(opts, tea.WithInput(o.Input))
	}
	if o.Output != nil {
		opts = append(opts, tea.WithOutput(o.Output))
	}
	if _, err := tea.NewProgram(m, opts...).Run(); ctx.Err() == nil {
		return err
	}
	return nil // interrupted
}

type tickMsg time.Time

type model struct {
	src        Source
	opts       leasetraffic.ReportOptions
	wide       bool
	interval   time.Duration
	statusLine func() ([]string, string)

	report        *leasetraffic.Report
	width, height int
	offset        int
}

var (
	titleStyle  = lipgloss.NewStyle().Bold(true)
	headerStyle = lipgloss.NewStyle().Reverse(true)
	helpStyle   = lipgloss.NewStyle().Faint(true)
)

const controls = "q quit  s sort  r resource  w wide  ↑/↓ scroll"

func (m *model) Init() tea.Cmd { return m.tick() }

func (m *model) tick() tea.Cmd {
	return tea.Tick(m.interval, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (m *model) refresh() { m.report = m.src(m.opts) }

func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tickMsg:
		m.refresh()
		return m, m.tick()
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyPressMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "s":
			m.opts.Sort = nextSort(m.opts.Sort)
			m.refresh()
		case "r":
			m.opts.Resource = nextResource(m.opts.Resource)
			m.offset = 0
			m.refresh()
		case "w":
			m.wide = !m.wide
		case "up", "k":
			m.offset = max(0, m.offset-1)
		case "down", "j":
			m.offset++
		case "pgup":
			m.offset = max(0, m.offset-m.height/2)
		case "pgdown", "space":
			m.offset += m.height / 2
		case "home", "g":
			m.offset = 0
		}
	}
	return m, nil
}

func (m *model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "leaseguard top"
	return v
}

// render lays out the summary, the namespace table (a few rows) and as much
// of the lease table as fits, scrolled by offset.
func (m *model) render() string {
	st := &Status{Sort: string(orSort(m.opts.Sort)), Filter: filterText(m.opts)}
	if m.statusLine != nil {
		st.Skipped, st.LastErr = m.statusLine()
	}
	lines := Lines(m.report, m.wide, st)
	// Split into the summary, namespaces, leases and the policy section.
	sections := splitSections(lines)
	height := m.height
	if height <= 0 {
		height = 40
	}
	var out []string
	out = append(out, titleStyle.Render(sections[0][0]))
	out = append(out, sections[0][1:]...)
	if len(sections) > 1 {
		ns := sections[1]
		const maxNamespaces = 5
		out = append(out, "", headerStyle.Render(ns[0]))
		body := ns[1:]
		if len(body) > maxNamespaces {
			more := len(body) - maxNamespaces
			body = append(body[:maxNamespaces:maxNamespaces], helpStyle.Render("… "+strconv.Itoa(more)+" more namespaces"))
		}
		out = append(out, body...)
	}
	var footer []string
	if len(sections) > 3 {
		pol := sections[3]
		footer = append(footer, "", headerStyle.Render(pol[0]))
		footer = append(footer, pol[1:min(len(pol), 6)]...)
	}
	footer = append(footer, helpStyle.Render(controls))
	if len(sections) > 2 {
		leases := sections[2]
		out = append(out, "", headerStyle.Render(leases[0]))
		room := height - len(out) - len(footer)
		body := leases[1:]
		if m.offset > max(0, len(body)-room) {
			m.offset = max(0, len(body)-room)
		}
		end := min(len(body), m.offset+max(room, 0))
		out = append(out, body[m.offset:end]...)
		for i := len(out); i < height-len(footer); i++ {
			out = append(out, "")
		}
	}
	out = append(out, footer...)
	if m.width > 0 {
		for i, l := range out {
			out[i] = ansi.Truncate(l, m.width, "…")
		}
	}
	return strings.Join(out, "\n")
}

func splitSections(lines []string) [][]string {
	var sections [][]string
	var cur []string
	for _, l := range lines {
		if l == "" {
			sections = append(sections, cur)
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	return append(sections, cur)
}

func orSort(k leasetraffic.SortKey) leasetraffic.SortKey {
	if k == "" {
		return leasetraffic.SortRate
	}
	return k
}

func nextSort(k leasetraffic.SortKey) leasetraffic.SortKey {
	k = orSort(k)
	for i, s := range leasetraffic.SortKeys {
		if s == k {
			return leasetraffic.SortKeys[(i+1)%len(leasetraffic.SortKeys)]
		}
	}
	return leasetraffic.SortRate
}

func nextResource(r leaseobject.Resource) leaseobject.Resource {
	switch r {
	case "":
		return leaseobject.Leases
	case leaseobject.Leases:
		return leaseobject.MultiClusterLeases
	}
	return ""
}

func filterText(o leasetraffic.ReportOptions) string {
	var parts []string
	if o.Resource != "" {
		parts = append(parts, "resource "+string(o.Resource))
	}
	if o.Namespace != "" {
		parts = append(parts, "namespace "+o.Namespace)
	}
	return strings.Join(parts, "  ")
}
