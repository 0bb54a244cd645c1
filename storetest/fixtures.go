package storetest

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// t0 has a nanosecond part so that a store which rounds times fails.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

// zone is not UTC: a store must keep the instant, not the location.
var zone = time.FixedZone("storetest", 5*60*60+30*60)

// at returns t0 plus d, shown in zone.
func at(d time.Duration) time.Time { return t0.Add(d).In(zone) }

func newSub(id string) *webhooks.Subscription {
	return &webhooks.Subscription{
		ID:          id,
		Pattern:     "/**",
		Webhook:     "https://example.com/hooks/" + id,
		Description: "subscription " + id,
		Name:        "name ü'\" " + id,
		Secret:      "whsec_" + id,
		CreatedAt:   at(-time.Hour),
		UpdatedAt:   at(-time.Minute + 3*time.Nanosecond),
		Verification: &webhooks.Verification{Attempts: 3, NextAttemptAt: at(time.Minute + 5*time.Nanosecond),
			ExpiresAt: at(24 * time.Hour), LastError: "status 404 ü'\""},
		Status:    webhooks.StatusActive,
		Delivery:  webhooks.DeliveryEvents,
		Signature: webhooks.SignatureStandard,
		// A credential, in the data a sealing store seals.
		PreviousSecret:          "whsec_previous_" + id,
		PreviousSecretExpiresAt: at(time.Hour + 9*time.Nanosecond),
		Retry: &webhooks.RetryPolicy{Schedule: []time.Duration{time.Second, time.Minute + 1}, MaxAttempts: 5, MaxAge: time.Hour,
			ClientErrors: webhooks.FailClientErrors, OnExhausted: webhooks.ExhaustedSkip},
		RateLimit: 600,
		Handler:   "handler-" + id,
		Tenant:    "tenant-" + id,
		Events: &webhooks.EventsOptions{
			MaxBatchEvents: 100,
			MaxBatchBytes:  1 << 20,
			MaxWait:        time.Second + time.Nanosecond,
			Timeout:        3 * time.Second,
			Headers:        map[string]string{"Authorization": "Bearer " + id, "X-Tenant": "ü'\""},
			Filter: &webhooks.EventFilter{Field: "data.type", Patterns: []string{"order.*", "refund.**"},
				Expression: `event.data.total > 100 && event.data.type.matchesPattern("order.*")`},
			Columns: []string{"id", "data.total"},
		},
	}
}

func newConsumer(sub, path string) *webhooks.Consumer {
	return &webhooks.Consumer{
		ID:             webhooks.ConsumerID(sub, path),
		SubscriptionID: sub,
		PrimaryStream:  path,
		State:          webhooks.StateIdle,
		Streams:        []webhooks.StreamOffset{{Path: path, Offset: webhooks.OffsetNone}},
		CreatedAt:      at(0),
		UpdatedAt:      at(0),
	}
}

// fullConsumer sets every field of Consumer to a value no store produces by
// accident; requireAllSet keeps it complete as Consumer grows.
func fullConsumer(sub, path string) *webhooks.Consumer {
	return &webhooks.Consumer{
		ID:             webhooks.ConsumerID(sub, path),
		SubscriptionID: sub,
		PrimaryStream:  path,
		State:          webhooks.StateWaking,
		Epoch:          1<<40 + 7, // does not fit in 32 bits
		WakeID:         "w_0123456789abcdef",
		Streams: []webhooks.StreamOffset{
			{Path: path, Offset: "0000000000000042_0000000000000007"},
			{Path: "/other/stream ü'\"", Offset: webhooks.OffsetNone},
		},
		WakeTails:    []webhooks.StreamOffset{{Path: path, Offset: "0000000000000099_0000000000000001"}},
		TriggeredBy:  []string{path, "/other/stream ü'\""},
		Attempt:      3,
		InFlight:     true,
		Failures:     2,
		FailingSince: at(-time.Minute + time.Nanosecond),
		Deadline:     at(time.Minute + 3*time.Nanosecond),
		CreatedAt:    at(-time.Hour + 5*time.Nanosecond),
		UpdatedAt:    at(-time.Second + 7*time.Nanosecond),
		LastError:    "status_5xx: status 503 ü'\"",
		Batch:        webhooks.ReadLimit{MaxEvents: 100, MaxBytes: 1 << 20, Until: "0000000000000099_0000000000000002"},
		BatchEnd:     "0000000000000099_0000000000000001",
		Skipped: []webhooks.SkippedBatch{{
			DeliveryID: "msg_skipped", From: "-1", To: "0000000000000001_0000000000000000", Attempts: 3, Failures: 4,
			FailingSince: at(-2 * time.Hour).UTC(), LastError: "status_4xx: status 422", SkippedAt: at(-time.Minute).UTC(),
		}},
	}
}

