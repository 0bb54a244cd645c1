package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

const ordersID = "s1:%2Forders%2F1"

// A batch carries the events after the cursor, signed, with the delivery
// id in a header, and its 2xx moves the cursor to the batch's end.
func TestPushSendsABatchAndItsAckMovesTheCursor(t *testing.T) {
	h := newHarness(t)
	secret := h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"headers":{"authorization":"Bearer abc"}`)
	tail := h.push("/orders/1", `{"type":"order.created","id":1}`, `[1, "two"]`, `"three"`)

	d, p := h.nextBatch()
	require.Equal(t, receiver.EventsPayload{
		SubscriptionID: "s1",
		Stream:         "/orders/1",
		DeliveryID:     p.DeliveryID,
		Events:         p.Events,
		FirstOffset:    "-1",
		Offset:         tail,
		UpToDate:       true,
	}, p)
	require.Equal(t, []string{`{"type":"order.created","id":1}`, `[1, "two"]`, `"three"`}, eventStrings(p), "the events as they are in the stream")
	require.True(t, strings.HasPrefix(p.DeliveryID, "msg_"), p.DeliveryID)
	require.Equal(t, p.DeliveryID, d.header.Get(receiver.IDHeader))
	require.Equal(t, strconv.FormatInt(h.clock.Now().Unix(), 10), d.header.Get(receiver.TimestampHeader))
	require.NoError(t, verifySignature(secret, d.header, d.body, h.clock.Now(), time.Minute))
	require.Contains(t, d.header.Get(receiver.SignatureHeader), "t="+d.header.Get(receiver.TimestampHeader)+",", "one signing time")
	require.Equal(t, "Bearer abc", d.header.Get("Authorization"), "the custom header")
	require.Equal(t, "application/json", d.header.Get("Content-Type"))

	c := h.waitCursor(ordersID, tail)
	require.Equal(t, webhooks.StateIdle, c.State)
	require.True(t, c.Deadline.IsZero())
	require.Equal(t, webhooks.ReadLimit{}, c.Batch, "no batch in flight")

	tail2 := h.push("/orders/1", `{"n":4}`)
	_, p2 := h.nextBatch()
	require.Equal(t, []string{`{"n":4}`}, eventStrings(p2), "the next batch starts at the cursor")
	require.Equal(t, tail, p2.FirstOffset)
	require.Equal(t, tail2, p2.Offset)
	require.NotEqual(t, p.DeliveryID, p2.DeliveryID, "a new batch, a new delivery id")
	h.waitCursor(ordersID, tail2)
}

// A retry sends the same events under the same delivery id, even after
// more events arrived; only its 2xx lets the next batch go.
func TestPushRetrySendsTheSameBatch(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.recv.queue(reply{status: http.StatusServiceUnavailable})
	first := h.push("/orders/1", numbered(1, 2)...)
	d1, p1 := h.nextBatch()
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, webhooks.StateWaking, c.State)
	require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "a failed batch moves no cursor")
	require.Equal(t, "status_5xx: status 503", c.LastError)

	last := h.push("/orders/1", numbered(3, 3)...)
	h.faultRequireNoDelivery() // the batch in flight holds the stream
	h.clock.Add(time.Second)
	d2, p2 := h.nextBatch()
	require.Equal(t, p1, p2, "the same batch")
	require.Equal(t, d1.header.Get(receiver.IDHeader), d2.header.Get(receiver.IDHeader))
	require.Equal(t, first, p2.Offset)
	require.True(t, p2.UpToDate, "the tail when the batch began, as in every attempt")

	_, p3 := h.nextBatch()
	require.Equal(t, numbered(3, 3), eventStrings(p3))
	require.Equal(t, first, p3.FirstOffset)
	c = h.waitCursor(ordersID, last)
	require.Zero(t, c.Failures)
	require.Empty(t, c.LastError, "a 2xx clears the last error")
}

// A batch holds at most max_size events and max_bytes bytes, but always
// one event; a batch cut by a limit is followed at once by the next.
func TestPushBatchLimits(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_size":2,"max_bytes":16,"max_wait_ms":0}`)
	big := `{"pad":"` + strings.Repeat("x", 40) + `"}`
	events := append(numbered(1, 5), big, `{"n":7}`)
	tail := h.push("/orders/1", events...)
	var got [][]string
	for len(got) < 5 {
		_, p := h.nextBatch()
		got = append(got, eventStrings(p))
	}
	require.Equal(t, [][]string{
		{`{"n":1}`, `{"n":2}`}, // max_size
		{`{"n":3}`, `{"n":4}`},
		{`{"n":5}`}, // max_bytes: 7 + 48 > 16
		{big},       // alone, whatever its size
		{`{"n":7}`},
	}, got)
	h.waitCursor(ordersID, tail)
}

