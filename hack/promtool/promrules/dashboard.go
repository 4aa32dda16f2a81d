package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is one panel target's expression, as Prometheus parses it.
type Query struct {
	Panel string `json:"panel"`
	Expr  string `json:"expr"`
	// Selectors are the vector selectors: a metric and the labels matched.
	Selectors []Selector `json:"selectors"`
	// Groupings are the label lists of by (...) clauses, innermost first,
	// with the metrics aggregated below each.
	Groupings []Grouping `json:"groupings"`
}

// Selector is one vector selector of a query.
type Selector struct {
	Metric string   `json:"metric"`
	Labels []string `json:"labels"`
}

// Grouping is one aggregation's by (...) labels and the metrics below it.
type Grouping struct {
	By      []string `json:"by"`
	Metrics []string `json:"metrics"`
}

// DashboardOutput is what `promrules dashboard` prints.
type DashboardOutput struct {
	Panels  int     `json:"panels"`
	Queries []Query `json:"queries"`
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVariables are the interval variables Grafana substitutes in a
// query before Prometheus sees it.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "5m", "$__range", "1h")

func dashboardQueries(path string) (*DashboardOutput, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := parser.NewParser(parser.Options{})
	out := &DashboardOutput{Queries: []Query{}}
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, pn := range panels {
			if pn.Type == "row" {
				if err := walk(pn.Panels); err != nil {
					return err
				}
				continue
			}
			out.Panels++
			if len(pn.Targets) == 0 {
				out.Queries = append(out.Queries, Query{Panel: pn.Title, Selectors: []Selector{}, Groupings: []Grouping{}})
			}
			for _, t := range pn.Targets {
				q, err := parseQuery(p, pn.Title, t.Expr)
				if err != nil {
					return fmt.Errorf("%s: panel %q: %w", path, pn.Title, err)
				}
				out.Queries = append(out.Queries, q)
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	return out, nil
}

func parseQuery(p parser.Parser, title, text string) (Query, error) {
	q := Query{Panel: title, Expr: text, Selectors: []Selector{}, Groupings: []Grouping{}}
	expr, err := p.ParseExpr(grafanaVariables.Replace(text))
	if err != nil {
		return q, err
	}
	var selErr error
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				selErr = fmt.Errorf("selector %s names no metric", n)
				return nil
			}
			sel := Selector{Metric: n.Name, Labels: []string{}}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !slices.Contains(sel.Labels, m.Name) {
					sel.Labels = append(sel.Labels, m.Name)
				}
			}
			slices.Sort(sel.Labels)
			q.Selectors = append(q.Selectors, sel)
		case *parser.AggregateExpr:
			if n.Without {
				selErr = fmt.Errorf("%s: aggregate with by (...), not without, so the labels kept are checked", n)
				return nil
			}
			g := Grouping{By: append([]string{}, n.Grouping...), Metrics: []string{}}
			parser.Inspect(n.Expr, func(m parser.Node, _ []parser.Node) error {
				if vs, ok := m.(*parser.VectorSelector); ok && !slices.Contains(g.Metrics, vs.Name) {
					g.Metrics = append(g.Metrics, vs.Name)
				}
				return nil
			})
			q.Groupings = append(q.Groupings, g)
		}
		return nil
	})
	return q, selErr
}