// requireAllSet fails if a field of v (a struct pointer) is zero, but for
// those named in except, so that a field added to a stored type cannot go
// untested.
func requireAllSet(t *testing.T, v any, except ...string) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if slices.Contains(except, name) {
			continue
		}
		require.False(t, rv.Field(i).IsZero(), "storetest fixture %T leaves field %s unset: update storetest", v, name)
	}
}

// subHealthApart names the Subscription field a store keeps apart, which
// CreateSubscription ignores: the fixtures leave it zero.
const subHealthApart = "Health"

// subAdopted names the unexported Subscription field that only the engine
// sets, which the fixtures cannot: a Store keeps it in MarshalData's value
// as any other, and the engine's tests of two engines check it round-trips.
const subAdopted = "adopted"

// fullHealth sets every field of SubscriptionHealth to a value no store
// produces by accident.
func fullHealth() webhooks.SubscriptionHealth {
	return webhooks.SubscriptionHealth{
		ConsecutiveFailures: 123457,
		FailingSince:        at(-time.Minute + 3*time.Nanosecond),
		LastSuccessAt:       at(-time.Hour + 5*time.Nanosecond),
		LastFailureAt:       at(-time.Second + 7*time.Nanosecond),
		LastFailureReason:   "status_5xx: status 503 ü'\"",
	}
}

// normConsumer returns a copy of c in the form the contract guarantees:
// times compare as instants and nil equals empty.
func normConsumer(c *webhooks.Consumer) *webhooks.Consumer {
	if c == nil {
		return nil
	}
	n := c.Clone()
	n.FailingSince = n.FailingSince.UTC()
	n.Deadline = n.Deadline.UTC()
	n.CreatedAt = n.CreatedAt.UTC()
	n.UpdatedAt = n.UpdatedAt.UTC()
	if len(n.Streams) == 0 {
		n.Streams = nil
	}
	if len(n.WakeTails) == 0 {
		n.WakeTails = nil
	}
	if len(n.TriggeredBy) == 0 {
		n.TriggeredBy = nil
	}
	return n
}

func normConsumers(cs []*webhooks.Consumer) []*webhooks.Consumer {
	out := make([]*webhooks.Consumer, len(cs))
	for i, c := range cs {
		out[i] = normConsumer(c)
	}
	return out
}

func normSub(s *webhooks.Subscription) *webhooks.Subscription {
	if s == nil {
		return nil
	}
	n := s.Clone()
	n.CreatedAt = n.CreatedAt.UTC()
	n.PreviousSecretExpiresAt = n.PreviousSecretExpiresAt.UTC()
	n.UpdatedAt = n.UpdatedAt.UTC()
	if v := n.Verification; v != nil {
		v.NextAttemptAt, v.ExpiresAt = v.NextAttemptAt.UTC(), v.ExpiresAt.UTC()
	}
	n.Health = normHealth(n.Health)
	return n
}

func normHealth(h webhooks.SubscriptionHealth) webhooks.SubscriptionHealth {
	h.FailingSince = h.FailingSince.UTC()
	h.LastSuccessAt = h.LastSuccessAt.UTC()
	h.LastFailureAt = h.LastFailureAt.UTC()
	return h
}

func normSubs(ss []*webhooks.Subscription) []*webhooks.Subscription {
	out := make([]*webhooks.Subscription, len(ss))
	for i, s := range ss {
		out[i] = normSub(s)
	}
	return out
}

func requireConsumer(t *testing.T, want, got *webhooks.Consumer, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, normConsumer(want), normConsumer(got), msgAndArgs...)
}