// With max_wait_ms the first pending event waits for others to join its
// batch, and the batch goes when the window closes.
func TestPushBatchWindow(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":500}`)
	h.push("/orders/1", numbered(1, 1)...)
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return !c.Deadline.IsZero() })
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Equal(t, h.clock.Now().Add(500*time.Millisecond), c.Deadline, "the window")
	h.clock.Add(400 * time.Millisecond)
	tail := h.push("/orders/1", numbered(2, 3)...)
	require.Equal(t, c.Deadline, h.consumer(ordersID).Deadline, "an append does not move the window")
	h.faultRequireNoDelivery()

	h.clock.Add(100 * time.Millisecond)
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 3), eventStrings(p), "one batch of what the window gathered")
	h.waitCursor(ordersID, tail)
}

// Events that a full batch left behind have waited their window: the next
// batch goes at once, with what is pending then. Events that arrived
// during a batch that was not full open a window.
func TestPushBatchWindowAfterAFullBatch(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":500,"max_size":2}`)
	hold1, hold2 := make(chan struct{}), make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold1}, reply{status: http.StatusOK, hold: hold2})
	h.push("/orders/1", numbered(1, 3)...)
	h.clock.Add(500 * time.Millisecond)
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 2), eventStrings(p))
	h.push("/orders/1", numbered(4, 4)...)
	close(hold1)
	_, p = h.nextBatch()
	require.Equal(t, numbered(3, 4), eventStrings(p), "left behind by a full batch: sent at once")
	h.push("/orders/1", numbered(5, 5)...)
	close(hold2)
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle && !c.Deadline.IsZero() })
	require.Equal(t, h.clock.Now().Add(500*time.Millisecond), c.Deadline, "{n:5} came during a batch that was not full: a window")
	h.faultRequireNoDelivery()
	h.clock.Add(500 * time.Millisecond)
	_, p = h.nextBatch()
	require.Equal(t, numbered(5, 5), eventStrings(p))
}

// The filter sends only the events whose field matches a pattern; the
// others move the cursor unsent, and a batch with nothing to send makes no
// POST.
func TestPushFilter(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":5},
		"filter":{"field":"meta.type","patterns":["order.*","refund.**"]}`)
	skipped := h.push("/orders/1",
		`{"meta":{"type":"user.created"}}`,
		`{"meta":{"type":"order"}}`,
		`{"type":"order.created"}`,
		`[1]`,
		`{"meta":{"type":7}}`,
	)
	h.waitCursor(ordersID, skipped)
	h.faultRequireNoDelivery()

	tail := h.push("/orders/1",
		`{"meta":{"type":"order.created"},"n":1}`,
		`{"meta":{"type":"order.created.late"}}`,
		`{"meta":{"type":"refund.issued.partly"},"n":2}`,
		`{"meta":{"type":"refund"}}`,
		`{"meta": {"type" : "order.paid"}, "n":3}`,
	)
	_, p := h.nextBatch()
	require.Equal(t, []string{
		`{"meta":{"type":"order.created"},"n":1}`,
		`{"meta":{"type":"refund.issued.partly"},"n":2}`,
		`{"meta": {"type" : "order.paid"}, "n":3}`,
	}, eventStrings(p), "'*' is one segment, '**' any number; events go as they are")
	require.Equal(t, skipped, p.FirstOffset, "the batch covers the stream from the cursor")
	require.Equal(t, tail, p.Offset)
	h.waitCursor(ordersID, tail)
}

// A byte stream's events go as base64 strings.
func TestPushByteStream(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_bytes":4}`)
	tail := h.source.appendBytes("/orders/1", []byte("hello!"))
	require.NoError(t, h.engine.StreamCreated(context.Background(), "/orders/1"))
	_, p := h.nextBatch()
	require.Equal(t, []string{`"aGVsbA=="`}, eventStrings(p), "base64 of the first max_bytes bytes")
	_, p = h.nextBatch()
	require.Equal(t, []string{`"byE="`}, eventStrings(p))
	require.Equal(t, tail, p.Offset)
	h.waitCursor(ordersID, tail)
}

