package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// retry.client_errors says which 4xx are retried: every one by default
// (as before the option), only 408 and 429 under "transient" (seed 002
// section 5.2), none under "fail" (seed 004, Response Expectations). A
// permanent failure gives up at once, whatever attempts are left.
func TestPushClientErrorPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy    string
		status    int
		permanent bool
	}{
		{"", http.StatusBadRequest, false},
		{"retry", http.StatusNotFound, false},
		{"transient", http.StatusBadRequest, true},
		{"transient", http.StatusUnprocessableEntity, true},
		{"transient", http.StatusRequestTimeout, false},
		{"transient", http.StatusTooManyRequests, false},
		{"transient", http.StatusInternalServerError, false},
		{"fail", http.StatusTooManyRequests, true},
		{"fail", http.StatusRequestTimeout, true},
		{"fail", http.StatusServiceUnavailable, false},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.policy, tc.status), func(t *testing.T) {
			h := newHarness(t, faultConstBackoff(time.Second))
			field := ""
			if tc.policy != "" {
				field = fmt.Sprintf(`,"client_errors":%q`, tc.policy)
			}
			h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":5`+field+`}`)
			h.recv.queue(reply{status: tc.status})
			h.push("/orders/1", numbered(1, 1)...)
			_, p1 := h.nextBatch()
			c := h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
			if tc.permanent {
				require.Equal(t, webhooks.StateFailed, c.State, "a permanent failure gives up at once")
				require.Equal(t, fmt.Sprintf("status_4xx: status %d", tc.status), c.LastError)
				require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "the cursor stays")
				return
			}
			require.Equal(t, webhooks.StateWaking, c.State, "retried")
			h.clock.Add(time.Hour) // past a Retry-After's cap too
			_, p2 := h.nextBatch()
			require.Equal(t, p1, p2)
			h.waitCursor(ordersID, p1.Offset)
		})
	}
}