// assertConsumer is requireConsumer for update functions, which a store
// might run on another goroutine, where FailNow must not be called.
func assertConsumer(t *testing.T, want, got *webhooks.Consumer, msgAndArgs ...any) {
	t.Helper()
	assert.Equal(t, normConsumer(want), normConsumer(got), msgAndArgs...)
}

func requireConsumers(t *testing.T, want, got []*webhooks.Consumer, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, normConsumers(want), normConsumers(got), msgAndArgs...)
}

func requireSub(t *testing.T, want, got *webhooks.Subscription, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, normSub(want), normSub(got), msgAndArgs...)
}

func requireSubs(t *testing.T, want, got []*webhooks.Subscription, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, normSubs(want), normSubs(got), msgAndArgs...)
}

func ids(cs []*webhooks.Consumer) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// nonZero drops states counted zero: a store may report them or not.
func nonZero(m map[webhooks.ConsumerState]int) map[webhooks.ConsumerState]int {
	out := make(map[webhooks.ConsumerState]int)
	for st, n := range m {
		if n != 0 {
			out[st] = n
		}
	}
	return out
}

func save(fn func(c *webhooks.Consumer)) func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
	return func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		fn(c)
		return webhooks.UpdateSave, nil
	}
}

func deleteConsumer(*webhooks.Consumer) (webhooks.UpdateAction, error) {
	return webhooks.UpdateDelete, nil
}

// The helpers below fail the test on any error, so that checks read as the
// contract they state.

func mustCreateSub(t *testing.T, s webhooks.Store, subs ...*webhooks.Subscription) {
	t.Helper()
	for _, sub := range subs {
		require.NoError(t, s.CreateSubscription(t.Context(), sub))
	}
}

func mustCreate(t *testing.T, s webhooks.Store, cs ...*webhooks.Consumer) {
	t.Helper()
	for _, c := range cs {
		require.NoError(t, s.CreateConsumer(t.Context(), c))
	}
}

func mustGet(t *testing.T, s webhooks.Store, id string) *webhooks.Consumer {
	t.Helper()
	c, err := s.GetConsumer(t.Context(), id)
	require.NoError(t, err)
	return c
}

func mustUpdate(t *testing.T, s webhooks.Store, id string, fn func(c *webhooks.Consumer)) *webhooks.Consumer {
	t.Helper()
	c, err := s.UpdateConsumer(t.Context(), id, save(fn))
	require.NoError(t, err)
	return c
}

func mustDelete(t *testing.T, s webhooks.Store, id string) {
	t.Helper()
	c, err := s.UpdateConsumer(t.Context(), id, deleteConsumer)
	require.NoError(t, err)
	require.Nil(t, c, "UpdateConsumer returns nil after UpdateDelete")
}

func requireGone(t *testing.T, s webhooks.Store, id string) {
	t.Helper()
	_, err := s.GetConsumer(t.Context(), id)
	require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, id)
}

func byStream(t *testing.T, s webhooks.Store, path string) []string {
	t.Helper()
	cs, err := s.ConsumersByStream(t.Context(), path)
	require.NoError(t, err)
	return ids(cs)
}

func due(t *testing.T, s webhooks.Store, now time.Time, limit int) []string {
	t.Helper()
	cs, err := s.DueConsumers(t.Context(), now, limit)
	require.NoError(t, err)
	return ids(cs)
}

// requireNext checks NextDeadline; a zero want means none is set.
func requireNext(t *testing.T, s webhooks.Store, want time.Time, msg ...string) {
	t.Helper()
	got, ok, err := s.NextDeadline(t.Context())
	require.NoError(t, err)
	why := strings.Join(msg, " ")
	if want.IsZero() {
		require.False(t, ok, "NextDeadline reports %v, want none. %s", got, why)
		return
	}
	require.True(t, ok, "NextDeadline reports none, want %v. %s", want, why)
	require.True(t, want.Equal(got), "NextDeadline = %v, want %v. %s", got, want, why)
}

func requireCounts(t *testing.T, s webhooks.Store, want map[webhooks.ConsumerState]int) {
	t.Helper()
	got, err := s.CountConsumers(t.Context())
	require.NoError(t, err)
	require.Equal(t, nonZero(want), nonZero(got))
}