// After max_attempts the consumer stops in FAILED with its cursor before
// the batch, and sends nothing more until it is resumed, with the same
// batch.
func TestPushMaxAttemptsStopsTheConsumer(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":2}`)
	h.recv.queue(reply{status: http.StatusBadRequest}, reply{status: http.StatusBadRequest})
	tail := h.push("/orders/1", numbered(1, 2)...)
	_, p1 := h.nextBatch()
	h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	h.clock.Add(time.Second)
	_, p2 := h.nextBatch()
	require.Equal(t, p1, p2)
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateFailed })
	require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset)
	require.Equal(t, "status_4xx: status 400", c.LastError)
	require.True(t, c.Deadline.IsZero(), "nothing scheduled")

	h.push("/orders/1", numbered(3, 3)...)
	h.clock.Add(time.Hour)
	h.faultRequireNoDelivery()
	require.Equal(t, webhooks.StateFailed, h.consumer(ordersID).State, "an append does not restart it")

	require.NoError(t, h.engine.ResumeConsumer(context.Background(), ordersID))
	_, p3 := h.nextBatch()
	require.Equal(t, p1, p3, "resumed with the same batch")
	_, p4 := h.nextBatch()
	require.Equal(t, numbered(3, 3), eventStrings(p4))
	h.waitCursor(ordersID, h.source.appendEvents("/orders/1"))
	require.ErrorIs(t, h.engine.ResumeConsumer(context.Background(), "s1:%2Fnone"), webhooks.ErrConsumerNotFound)
	require.NoError(t, h.engine.ResumeConsumer(context.Background(), ordersID), "a consumer not FAILED is left alone")
	_ = tail
}

