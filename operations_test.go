package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// waitIdle waits until h's engine has nothing to do: its scheduler waits
// and no delivery is running, so that a delivery that has not arrived by
// then will not.
func (h *harness) waitIdle() {
	h.t.Helper()
	require.True(h.t, h.waitProgress(func() bool {
		return webhooks.SchedulerParked(h.engine) && webhooks.DeliveriesRunning(h.engine) == 0
	}), "the engine did not go idle")
}

// flushLog has h's engine's delivery log write the attempts made so far:
// if its writer waits for more, it moves the clock past the linger;
// otherwise it waits for the writer to take them. The writer may have taken
// them already, when an attempt came between its timer and its taking the
// batch.
func (h *harness) flushLog() {
	h.t.Helper()
	var lingering bool
	require.True(h.t, h.waitProgress(func() bool {
		lingering = webhooks.DeliveryLogLingering(h.engine)
		return lingering || webhooks.DeliveryLogPending(h.engine) == 0 && webhooks.DeliveriesRunning(h.engine) == 0
	}), "the delivery log's writer neither waits for more attempts nor takes those it holds")
	if lingering {
		h.clock.Add(webhooks.DeliveryLogLinger)
	}
}

// api sends an API request and decodes the answer into out, if set,
// checking its status.
func (h *harness) api(method, target, body string, status int, out any) {
	h.t.Helper()
	rec := h.do(method, target, body)
	require.Equal(h.t, status, rec.Code, rec.Body.String())
	if out != nil {
		require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), out), rec.Body.String())
	}
}

// Pausing stops new deliveries and keeps the cursor; nothing is delivered
// while paused, under appends, and resuming delivers every event once, in
// order.
func TestPauseAndResumeUnderLoad(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":5}`)
	h.push("/orders/1", numbered(1, 3)...)
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 3), eventStrings(p))
	first := h.waitCursor(ordersID, p.Offset)

	var view struct {
		Status string `json:"status"`
	}
	h.api(http.MethodPatch, "/orders/*?subscription=s1", `{"status":"paused"}`, http.StatusOK, &view)
	require.Equal(t, "paused", view.Status)
	var tail string
	for i := 4; i <= 40; i += 4 {
		tail = h.push("/orders/1", numbered(i, i+3)...)
	}
	h.clock.Add(time.Hour)
	h.waitIdle()
	h.faultRequireNoDelivery()
	require.Equal(t, first.Streams, h.consumer(ordersID).Streams, "the cursor is kept")

	h.api(http.MethodPatch, "/orders/*?subscription=s1", `{"status":"active"}`, http.StatusOK, &view)
	require.Equal(t, "active", view.Status)
	var got []string
	for len(got) < 40 {
		_, p := h.nextBatch()
		got = append(got, eventStrings(p)...)
	}
	require.Equal(t, numbered(1, 43)[3:43], got, "every event once, in order")
	h.waitCursor(ordersID, tail)
}

// A delivery in flight when the subscription is paused finishes and moves
// the cursor; the next one waits.
func TestPauseLetsTheDeliveryInFlightFinish(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	first := h.push("/orders/1", numbered(1, 1)...)
	h.nextBatch()
	_, err := h.engine.PauseSubscription(context.Background(), "s1")
	require.NoError(t, err)
	h.push("/orders/1", numbered(2, 2)...)
	close(hold)
	h.waitCursor(ordersID, first)
	h.waitIdle()
	h.faultRequireNoDelivery()
}

// lateSuccessHealth is a Store whose first write of a success into a
// subscription's health waits until release is closed, after it says so
// on held; each failure's write, once made, is told on failed.
type lateSuccessHealth struct {
	*memstore.Store
	once         sync.Once
	held, failed chan struct{}
	release      chan struct{}
}

