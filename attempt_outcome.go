package webhooks

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// outcomes is the engine's part that reports what attempts came to: the
// delivery log, the subscriptions' health and circuit breaker, and the
// failure log. Between Start and Stop its writer puts the delivery log in
// the Store.
type outcomes struct {
	startstop.Base
	store   Store
	clock   clock.Clock
	log     *slog.Logger
	tel     *telemetry
	breaker breakerConfig
	// updated puts a subscription the breaker disabled in the engine's
	// set; disabledHook tells the host (WithSubscriptionDisabledHook).
	updated      func(sub *Subscription)
	disabledHook func(context.Context, SubscriptionDisabled)

	attemptLog *attemptLog
	failures   *failureLog
	// successes spares the health a write at every successful delivery.
	successes successes
}

// Start starts the delivery log's writer, in ctx, until Stop.
func (o *outcomes) Start(ctx context.Context) {
	ctx, ok, stopped := o.StartInit(ctx)
	if !ok {
		return
	}
	go func() {
		defer stopped()
		o.attemptLog.run(ctx, o.log)
	}()
}

// attemptEnded records what the attempt that c was sent for, of sub, came
// to, once the Store applied it: stored is the consumer as stored then, nil
// if it is gone. Every attempt comes here once: a failure from its POST's
// outcome or from its timeout, whichever the Store recorded first. The
// attempt goes in the delivery log and the subscription's health, which
// may trip its circuit breaker; a failure is logged and counted.
func (o *outcomes) attemptEnded(ctx context.Context, c *Consumer, sub *Subscription, resp response, stored *Consumer) {
	at := o.logAttempt(ctx, c, resp, stored)
	o.recordHealth(ctx, sub, resp.failure, at.Add(resp.latency))
}

// logAttempt puts the attempt that c was sent for in the delivery log,
// logs and counts it if it failed, and returns when it was made. A `__ds`
// attempt comes here alone: its subscription has no health or breaker.
func (o *outcomes) logAttempt(ctx context.Context, c *Consumer, resp response, stored *Consumer) time.Time {
	at := resp.sentAt
	if at.IsZero() {
		at = o.clock.Now() // a timeout found by the scheduler
	}
	a := &DeliveryAttempt{
		ConsumerID: c.ID, At: at, DeliveryID: c.WakeID, Attempt: c.Attempt,
		StatusCode: resp.status, Latency: resp.latency, ResponseBody: resp.preview,
	}
	if f := resp.failure; f != nil {
		o.tel.attemptFailed(ctx, f.class)
		o.failures.failed(ctx, c, f, stored)
		a.ErrorClass, a.Error = string(f.class), f.detail()
	} else {
		o.failures.succeeded(ctx, c, resp)
	}
	o.attemptLog.add(ctx, a)
	return at
}

// retryAfter is how long a 429 or 503 response asks the client to wait,
// by its Retry-After header in seconds or as an HTTP date; zero if it does
// not say, or for another status.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// responsePreview is the start of a response body as the delivery log
// keeps it: at most MaxResponsePreview bytes, cut at a character boundary.
func responsePreview(body []byte) string {
	if len(body) <= MaxResponsePreview {
		return string(body)
	}
	cut := MaxResponsePreview
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut])
}