// A POST that outlives timeout_ms fails, and the batch is sent again
// after the backoff under the same delivery id.
func TestPushTimeout(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"timeout_ms":2000`)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	tail := h.push("/orders/1", numbered(1, 1)...)
	d1, _ := h.nextBatch()
	h.clock.Add(2 * time.Second)
	<-d1.ctx.Done() // the engine gave up on the POST
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, "timeout", strings.SplitN(c.LastError, ":", 2)[0])
	h.clock.Add(time.Second)
	d2, _ := h.nextBatch()
	require.Equal(t, d1.header.Get(receiver.IDHeader), d2.header.Get(receiver.IDHeader))
	h.waitCursor(ordersID, tail)
}

// A new subscription starts at each existing stream's tail; a stream
// created later is sent from its start.
func TestPushStartsAtTheTailOfExistingStreams(t *testing.T) {
	h := newHarness(t)
	h.source.appendEvents("/orders/old", numbered(1, 2)...)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.push("/orders/old", numbered(3, 3)...)
	_, p := h.nextBatch()
	require.Equal(t, numbered(3, 3), eventStrings(p))
	require.Equal(t, offset(2), p.FirstOffset)

	h.push("/orders/new", numbered(1, 1)...)
	_, p = h.nextBatch()
	require.Equal(t, numbered(1, 1), eventStrings(p))
	require.Equal(t, webhooks.OffsetNone, p.FirstOffset)
}

// An empty new stream makes no POST: its consumer's cursor moves to the
// stream's first offset.
func TestPushEmptyStreamSendsNothing(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	h.push("/orders/1")
	h.waitCursor(ordersID, offset(0))
	h.faultRequireNoDelivery()
}

func TestPushSubscriptionAPI(t *testing.T) {
	h := newHarness(t)
	body := `{"webhook":%q,"delivery":"events","batch":{"max_size":10},"headers":{"X-Api-Key":"k1"},
		"timeout_ms":1500,"filter":{"field":"type","patterns":["a.*"]}}`
	rec := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(body, h.recv.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	delete(got, "webhook_secret")
	require.Equal(t, map[string]any{
		"subscription_id":           "s1",
		"pattern":                   "/orders/*",
		"webhook":                   h.recv.url(),
		"delivery":                  "events",
		"status":                    "active",
		"created_at":                "2026-01-02T03:04:05Z",
		"updated_at":                "2026-01-02T03:04:05Z",
		"batch":                     map[string]any{"max_size": 10.0, "max_bytes": 1048576.0, "max_wait_ms": 1000.0},
		"headers":                   map[string]any{"X-Api-Key": "[redacted]"},
		"timeout_ms":                1500.0,
		"retry":                     map[string]any{"max_attempts": 5.0, "max_age_ms": 0.0, "client_errors": "retry", "on_exhausted": "stop"},
		"filter":                    map[string]any{"field": "type", "patterns": []any{"a.*"}},
		"signature":                 "streamhooks",
		"max_deliveries_per_minute": 60000.0,
		"consecutive_failures":      0.0,
		"failing_since":             nil,
		"last_success_at":           nil,
		"last_failure_at":           nil,
	}, got, "defaults filled in, header values never shown")
	require.NotContains(t, rec.Body.String(), "k1")

	get := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
	require.Equal(t, http.StatusOK, get.Code)
	require.NotContains(t, get.Body.String(), "k1")
	require.Contains(t, get.Body.String(), `"delivery":"events"`)

	again := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(body, h.recv.url()))
	require.Equal(t, http.StatusOK, again.Code, "the same request again")
	changed := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(strings.Replace(body, "k1", "k2", 1), h.recv.url()))
	require.Equal(t, http.StatusConflict, changed.Code, "another header value is another configuration")
	asWake := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(`{"webhook":%q}`, h.recv.url()))
	require.Equal(t, http.StatusConflict, asWake.Code)

	wake := h.do(http.MethodPut, "/orders/*?subscription=s2", fmt.Sprintf(`{"webhook":%q}`, h.recv.url()))
	require.Equal(t, http.StatusCreated, wake.Code)
	require.NotContains(t, wake.Body.String(), "batch", "a wake subscription has no event-push options")
}

func TestPushSubscriptionAPIRefusesBadOptions(t *testing.T) {
	h := newHarness(t)
	for _, fields := range []string{
		`"delivery":"push"`,
		`"batch":{"max_size":1}`, // on a wake subscription
		`"delivery":"events","batch":{"max_size":0}`,
		`"delivery":"events","batch":{"max_size":10001}`,
		`"delivery":"events","batch":{"max_bytes":0}`,
		`"delivery":"events","batch":{"max_bytes":16777217}`,
		`"delivery":"events","batch":{"max_wait_ms":-1}`,
		`"delivery":"events","batch":{"max_wait_ms":60001}`,
		`"delivery":"events","batch":{"max_count":1}`,
		`"delivery":"events","timeout_ms":0`,
		`"delivery":"events","timeout_ms":300001`,
		`"delivery":"events","retry":{"max_attempts":-1}`,
		`"delivery":"events","retry":{"max_attempts":1001}`,
		`"delivery":"events","headers":{"Bad Name":"x"}`,
		`"delivery":"events","headers":{"X-A":"line\nbreak"}`,
		`"delivery":"events","headers":{"content-type":"text/plain"}`,
		`"delivery":"events","headers":{"webhook-id":"x"}`,
		`"delivery":"events","headers":{"X-A":"1","x-a":"2"}`,
		`"delivery":"events","headers":{"X-A":"` + strings.Repeat("v", 8200) + `"}`,
		`"delivery":"events","filter":{"patterns":["a"]}`,
		`"delivery":"events","filter":{"field":"type","patterns":[]}`,
		`"delivery":"events","filter":{"field":"a..b","patterns":["x"]}`,
		`"delivery":"events","filter":{"field":"type","patterns":["a.**.b"]}`,
		`"delivery":"events","filter":{"field":"type","patterns":["a**"]}`,
		`"delivery":"events","filter":{"field":"type","patterns":["[a"]}`,
	} {
		rec := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,%s}`, h.recv.url(), fields))
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", fields, rec.Body.String())
		require.Contains(t, rec.Body.String(), `"INVALID_REQUEST"`, fields)
	}
	_, err := h.store.GetSubscription(context.Background(), "s1")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
}

// An events subscription needs a source that can read events.
func TestPushNeedsAnEventReader(t *testing.T) {
	h := newHarnessWrapped(t, func(s *fakeSource) webhooks.StreamSource { return tailsOnly{s} })
	rec := h.do(http.MethodPut, "/orders/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"delivery":"events"}`, h.recv.url()))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "cannot")
}

// tailsOnly hides every capability of a source but the StreamSource
// methods.
type tailsOnly struct{ s *fakeSource }

func (t tailsOnly) Stream(ctx context.Context, path string) (webhooks.StreamInfo, error) {
	return t.s.Stream(ctx, path)
}

func (t tailsOnly) MatchStreams(ctx context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	return t.s.MatchStreams(ctx, p)
}

// With max_attempts 0 a batch is retried for ever: an events consumer has
// no failure GC.
func TestPushRetriesForEver(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour), webhooks.WithFailureGCAfter(2*time.Hour))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":0}`)
	for range 4 {
		h.recv.queue(reply{status: http.StatusInternalServerError})
	}
	tail := h.push("/orders/1", numbered(1, 1)...)
	for i := 1; i <= 4; i++ {
		h.nextBatch()
		h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == i && !c.InFlight })
		h.clock.Add(time.Hour)
	}
	_, p := h.nextBatch()
	require.Equal(t, numbered(1, 1), eventStrings(p), "past the failure GC period, still the same batch")
	h.waitCursor(ordersID, tail)
}