func (s *lateSuccessHealth) UpdateHealth(ctx context.Context, id string, fn func(*webhooks.SubscriptionHealth)) (*webhooks.SubscriptionHealth, error) {
	probe := webhooks.SubscriptionHealth{ConsecutiveFailures: 5}
	fn(&probe)
	if probe.ConsecutiveFailures != 0 { // a success sets it to 0
		h, err := s.Store.UpdateHealth(ctx, id, fn)
		s.failed <- struct{}{}
		return h, err
	}
	s.once.Do(func() {
		close(s.held)
		<-s.release
	})
	return s.Store.UpdateHealth(ctx, id, fn)
}

// A success whose health lands after a failure of the next batch, which
// its cursor move let start, does not end that failure's run: the
// circuit breaker trips at its count, not one failure late.
func TestLateSuccessHealthEndsNoLaterFailureRun(t *testing.T) {
	store := &lateSuccessHealth{Store: memstore.New(), held: make(chan struct{}), failed: make(chan struct{}, 3), release: make(chan struct{})}
	h := newHarnessStore(t, store, faultConstBackoff(time.Second), webhooks.WithCircuitBreaker(2, 0))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":0}`)
	h.recv.queue(reply{status: 200}, reply{status: 500}, reply{status: 500})
	acked := h.push("/orders/1", numbered(1, 1)...)
	h.nextBatch()
	h.waitCursor(ordersID, acked)
	awaitSignal(t, store.held, "the success's health write")

	h.push("/orders/1", numbered(2, 2)...)
	h.nextBatch()
	awaitSignal(t, store.failed, "the first failure's health")
	close(store.release)
	h.waitIdle() // the success's health is written
	h.clock.Add(time.Second)
	h.nextBatch()
	awaitSignal(t, store.failed, "the second failure's health")
	h.waitIdle()
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, 2, sub.Health.ConsecutiveFailures, "the late success ended no run")
	require.Equal(t, webhooks.StatusDisabled, sub.Status)
}

// Disabling after N failures calls the hook once; resuming delivers from
// the cursor.
func TestCircuitBreakerDisablesOnceAndResumesFromTheCursor(t *testing.T) {
	var (
		mu     sync.Mutex
		events []webhooks.SubscriptionDisabled
	)
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithCircuitBreaker(3, 0),
		webhooks.WithSubscriptionDisabledHook(func(_ context.Context, ev webhooks.SubscriptionDisabled) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":0}`)
	acked := h.push("/orders/1", numbered(1, 1)...)
	h.nextBatch()
	h.waitCursor(ordersID, acked)
	// The success's health is recorded after the cursor moves; recorded
	// after the next batch's first failure, it would end that run.
	h.waitIdle()

	h.recv.queue(reply{status: 500}, reply{status: 500}, reply{status: 500})
	tail := h.push("/orders/1", numbered(2, 3)...)
	for i := 1; i <= 3; i++ {
		h.nextBatch()
		h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == i })
		h.waitIdle() // the attempt's health is recorded
		h.clock.Add(time.Second)
	}
	h.waitIdle()
	h.faultRequireNoDelivery()
	require.True(t, h.consumer(ordersID).Deadline.IsZero(), "the retry waits for the subscription")
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, webhooks.StatusDisabled, sub.Status)
	require.Equal(t, 3, sub.Health.ConsecutiveFailures)
	require.Equal(t, "status_5xx: status 500", sub.Health.LastFailureReason)
	mu.Lock()
	require.Len(t, events, 1, "the hook is called once")
	require.Equal(t, "s1", events[0].SubscriptionID)
	mu.Unlock()
	require.Equal(t, acked, h.consumer(ordersID).Streams[0].Offset, "the cursor is kept")

	var view map[string]any
	h.api(http.MethodGet, "/orders/*?subscription=s1", "", http.StatusOK, &view)
	require.Equal(t, "disabled", view["status"])
	require.EqualValues(t, 3, view["consecutive_failures"])
	require.NotNil(t, view["last_failure_at"])

	h.recv.queue(reply{status: 500}) // still failing: one more, no second hook
	_, err = h.engine.ResumeSubscription(context.Background(), "s1")
	require.NoError(t, err)
	_, p := h.nextBatch()
	require.Equal(t, numbered(2, 3), eventStrings(p), "resumed from the cursor")
	h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 4 })
	h.waitIdle()
	h.clock.Add(time.Second)
	_, p = h.nextBatch()
	require.Equal(t, numbered(2, 3), eventStrings(p))
	h.waitCursor(ordersID, tail)
	h.waitIdle() // the success's health is recorded after the cursor moves
	mu.Lock()
	require.Len(t, events, 1)
	mu.Unlock()
	sub, err = h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Zero(t, sub.Health.ConsecutiveFailures, "a success ends the run")
	require.False(t, sub.Health.LastSuccessAt.IsZero())
}

