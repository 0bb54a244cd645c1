package webhooks

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The cost limit stops a pathological expression on an event it would
// take minutes over (100^3 comparisons) at its first few thousand, with
// an error: the event does not pass.
func TestFilterExpressionCostLimit(t *testing.T) {
	x, err := compileExpression(`event.items.all(a, event.items.all(b, event.items.all(c, a + b + c >= 0)))`)
	require.NoError(t, err)
	items := make([]int, 100)
	event, err := json.Marshal(map[string]any{"items": items})
	require.NoError(t, err)
	ok, err := x.match(context.Background(), event)
	require.False(t, ok)
	require.ErrorContains(t, err, "cost limit exceeded")

	small, err := json.Marshal(map[string]any{"items": items[:3]})
	require.NoError(t, err)
	ok, err = x.match(context.Background(), small)
	require.NoError(t, err)
	require.True(t, ok, "the same expression on a small event is within the limit")
}

// The attempt's context interrupts an evaluation.
func TestFilterExpressionInterrupted(t *testing.T) {
	x, err := compileExpression(`event.items.all(a, a >= 0)`)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	event, err := json.Marshal(map[string]any{"items": make([]int, 1000)})
	require.NoError(t, err)
	ok, err := x.match(ctx, event)
	require.False(t, ok)
	require.Error(t, err)
}

// matchesPattern matches dotted event types by the glob rules of
// filter.patterns: '*' one segment, '**' any number; and in time linear in
// the type's length, whatever the pattern.
func TestFilterExpressionDottedTypes(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"tool.*", "tool.completed", true},
		{"tool.*", "tool", false},
		{"tool.*", "tool.execution.completed", false},
		{"tool.**", "tool.execution.completed", true},
		{"tool.execution.completed", "tool.execution.completed", true},
		{"tool.execution.completed", "tool.execution.completedX", false},
		{"*", "scenario", true},
		{"*", "scenario.started", false},
		{"**", "scenario.started", true},
		{"infra.turn.*", "infra.turn.started", true},
		{"{order,refund}.*", "refund.issued", true},
	} {
		x, err := compileExpression(`event.type.matchesPattern("` + tc.pattern + `")`)
		require.NoError(t, err, tc.pattern)
		event, _ := json.Marshal(map[string]string{"type": tc.value})
		ok, err := x.match(context.Background(), event)
		require.NoError(t, err)
		require.Equal(t, tc.want, ok, "%s ~ %s", tc.value, tc.pattern)
	}
	x, err := compileExpression(`event.type.matchesPattern("*a*a*a*a*a*a*a*a*a*a*c*")`)
	require.NoError(t, err)
	event, _ := json.Marshal(map[string]string{"type": strings.Repeat("a", 1<<16)})
	ok, err := x.match(context.Background(), event)
	require.NoError(t, err)
	require.False(t, ok, "a backtracking pattern is linear here too")
}

// Columns keep only the named fields, nested ones at their paths; a field
// the event lacks is left out, a column inside another is part of it, and
// an event that is not an object goes whole.
func TestColumns(t *testing.T) {
	for _, tc := range []struct {
		columns     []string
		event, want string
	}{
		{[]string{"id"}, `{"id":1,"x":2}`, `{"id":1}`},
		{[]string{"id", "missing"}, `{"id":1}`, `{"id":1}`},
		{[]string{"a.b", "a.c.d"}, `{"a":{"b":1,"c":{"d":2,"e":3},"f":4},"g":5}`, `{"a":{"b":1,"c":{"d":2}}}`},
		{[]string{"a.b", "a"}, `{"a":{"b":1,"c":2}}`, `{"a":{"b":1,"c":2}}`},
		{[]string{"a", "a.b"}, `{"a":{"b":1,"c":2}}`, `{"a":{"b":1,"c":2}}`},
		{[]string{"a.b"}, `{"a":7}`, `{}`},
		{[]string{"id"}, `[1,2]`, `[1,2]`},
		{[]string{"id"}, `"c3RyZWFt"`, `"c3RyZWFt"`},
	} {
		p, err := compileColumns(tc.columns)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(p.apply([]byte(tc.event))), "%v of %s", tc.columns, tc.event)
	}
	p, err := compileColumns(nil)
	require.NoError(t, err)
	require.Equal(t, `{"id":1}`, string(p.apply([]byte(`{"id":1}`))), "no columns: events whole")
}
