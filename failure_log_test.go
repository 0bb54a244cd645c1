package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// failLogLines decodes the JSON log lines in buf.
func failLogLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		out = append(out, m)
	}
	return out
}

func newTestFailureLog() (*failureLog, *mockclock.Clock, *bytes.Buffer) {
	clk := mockclock.New()
	clk.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var buf bytes.Buffer
	return newFailureLog(slog.New(slog.NewJSONHandler(&buf, nil)), clk), clk, &buf
}

// A subscription's buckets are forgotten once idle; lines they suppressed
// and never reported are reported then, in a summary line.
func TestFailureLogForgetsIdleSubscriptions(t *testing.T) {
	l, clk, buf := newTestFailureLog()
	ctx := context.Background()
	f := statusFailure(500)
	for i := range 100 {
		l.failed(ctx, &Consumer{ID: "c", SubscriptionID: fmt.Sprintf("s%d", i)}, f, nil)
	}
	for range failureLogBurst + 3 {
		l.failed(ctx, &Consumer{ID: "c", SubscriptionID: "storm"}, f, nil)
	}
	require.Len(t, l.subs, 101)
	require.Len(t, failLogLines(t, buf), 100+failureLogBurst)

	clk.Add(failureLogIdle - time.Nanosecond)
	l.failed(ctx, &Consumer{ID: "c", SubscriptionID: "s0"}, f, nil)
	require.Len(t, l.subs, 101, "not idle yet")
	require.Len(t, failLogLines(t, buf), 1)

	clk.Add(time.Nanosecond)
	l.failed(ctx, &Consumer{ID: "c", SubscriptionID: "late"}, f, nil)
	require.Len(t, l.subs, 2, "only s0, which failed since, and late remain")
	lines := failLogLines(t, buf)
	require.Len(t, lines, 2)
	require.Equal(t, "webhooks: delivery failures not logged", lines[0]["msg"])
	require.Equal(t, "storm", lines[0]["subscription_id"])
	require.Equal(t, 3.0, lines[0]["suppressed"])
	require.Equal(t, "late", lines[1]["subscription_id"])
	require.NotContains(t, lines[1], "suppressed")
}

// A success is logged at Debug with a failure's fields, and the first
// success of a subscription after failures at Info, with their count.
func TestFailureLogSuccesses(t *testing.T) {
	clk := mockclock.New()
	var buf bytes.Buffer
	l := newFailureLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), clk)
	ctx := context.Background()
	c := &Consumer{ID: "c1", SubscriptionID: "s1", Attempt: 1}
	ok := response{outcome: outcomeOK, status: 200, latency: 3 * time.Millisecond}

	l.succeeded(ctx, c, ok)
	l.failed(ctx, c, statusFailure(500), nil)
	retry := &Consumer{ID: "c1", SubscriptionID: "s1", Attempt: 2}
	l.failed(ctx, retry, statusFailure(503), nil)
	l.succeeded(ctx, &Consumer{ID: "c1", SubscriptionID: "s1", Attempt: 3}, ok)
	l.succeeded(ctx, c, ok)
	lines := failLogLines(t, &buf)
	require.Len(t, lines, 5)
	for _, i := range []int{0, 4} {
		require.Equal(t, "DEBUG", lines[i]["level"])
		require.Equal(t, "webhooks: delivery attempt succeeded", lines[i]["msg"])
		require.NotContains(t, lines[i], "failed_attempts")
	}
	for _, key := range []string{"subscription_id", "consumer_id", "attempt", "status"} {
		require.Contains(t, lines[1], key, "a failure's field")
		require.Contains(t, lines[0], key, "missing from a success")
	}
	require.Equal(t, "INFO", lines[3]["level"])
	require.Equal(t, "webhooks: deliveries recovered", lines[3]["msg"])
	require.Equal(t, 2.0, lines[3]["failed_attempts"])
	require.Equal(t, 3.0, lines[3]["attempt"])
	require.Equal(t, 200.0, lines[3]["status"])
}