// An attempt left in flight by an engine that stopped is retried by the
// next engine once the POST's timeout and a grace have passed, not the
// WAKING timeout.
func TestPushAttemptOfAStoppedEngineIsRetried(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithTimeouts(time.Hour, time.Hour, time.Hour))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"timeout_ms":2000`)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	tail := h.push("/orders/1", numbered(1, 1)...)
	d1, _ := h.nextBatch()
	// Stopped as a crash would, so that the held POST is abandoned.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, h.engine.Stop(ctx), context.Canceled)
	<-d1.ctx.Done()
	require.True(t, h.consumer(ordersID).InFlight, "the stopped engine recorded nothing")

	h.startEngine(faultConstBackoff(time.Second), webhooks.WithTimeouts(time.Hour, time.Hour, time.Hour))
	h.clock.Add(2*time.Second + time.Second - time.Millisecond)
	require.True(t, h.consumer(ordersID).InFlight, "within the timeout and its grace")
	h.clock.Add(time.Millisecond)
	h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	h.clock.Add(time.Second)
	d2, _ := h.nextBatch()
	require.Equal(t, d1.header.Get(receiver.IDHeader), d2.header.Get(receiver.IDHeader))
	h.waitCursor(ordersID, tail)
}

// A 410 Gone disables the subscription: no consumer of it sends anything,
// and each keeps its cursor, until ResumeSubscription resumes them.
func TestPushGoneDisablesTheSubscription(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
	other := webhooks.ConsumerID("s1", "/orders/2")
	h.recv.queue(reply{status: http.StatusGone})
	h.push("/orders/1", numbered(1, 1)...)
	_, gone := h.nextBatch()
	c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	require.Equal(t, "status_4xx: status 410", c.LastError)
	// The attempt's end, signalled after the subscription is disabled.
	require.True(t, h.waitProgress(func() bool {
		rec := h.do(http.MethodGet, "/orders/*?subscription=s1", "")
		return strings.Contains(rec.Body.String(), `"status":"disabled"`)
	}), "the API shows the subscription disabled")
	sub, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err)
	require.Equal(t, webhooks.StatusDisabled, sub.Status)

	h.clock.Add(time.Second) // the retry comes due, and waits
	c = h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Deadline.IsZero() })
	require.Equal(t, webhooks.StateWaking, c.State)
	require.False(t, c.InFlight)
	h.push("/orders/2", numbered(1, 2)...)
	h.waitConsumer(other, func(*webhooks.Consumer) bool { return true })
	h.clock.Add(time.Hour)
	h.faultRequireNoDelivery()
	require.Equal(t, webhooks.StateIdle, h.consumer(other).State, "a disabled subscription starts nothing")

	_, err = h.engine.ResumeSubscription(context.Background(), "s1")
	require.NoError(t, err)
	got := map[string][]string{}
	for range 2 {
		_, p := h.nextBatch()
		got[p.Stream] = eventStrings(p)
		if p.Stream == "/orders/1" {
			require.Equal(t, gone.DeliveryID, p.DeliveryID, "the batch that met the 410, again")
		}
	}
	require.Equal(t, map[string][]string{"/orders/1": numbered(1, 1), "/orders/2": numbered(1, 2)}, got, "every consumer resumed from its cursor")
	_, err = h.engine.ResumeSubscription(context.Background(), "none")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
}

// A batch's request, byte for byte: the body, and the headers with a
// signature computed independently (Python's hmac) for a fixed secret,
// time and delivery id.
func TestPushKnownAnswer(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	require.NoError(t, h.store.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "s1", Pattern: "/orders/*", Webhook: h.recv.url(), Secret: "whsec_kat", CreatedAt: h.clock.Now(),
		Delivery: webhooks.DeliveryEvents,
		Events:   &webhooks.EventsOptions{MaxBatchEvents: 100, Headers: map[string]string{"Authorization": "Bearer kat"}},
	}))
	tail := h.source.appendEvents("/orders/1", `{"n":1}`, `{"n":2}`)
	h.waitIdle() // the scheduler has looked, and finds the consumer at its next poll
	require.NoError(t, h.store.CreateConsumer(ctx, &webhooks.Consumer{
		ID: ordersID, SubscriptionID: "s1", PrimaryStream: "/orders/1",
		State: webhooks.StateWaking, Epoch: 1, WakeID: "msg_00000000000000000000000000000001",
		Streams: streamOffsets("/orders/1", webhooks.OffsetNone), Batch: webhooks.ReadLimit{MaxEvents: 100, Until: tail},
		Deadline: h.clock.Now(),
	}))
	h.clock.Add(testPollInterval) // the poll finds the retry due: 2026-01-02T04:04:05Z
	d := h.nextDelivery()
	require.Equal(t, `{"subscription_id":"s1","stream":"/orders/1","delivery_id":"msg_00000000000000000000000000000001",`+
		`"events":[{"n":1},{"n":2}],"first_offset":"-1","offset":"0000000000000000_0000000000000002","up_to_date":true}`, string(d.body))
	for name, want := range map[string]string{
		"Content-Type":           "application/json",
		"User-Agent":             "streamhooks",
		"Authorization":          "Bearer kat",
		receiver.IDHeader:        "msg_00000000000000000000000000000001",
		receiver.TimestampHeader: "1767326645",
		receiver.SignatureHeader: "t=1767326645,sha256=c73d08113151e0ab89b71f3b17d3efea813dfda7042f07d1ade85512c0ca0eba",
	} {
		require.Equal(t, want, d.header.Get(name), name)
	}
	h.waitCursor(ordersID, tail)
}

// unreadable is a source whose streams cannot be read: ReadEvents fails
// with err.
type unreadable struct {
	*fakeSource
	err error
}

func (u unreadable) ReadEvents(context.Context, string, string, webhooks.ReadLimit) (webhooks.EventBatch, error) {
	return webhooks.EventBatch{}, u.err
}

// A batch that cannot be read is not sent: the attempt stays in flight and
// times out, to be retried. A read error is logged, but not a stream that
// was deleted meanwhile, which takes its consumers with it.
func TestPushUnreadableBatch(t *testing.T) {
	for _, tc := range []struct {
		err    error
		logged int
	}{
		{errors.New("disk on fire"), 1},
		{webhooks.ErrStreamNotFound, 0},
	} {
		logs, logger := newLogCapture()
		h := newHarnessWrapped(t, func(s *fakeSource) webhooks.StreamSource { return unreadable{s, tc.err} },
			webhooks.WithLogger(logger))
		h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0}`)
		h.push("/orders/1", numbered(1, 1)...)
		require.True(t, h.waitProgress(func() bool { return webhooks.DeliveriesRunning(h.engine) == 0 }))
		c := h.consumer(ordersID)
		require.True(t, c.InFlight && c.State == webhooks.StateWaking, "%v: the attempt stays in flight", tc.err)
		h.faultRequireNoDelivery()
		require.Len(t, logs.lines(t, "webhooks: reading a batch"), tc.logged, tc.err)
	}
}

