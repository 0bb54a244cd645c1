package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// column is a table column: its heading and the JSON field it shows.
type column struct{ heading, field string }

var (
	subscriptionColumns = []column{{"ID", "subscription_id"}, {"PATTERN", "pattern"}, {"DELIVERY", "delivery"},
		{"STATUS", "status"}, {"WEBHOOK", "webhook"}, {"DESCRIPTION", "description"}}
	consumerColumns = []column{{"CONSUMER", "consumer_id"}, {"STATE", "state"}, {"EPOCH", "epoch"}, {"ATTEMPT", "attempt"},
		{"PENDING", "pending"}, {"FAILURES", "failures"}, {"NEXT ATTEMPT", "next_attempt_at"}, {"LAST ERROR", "last_error"}}
	deadColumns     = []column{{"CONSUMER", "consumer_id"}, {"STREAM", "primary_stream"}, {"FAILURES", "failures"}, {"FAILING SINCE", "failing_since"}, {"REASON", "last_error"}}
	deliveryColumns = []column{{"AT", "at"}, {"DELIVERY", "delivery_id"}, {"ATTEMPT", "attempt"}, {"STATUS", "status_code"},
		{"LATENCY MS", "latency_ms"}, {"ERROR CLASS", "error_class"}, {"ERROR", "error"}}
	testColumns = []column{{"DELIVERY", "delivery_id"}, {"DELIVERED", "delivered"}, {"STATUS", "status_code"},
		{"LATENCY MS", "latency_ms"}, {"ERROR CLASS", "error_class"}, {"ERROR", "error"}}
)

// print writes whole as indented JSON with -o json, or else rows as a
// table of cols.
func (c *cli) print(whole any, cols []column, rows ...object) error {
	if c.json {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(whole)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	var heads []string
	for _, col := range cols {
		heads = append(heads, col.heading)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, row := range rows {
		cells := make([]string, len(cols))
		for i, col := range cols {
			cells[i] = cell(row[col.field])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// done prints msg for a command that answers nothing, or {} as JSON.
func (c *cli) done(msg string) error {
	if c.json {
		_, err := fmt.Fprintln(c.out, "{}")
		return err
	}
	_, err := fmt.Fprintln(c.out, msg)
	return err
}

// cell is a JSON value as a table shows it: "-" for none, on one line.
func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		if v == "" {
			return "-"
		}
		return strings.Join(strings.Fields(v), " ")
	case float64:
		return fmt.Sprint(v)
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// sortedKeys returns q's keys in order, so that a URL is the same each run.
func sortedKeys[V any](q map[string]V) []string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