// The policy's options show in the subscription, with their defaults, and
// bad values are refused at the door; a wake subscription cannot skip.
func TestRetryPolicyOptionsAPI(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("s1", "/orders/*", "")
	var out struct {
		Retry map[string]any `json:"retry"`
	}
	h.api(http.MethodGet, "/orders/*?subscription=s1", "", http.StatusOK, &out)
	require.Equal(t, "retry", out.Retry["client_errors"], "today's behaviour is the default")
	require.Equal(t, "stop", out.Retry["on_exhausted"])

	h.subscribeEvents("s2", "/orders/*", `"retry":{"client_errors":"transient","on_exhausted":"skip"}`)
	h.api(http.MethodGet, "/orders/*?subscription=s2", "", http.StatusOK, &out)
	require.Equal(t, "transient", out.Retry["client_errors"])
	require.Equal(t, "skip", out.Retry["on_exhausted"])
	h.api(http.MethodPatch, "/orders/*?subscription=s2", `{"retry":{"client_errors":"fail"}}`, http.StatusOK, &out)
	require.Equal(t, "fail", out.Retry["client_errors"])
	require.Equal(t, "skip", out.Retry["on_exhausted"], "a PATCH keeps what it does not give")

	for body, field := range map[string]string{
		`{"webhook":%q,"delivery":"events","retry":{"client_errors":"never"}}`: "retry.client_errors",
		`{"webhook":%q,"delivery":"events","retry":{"on_exhausted":"drop"}}`:   "retry.on_exhausted",
		`{"webhook":%q,"retry":{"on_exhausted":"skip"}}`:                       "retry.on_exhausted",
	} {
		rec := h.do(http.MethodPut, "/orders/*?subscription=s3", fmt.Sprintf(body, h.recv.url()))
		require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
		require.Contains(t, rec.Body.String(), field)
	}

	_, err := h.engine.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s4", Pattern: "/orders/*", Webhook: h.recv.url(),
		Retry: &webhooks.RetryPolicy{OnExhausted: webhooks.ExhaustedSkip},
	}, "")
	var verr *webhooks.ValidationError
	require.ErrorAs(t, err, &verr, "Go callers get the same refusal")
	require.Equal(t, "retry.on_exhausted", verr.Field)
}

// on_exhausted "skip": a batch that had every attempt is recorded as a
// skipped dead letter (its offsets, attempts and last error), the cursor
// moves past it and the stream goes on; a rewind to the record's start
// delivers it again and drops the record (seed 004: "log and skip").
func TestPushSkipRecordsTheBatchAndMovesOn(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0},"retry":{"max_attempts":2,"on_exhausted":"skip"}`)
	h.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusServiceUnavailable})
	h.push("/orders/1", numbered(1, 2)...)
	failingSince := h.clock.Now()
	_, p1 := h.nextBatch()
	h.waitConsumer(ordersID, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	h.clock.Add(time.Second)
	_, p2 := h.nextBatch()
	require.Equal(t, p1, p2)

	c := h.waitCursor(ordersID, p1.Offset)
	require.NotEqual(t, webhooks.StateFailed, c.State, "the consumer goes on")
	require.Equal(t, []webhooks.SkippedBatch{{
		DeliveryID: p1.DeliveryID, From: webhooks.OffsetNone, To: p1.Offset, Attempts: 2, Failures: 2,
		FailingSince: failingSince, LastError: "status_5xx: status 503", SkippedAt: h.clock.Now(),
	}}, c.Skipped)
	require.Zero(t, c.Failures, "the failure run ends with the batch")

	var view struct {
		Skipped []map[string]any `json:"skipped"`
	}
	h.api(http.MethodGet, "/orders/*?subscription=s1&consumer="+url.QueryEscape(ordersID), "", http.StatusOK, &view)
	require.Len(t, view.Skipped, 1)
	require.Equal(t, p1.DeliveryID, view.Skipped[0]["delivery_id"])
	require.Equal(t, "-1", view.Skipped[0]["from_offset"])
	require.Equal(t, p1.Offset, view.Skipped[0]["to_offset"])
	require.Equal(t, "status_5xx: status 503", view.Skipped[0]["last_error"])

	tail := h.push("/orders/1", numbered(3, 3)...)
	_, p3 := h.nextBatch()
	require.Equal(t, numbered(3, 3), eventStrings(p3), "the stream goes on past the skipped batch")
	require.Equal(t, p1.Offset, p3.FirstOffset)
	h.waitCursor(ordersID, tail)

	// Replay by rewind.
	h.api(http.MethodPost, "/orders/*?subscription=s1&rewind", fmt.Sprintf(`{"offset":%q,"consumer":%q}`, c.Skipped[0].From, ordersID), http.StatusOK, nil)
	_, p4 := h.nextBatch()
	require.Equal(t, numbered(1, 3), eventStrings(p4), "the skipped batch comes again")
	c = h.waitCursor(ordersID, tail)
	require.Empty(t, c.Skipped, "a rewind drops the records of what it delivers again")
}

// Under client_errors "fail" and on_exhausted "skip" a 4xx skips its batch
// at once: seed 004's "4xx: permanent failure, log and skip".
func TestPushPermanentFailureSkips(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	h.subscribeEvents("s1", "/orders/*", `"batch":{"max_wait_ms":0,"max_size":1},"retry":{"max_attempts":5,"client_errors":"fail","on_exhausted":"skip"}`)
	h.recv.queue(reply{status: http.StatusUnprocessableEntity})
	tail := h.push("/orders/1", numbered(1, 2)...)
	_, p1 := h.nextBatch()
	require.Equal(t, numbered(1, 1), eventStrings(p1))
	_, p2 := h.nextBatch()
	require.Equal(t, numbered(2, 2), eventStrings(p2), "the next batch goes at once")
	c := h.waitCursor(ordersID, tail)
	require.Len(t, c.Skipped, 1)
	require.Equal(t, 1, c.Skipped[0].Attempts)
	require.Equal(t, p1.Offset, c.Skipped[0].To)
}