// blockingReader is a source whose reads wait for their context.
type blockingReader struct {
	*fakeSource
	started chan struct{}
	stopped chan error
}

func (b *blockingReader) ReadEvents(ctx context.Context, _, _ string, _ webhooks.ReadLimit) (webhooks.EventBatch, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	b.stopped <- context.Cause(ctx)
	return webhooks.EventBatch{}, ctx.Err()
}

// A read of a batch that outlives its attempt's timeout stops: it holds
// no goroutine after the attempt is given up.
func TestPushReadStopsAtTheAttemptsTimeout(t *testing.T) {
	src := &blockingReader{started: make(chan struct{}, 1), stopped: make(chan error, 1)}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"timeout_ms":1500`)
	h.push("/orders/1", numbered(1, 1)...)
	select {
	case <-src.started:
	case <-time.After(waitFor):
		t.Fatal("the read never started")
	}
	h.clock.Add(1499 * time.Millisecond)
	select {
	case err := <-src.stopped:
		t.Fatalf("the read stopped before its timeout: %v", err)
	default:
	}
	h.clock.Add(time.Millisecond)
	select {
	case err := <-src.stopped:
		require.Error(t, err)
	case <-time.After(waitFor):
		t.Fatal("the read outlived its attempt's timeout")
	}
}