// Rewinding re-delivers exactly what follows the offset.
func TestRewindRedeliversExactlyTheRange(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":100}`)
	var offsets []string
	for i := 1; i <= 10; i++ {
		offsets = append(offsets, h.source.appendEvents("/orders/1", numbered(i, i)...))
	}
	require.NoError(t, h.engine.StreamCreated(context.Background(), "/orders/1"))
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 10), eventStrings(p))
	h.waitCursor(ordersID, offsets[9])

	var out struct {
		Rewound int `json:"rewound"`
	}
	h.api(http.MethodPost, "/orders/*?subscription=s1&rewind", fmt.Sprintf(`{"offset":%q}`, offsets[3]), http.StatusOK, &out)
	require.Equal(t, 1, out.Rewound)
	_, p = h.nextBatch()
	require.Equal(t, numbered(5, 10), eventStrings(p), "exactly the events after the offset")
	require.Equal(t, offsets[3], p.FirstOffset)
	h.waitCursor(ordersID, offsets[9])

	h.api(http.MethodPost, "/orders/*?subscription=s1&rewind", fmt.Sprintf(`{"offset":"-1","consumer":%q}`, ordersID), http.StatusOK, &out)
	_, p = h.nextBatch()
	require.Equal(t, numbered(1, 10), eventStrings(p))

	rec := h.do(http.MethodPost, "/orders/*?subscription=s1&rewind", `{"offset":"9999999999999999_9999999999999999"}`)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "INVALID_OFFSET")
	rec = h.do(http.MethodPost, "/orders/*?subscription=s1&rewind", `{"offset":"-1","consumer":"s2:%2Fx"}`)
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Contains(t, rec.Body.String(), "CONSUMER_NOT_FOUND")
}

// A wake consumer that fails for the failure GC period becomes a dead
// letter, which keeps its cursor, answers callbacks CONSUMER_GONE, is
// listed, and revives at its cursor, not at -1.
func TestDeadLetterRevivesAtItsCursor(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour), webhooks.WithFailureGCAfter(3*time.Hour), webhooks.WithCircuitBreaker(0, 0))
	d := h.wake("s1", "/agents/*", agentA)
	acked := h.source.grow(agentA, 0)
	r := h.callback(agentAID, d.n.Token, map[string]any{"epoch": d.n.Epoch, "wake_id": d.n.WakeID, "acks": []map[string]string{{"path": agentA, "offset": acked}}, "done": true})
	require.Equal(t, http.StatusOK, r.status)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

	h.recv.queue(reply{status: 500}, reply{status: 500}, reply{status: 500}, reply{status: 500})
	h.appendTo(agentA, 5)
	for range 3 {
		h.nextDelivery()
		h.waitIdle()
		h.clock.Add(time.Hour)
	}
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateFailed })
	require.Equal(t, acked, c.Streams[0].Offset)
	h.appendTo(agentA, 5)
	h.clock.Add(time.Hour)
	h.waitIdle()
	h.faultRequireNoDelivery()
	require.Equal(t, webhooks.StateFailed, h.consumer(agentAID).State, "an append does not wake a dead letter")
	r = h.callback(agentAID, d.n.Token, map[string]any{"epoch": d.n.Epoch, "wake_id": d.n.WakeID})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)

	var dead struct {
		Consumers []struct {
			ID         string         `json:"consumer_id"`
			DeadLetter map[string]any `json:"dead_letter"`
		} `json:"consumers"`
	}
	h.api(http.MethodGet, "/agents/*?subscription=s1&dead", "", http.StatusOK, &dead)
	require.Len(t, dead.Consumers, 1)
	require.Equal(t, agentAID, dead.Consumers[0].ID)
	require.NotEmpty(t, dead.Consumers[0].DeadLetter["reason"])

	deadLetter := h.consumer(agentAID)
	h.api(http.MethodPost, "/agents/*?subscription=s1&revive", fmt.Sprintf(`{"consumer":%q}`, agentAID), http.StatusOK, nil)
	d = h.nextDelivery()
	require.Equal(t, acked, d.n.Streams[0].Offset, "revived at its cursor, not -1")
	require.Greater(t, d.n.Epoch, deadLetter.Epoch, "a new wake cycle")
	require.NotEqual(t, deadLetter.WakeID, d.n.WakeID)
	h.api(http.MethodGet, "/agents/*?subscription=s1&dead", "", http.StatusOK, &dead)
	require.Empty(t, dead.Consumers)
	rec := h.do(http.MethodPost, "/agents/*?subscription=s1&revive", fmt.Sprintf(`{"consumer":%q}`, agentAID))
	require.Equal(t, http.StatusConflict, rec.Code, "only a dead letter revives")
}

