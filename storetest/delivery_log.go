package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// deliveryLog returns s as a webhooks.DeliveryLog, skipping the test if it
// is not one.
func deliveryLog(t *testing.T, s webhooks.Store) webhooks.DeliveryLog {
	t.Helper()
	l, ok := s.(webhooks.DeliveryLog)
	if !ok {
		t.Skip("the Store does not implement webhooks.DeliveryLog")
	}
	return l
}

// fullAttempt sets every field of DeliveryAttempt to a value no store
// produces by accident, numbered n.
func fullAttempt(consumerID string, n int) *webhooks.DeliveryAttempt {
	return &webhooks.DeliveryAttempt{
		ConsumerID:   consumerID,
		At:           at(time.Duration(n)*time.Second + 3*time.Nanosecond),
		DeliveryID:   fmt.Sprintf("d_%d", n),
		Attempt:      n,
		StatusCode:   503,
		Latency:      time.Duration(n)*time.Millisecond + 7,
		ErrorClass:   "status_5xx",
		Error:        "status 503 ü'\"",
		ResponseBody: "{\"error\":\"unavailable\"}\x00\xff",
	}
}

func normAttempts(as []*webhooks.DeliveryAttempt) []webhooks.DeliveryAttempt {
	out := make([]webhooks.DeliveryAttempt, len(as))
	for i, a := range as {
		out[i] = *a
		out[i].At = a.At.UTC()
	}
	return out
}

func requireAttempts(t *testing.T, l webhooks.DeliveryLog, consumerID string, limit int, want []*webhooks.DeliveryAttempt, msgAndArgs ...any) {
	t.Helper()
	got, err := l.ListAttempts(t.Context(), consumerID, limit)
	require.NoError(t, err)
	require.Equal(t, normAttempts(want), normAttempts(got), msgAndArgs...)
}

// newest returns as' attempts of consumerID, newest first, up to n.
func newest(as []*webhooks.DeliveryAttempt, consumerID string, n int) []*webhooks.DeliveryAttempt {
	var out []*webhooks.DeliveryAttempt
	for i := len(as) - 1; i >= 0 && len(out) < n; i-- {
		if as[i].ConsumerID == consumerID {
			out = append(out, as[i])
		}
	}
	return out
}

// testDeliveryLogBounded appends many attempts in batches and checks that
// each consumer keeps exactly its newest keep.
func testDeliveryLogBounded(t *testing.T, s webhooks.Store) {
	l := deliveryLog(t, s)
	mustCreateSub(t, s, newSub("s"))
	c, d := newConsumer("s", "/c"), newConsumer("s", "/d")
	mustCreate(t, s, c, d)
	const total, batch, keep = 10_000, 500, 20
	var all []*webhooks.DeliveryAttempt
	for i := range total {
		// d gets one attempt in ten, in the same batches as c's.
		id := c.ID
		if i%10 == 3 {
			id = d.ID
		}
		all = append(all, fullAttempt(id, i+1))
	}
	for i := 0; i < total; i += batch {
		require.NoError(t, l.AppendAttempts(t.Context(), all[i:i+batch], keep))
	}
	requireAttempts(t, l, c.ID, 1000, newest(all, c.ID, keep), "the newest keep, newest first")
	requireAttempts(t, l, d.ID, 1000, newest(all, d.ID, keep), "keep bounds each consumer's log")
	requireAttempts(t, l, c.ID, 5, newest(all, c.ID, 5), "limit respected")
	requireAttempts(t, l, webhooks.ConsumerID("s", "/none"), 10, nil, "no log")

	// A later, smaller keep trims on the next append.
	more := []*webhooks.DeliveryAttempt{fullAttempt(c.ID, total+1)}
	require.NoError(t, l.AppendAttempts(t.Context(), more, 3))
	requireAttempts(t, l, c.ID, 1000, newest(append(all, more...), c.ID, 3))
}

// testDeliveryLogFields round-trips every field, and drops the attempts of
// consumers that do not exist.
func testDeliveryLogFields(t *testing.T, s webhooks.Store) {
	l := deliveryLog(t, s)
	mustCreateSub(t, s, newSub("s"))
	c := newConsumer("s", "/c")
	mustCreate(t, s, c)
	full := fullAttempt(c.ID, 1)
	requireAllSet(t, full)
	bare := &webhooks.DeliveryAttempt{ConsumerID: c.ID}
	missing := fullAttempt(webhooks.ConsumerID("s", "/missing"), 2)
	require.NoError(t, l.AppendAttempts(t.Context(), []*webhooks.DeliveryAttempt{full, missing, bare}, 10),
		"an attempt of a missing consumer is dropped, not an error")
	requireAttempts(t, l, c.ID, 10, []*webhooks.DeliveryAttempt{bare, full}, "every field kept; zero ones stay zero")
	requireAttempts(t, l, missing.ConsumerID, 10, nil, "an attempt of a missing consumer is dropped")

	mustCreate(t, s, newConsumer("s", "/missing"))
	requireAttempts(t, l, missing.ConsumerID, 10, nil, "a consumer created later starts without the dropped attempts")

	got, err := l.ListAttempts(t.Context(), c.ID, 10)
	require.NoError(t, err)
	got[1].Error = "scribbled"
	requireAttempts(t, l, c.ID, 10, []*webhooks.DeliveryAttempt{bare, full}, "the caller owns what ListAttempts returns")
}

// testDeliveryLogDeletes deletes consumers, one way and the other: their
// logs go with them, and an ID used again starts without one.
func testDeliveryLogDeletes(t *testing.T, s webhooks.Store) {
	l := deliveryLog(t, s)
	mustCreateSub(t, s, newSub("s"), newSub("t"))
	sa, sb, ta := newConsumer("s", "/a"), newConsumer("s", "/b"), newConsumer("t", "/a")
	mustCreate(t, s, sa, sb, ta)
	var as []*webhooks.DeliveryAttempt
	for i, id := range []string{sa.ID, sb.ID, ta.ID, sa.ID, sb.ID, ta.ID} {
		as = append(as, fullAttempt(id, i+1))
	}
	require.NoError(t, l.AppendAttempts(t.Context(), as, 10))

	mustDelete(t, s, sa.ID)
	requireAttempts(t, l, sa.ID, 10, nil, "deleted with its consumer")
	requireAttempts(t, l, sb.ID, 10, newest(as, sb.ID, 10), "other consumers' logs stay")
	mustCreate(t, s, newConsumer("s", "/a"))
	requireAttempts(t, l, sa.ID, 10, nil, "a consumer created again starts without a log")

	require.NoError(t, s.DeleteSubscription(t.Context(), "s"))
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, newConsumer("s", "/a"), newConsumer("s", "/b"))
	requireAttempts(t, l, sb.ID, 10, nil, "deleted with its subscription")
	requireAttempts(t, l, ta.ID, 10, newest(as, ta.ID, 10), "other subscriptions' logs stay")
}
