package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkEventSelection measures the selection of a batch's events, in
// memory: no filter against the glob filter, a typical expression, and an
// expression with columns. events/s is the figure to compare.
func BenchmarkEventSelection(b *testing.B) {
	events := make([]json.RawMessage, 100)
	for i := range events {
		events[i] = json.RawMessage(fmt.Sprintf(
			`{"type":"order.%s","id":"o-%d","total":%d,"status":"pending","customer":{"name":"Ada","tier":"gold"},"lines":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}`,
			[]string{"created", "paid", "refunded"}[i%3], i, i*7))
	}
	typical := `event.type.matchesPattern("order.*") && event.total > 100 && event.status in ["pending", "paid"]`
	for _, bc := range []struct {
		name    string
		filter  *EventFilter
		columns []string
	}{
		{"none", nil, nil},
		{"glob", &EventFilter{Field: "type", Patterns: []string{"order.*"}}, nil},
		{"expression", &EventFilter{Expression: typical}, nil},
		{"expression+columns", &EventFilter{Expression: typical}, []string{"id", "total", "customer.name"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := compileFilter(bc.filter)
			if err != nil {
				b.Fatal(err)
			}
			cols, err := compileColumns(bc.columns)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			n := 0
			for b.Loop() {
				for _, ev := range events {
					if ok, _ := f.passes(ctx, ev); ok {
						_ = cols.apply(ev)
					}
					n++
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