// Retry-After on a 429 or 503 sets the retry's wait, up to the cap.
func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header string
		want   time.Duration
	}{
		{"503 seconds", http.StatusServiceUnavailable, "120", 120 * time.Second},
		{"429 capped", http.StatusTooManyRequests, "7200", 10 * time.Minute},
		{"http date", http.StatusServiceUnavailable, testStart.Add(5 * time.Minute).UTC().Format(http.TimeFormat), 5 * time.Minute},
		{"shorter than the backoff", http.StatusTooManyRequests, "1", time.Minute},
		{"500 ignores it", http.StatusInternalServerError, "120", time.Minute},
		{"garbage", http.StatusServiceUnavailable, "soon", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, faultConstBackoff(time.Minute), webhooks.WithMaxRetryAfter(10*time.Minute))
			h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
			h.recv.queue(reply{status: tc.status, header: http.Header{"Retry-After": {tc.header}}})
			h.push("/orders/1", numbered(1, 1)...)
			h.nextBatch()
			c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
			require.Equal(t, h.clock.Now().Add(tc.want), c.Deadline)
		})
	}
}

// A receiver holding either secret verifies during the overlap, and only
// the new one after it.
func TestSecretRotationOverlap(t *testing.T) {
	h := newHarness(t)
	old := h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	var rotated struct {
		Secret string `json:"webhook_secret"`
	}
	h.api(http.MethodPost, "/orders/*?subscription=s1&rotate", `{"overlap_ms":3600000}`, http.StatusOK, &rotated)
	require.NotEqual(t, old, rotated.Secret)
	rec := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
	require.NotContains(t, rec.Body.String(), old, "the previous secret is never shown")
	require.NotContains(t, rec.Body.String(), rotated.Secret)

	verify := func(secret string, d delivery) error {
		return verifySignature(secret, d.header, d.body, h.clock.Now(), receiver.DefaultTolerance)
	}
	tail := h.push("/orders/1", numbered(1, 1)...)
	d, _ := h.nextBatch()
	h.waitCursor(ordersID, tail)
	require.NoError(t, verify(old, d))
	require.NoError(t, verify(rotated.Secret, d))

	h.clock.Add(time.Hour)
	h.push("/orders/1", numbered(2, 2)...)
	d, _ = h.nextBatch()
	require.ErrorIs(t, verify(old, d), receiver.ErrInvalidSignature)
	require.NoError(t, verify(rotated.Secret, d))
}

// The official Standard Webhooks library verifies a subscription's
// deliveries, wake-ups and batches alike, and a rotated secret's overlap.
func TestStandardWebhooksLibraryVerifiesDeliveries(t *testing.T) {
	h := newHarness(t)
	var created struct {
		Secret    string `json:"webhook_secret"`
		Signature string `json:"signature"`
	}
	h.api(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"delivery":"events","signature":"standard","batch":{"max_wait_ms":0}}`, h.recv.url()), http.StatusCreated, &created)
	require.Equal(t, "standard", created.Signature)
	wh, err := standardwebhooks.NewWebhook(created.Secret)
	require.NoError(t, err)
	h.push("/orders/1", numbered(1, 1)...)
	d, p := h.nextBatch()
	require.NoError(t, wh.VerifyIgnoringTimestamp(d.body, d.header))
	require.Equal(t, p.DeliveryID, d.header.Get("webhook-id"))

	secret, err := h.engine.RotateSecret(context.Background(), "s1", time.Minute)
	require.NoError(t, err)
	fresh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	h.push("/orders/1", numbered(2, 2)...)
	d, _ = h.nextBatch()
	require.NoError(t, wh.VerifyIgnoringTimestamp(d.body, d.header), "the old secret during the overlap")
	require.NoError(t, fresh.VerifyIgnoringTimestamp(d.body, d.header))

	var wake struct {
		Secret string `json:"webhook_secret"`
	}
	h.api(http.MethodPut, "/agents/*?subscription=w1", fmt.Sprintf(`{"webhook":%q,"signature":"standard"}`, h.recv.url()), http.StatusCreated, &wake)
	h.create(agentA, 1)
	d = h.nextDelivery()
	wwh, err := standardwebhooks.NewWebhook(wake.Secret)
	require.NoError(t, err)
	require.NoError(t, wwh.VerifyIgnoringTimestamp(d.body, d.header))
	require.Equal(t, d.n.WakeID, d.header.Get("webhook-id"))
}

// The delivery log keeps a consumer's newest attempts, no more, and the
// API shows them newest first with their status, class and body preview.
func TestDeliveryLogIsBounded(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithDeliveryLog(5), webhooks.WithCircuitBreaker(0, 0))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":0}`)
	for range 12 {
		h.recv.queue(reply{status: 503, body: "busy"})
	}
	h.push("/orders/1", numbered(1, 1)...)
	for i := 1; i <= 12; i++ {
		h.nextBatch()
		h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == i })
		h.waitIdle() // the attempt is in the log before the next one starts
		h.clock.Add(time.Second)
	}
	h.nextBatch() // the 13th succeeds
	h.waitCursor(ordersID, h.source.appendEvents("/orders/1"))
	h.waitIdle()
	h.flushLog()
	var log []*webhooks.DeliveryAttempt
	require.True(t, h.waitProgress(func() bool {
		var err error
		log, err = h.engine.DeliveryLog(context.Background(), ordersID, 100)
		require.NoError(t, err)
		return len(log) == 5 && log[0].StatusCode == 200
	}), "log: %v", log)
	for i, a := range log {
		require.Equal(t, 13-i, a.Attempt, "newest first")
	}
	require.Equal(t, "status_5xx", log[1].ErrorClass)
	require.Equal(t, "busy", log[1].ResponseBody)

	var out struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	h.api(http.MethodGet, "/orders/*?subscription=s1&deliveries&consumer="+url.QueryEscape(ordersID), "", http.StatusOK, &out)
	require.Len(t, out.Deliveries, 5)
	require.EqualValues(t, 503, out.Deliveries[1]["status_code"])
}

// The consumers listing pages through every consumer once, in ID order,
// filtered by state.
func TestListConsumersPages(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/agents/*")
	for i := range 25 {
		h.source.set(fmt.Sprintf("/agents/%02d", i), 0)
	}
	h.subscribe("s2", "/agents/*") // adopts the 25 streams at their tails
	var seen []string
	cursor := ""
	for {
		var page struct {
			Consumers []struct {
				ID    string `json:"consumer_id"`
				State string `json:"state"`
			} `json:"consumers"`
			Next string `json:"next_cursor"`
		}
		h.api(http.MethodGet, "/agents/*?subscription=s2&consumers&state=idle&limit=10&cursor="+cursor, "", http.StatusOK, &page)
		for _, c := range page.Consumers {
			require.Equal(t, "IDLE", c.State)
			seen = append(seen, c.ID)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	require.Len(t, seen, 25)
	for i, id := range seen {
		require.Equal(t, webhooks.ConsumerID("s2", fmt.Sprintf("/agents/%02d", i)), id)
	}
	rec := h.do(http.MethodGet, "/agents/*?subscription=s2&consumers&state=asleep", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	rec = h.do(http.MethodGet, "/agents/*?subscription=s2&consumers&limit=0", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)
}

// A test delivery is signed, reaches the webhook, and reports the answer.
func TestSendTestDelivery(t *testing.T) {
	h := newHarness(t)
	secret := h.subscribe("s1", "/agents/*")
	h.recv.queue(reply{status: http.StatusTeapot, body: "short and stout"})
	var out webhooks.TestDelivery
	h.api(http.MethodPost, "/agents/*?subscription=s1&test", "", http.StatusOK, &out)
	d := h.nextDelivery()
	require.NoError(t, verifySignature(secret, d.header, d.body, h.clock.Now(), receiver.DefaultTolerance))
	require.Contains(t, string(d.body), webhooks.TestEventType)
	require.False(t, out.Delivered)
	require.Equal(t, http.StatusTeapot, out.StatusCode)
	require.Equal(t, "status_4xx", out.ErrorClass)
	require.Equal(t, "short and stout", out.ResponseBody)
}

// PATCH changes mutable fields, checks the webhook URL again, and refuses
// immutable ones.
func TestPatchSubscription(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	var view map[string]any
	h.api(http.MethodPatch, "/orders/*?subscription=s1", `{"description":"orders","batch":{"max_size":7},"retry":{"max_attempts":9,"schedule_ms":[1000,5000]},"max_deliveries_per_minute":60}`, http.StatusOK, &view)
	require.Equal(t, "orders", view["description"])
	require.EqualValues(t, 7, view["batch"].(map[string]any)["max_size"])
	require.EqualValues(t, 0, view["batch"].(map[string]any)["max_wait_ms"], "other batch fields are kept")
	require.EqualValues(t, 9, view["retry"].(map[string]any)["max_attempts"])
	require.EqualValues(t, 60, view["max_deliveries_per_minute"])

	for body, code := range map[string]int{
		`{"webhook":"http://10.0.0.1/hook"}`: http.StatusBadRequest, // the policy checks it again
		`{"signature":"standard"}`:           http.StatusBadRequest,
		`{"status":"disabled"}`:              http.StatusBadRequest,
		`{"batch":{"max_size":0}}`:           http.StatusBadRequest,
		`{"retry":{"schedule_ms":[0]}}`:      http.StatusBadRequest,
		`{"nope":1}`:                         http.StatusBadRequest,
	} {
		rec := h.do(http.MethodPatch, "/orders/*?subscription=s1", body)
		require.Equal(t, code, rec.Code, "%s: %s", body, rec.Body.String())
	}
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, 7, sub.Events.MaxBatchEvents, "a refused PATCH changes nothing")
	require.Equal(t, h.recv.url(), sub.Webhook)
}

// deliver_policy "all" starts the consumers of existing streams before
// their first events; "from_offset" at the offset given.
func TestDeliverPolicy(t *testing.T) {
	h := newHarness(t)
	tail := h.source.appendEvents("/orders/1", numbered(1, 3)...)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"deliver_policy":"all"`)
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 3), eventStrings(p))
	h.waitCursor(ordersID, tail)

	h.subscribeEvents("s2", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.waitIdle()
	h.faultRequireNoDelivery()
	require.Equal(t, tail, h.consumer("s2:%2Forders%2F1").Streams[0].Offset, "new: at the tail")

	rec := h.do(http.MethodPut, "/orders/*?subscription=s3", fmt.Sprintf(`{"webhook":%q,"deliver_policy":"sometime"}`, h.recv.url()))
	require.Equal(t, http.StatusBadRequest, rec.Code)
}

// Deliveries past a subscription's rate limit wait their turn, each at the
// time its token comes, and none is dropped.
func TestRateLimitDefersAndDropsNothing(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"max_deliveries_per_minute":2`)
	for i := 1; i <= 5; i++ {
		h.push(fmt.Sprintf("/orders/%d", i), numbered(i, i)...)
	}
	got := map[string]bool{}
	take := func(n int) {
		t.Helper()
		for range n {
			_, p := h.nextBatch()
			got[p.Stream] = true
		}
		h.waitIdle()
		h.faultRequireNoDelivery()
	}
	take(2) // the bucket holds a minute's worth
	for _, n := range []int{1, 1, 1} {
		h.clock.Add(30 * time.Second) // one token every 30s
		take(n)
	}
	require.Len(t, got, 5, "every stream delivered once")
	for i := 1; i <= 5; i++ {
		c := h.consumer(webhooks.ConsumerID("s1", fmt.Sprintf("/orders/%d", i)))
		require.Zero(t, c.Failures, "waiting for a turn is no failure")
	}
}

// Failures that go on arriving after the breaker tripped, from other
// consumers, call the hook no second time.
func TestCircuitBreakerHookOnceUnderConcurrentFailures(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, faultConstBackoff(time.Hour), webhooks.WithCircuitBreaker(2, 0),
		webhooks.WithSubscriptionDisabledHook(func(context.Context, webhooks.SubscriptionDisabled) { calls.Add(1) }))
	// Every batch is held until all six have arrived, so that all six are
	// sent before the first failure trips the breaker, however busy the
	// machine: four failures then arrive after it.
	var arrived atomic.Int32
	all := make(chan struct{})
	h.recv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 6 {
			close(all)
		}
		select {
		case <-all:
		case <-r.Context().Done():
		}
		w.WriteHeader(500)
	})
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	for i := 1; i <= 6; i++ {
		h.push(fmt.Sprintf("/orders/%d", i), numbered(i, i)...)
	}
	require.True(t, h.waitProgress(func() bool {
		sub, err := h.store.GetSubscription(context.Background(), "s1")
		require.NoError(t, err)
		return sub.Health.ConsecutiveFailures == 6
	}))
	h.waitIdle()
	require.Equal(t, int32(1), calls.Load())
}

// timedSource is a fakeSource that knows when each event was appended.
type timedSource struct {
	*fakeSource
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *timedSource) OffsetAt(_ context.Context, path string, t time.Time) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.at[path] {
		if a.Before(t) {
			n++
		}
	}
	if n == 0 {
		return webhooks.OffsetNone, nil
	}
	return offset(n), nil
}

// Rewinding to a time re-delivers what was appended from then on, on a
// source that can map a time to an offset; another source refuses it.
func TestRewindToATime(t *testing.T) {
	src := &timedSource{at: map[string][]time.Time{}}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	push := func(from, to int) string {
		src.mu.Lock()
		for range to - from + 1 {
			src.at["/orders/1"] = append(src.at["/orders/1"], h.clock.Now())
		}
		src.mu.Unlock()
		tail := h.push("/orders/1", numbered(from, to)...)
		h.nextBatch()
		return h.waitCursor(ordersID, tail).Streams[0].Offset
	}
	push(1, 3)
	h.clock.Add(time.Hour)
	since := h.clock.Now()
	tail := push(4, 6)

	h.api(http.MethodPost, "/orders/*?subscription=s1&rewind", fmt.Sprintf(`{"at":%q}`, since.Format(time.RFC3339)), http.StatusOK, nil)
	_, p := h.nextBatch()
	require.Equal(t, numbered(4, 6), eventStrings(p))
	h.waitCursor(ordersID, tail)

	rec := h.do(http.MethodPost, "/orders/*?subscription=s1&rewind", fmt.Sprintf(`{"at":%q,"offset":"-1"}`, since.Format(time.RFC3339)))
	require.Equal(t, http.StatusBadRequest, rec.Code, "offset or at, not both")

	plain := newHarness(t)
	plain.subscribe("s1", "/orders/*")
	rec = plain.do(http.MethodPost, "/orders/*?subscription=s1&rewind", `{"at":"2026-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "OffsetFinder")
}
