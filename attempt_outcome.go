package webhooks

import (
	"context"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// attemptEnded records what the attempt that c was sent for, of sub, came
// to, once the Store applied it: stored is the consumer as stored then, nil
// if it is gone. Every attempt comes here once: a failure from its POST's
// outcome or from its timeout, whichever the Store recorded first. The
// attempt goes in the delivery log and the subscription's health, which
// may trip its circuit breaker; a failure is logged and counted.
func (e *Engine) attemptEnded(ctx context.Context, c *Consumer, sub *Subscription, resp response, stored *Consumer) {
	at := resp.sentAt
	if at.IsZero() {
		at = e.clock.Now() // a timeout found by the scheduler
	}
	a := &DeliveryAttempt{
		ConsumerID: c.ID, At: at, DeliveryID: c.WakeID, Attempt: c.Attempt,
		StatusCode: resp.status, Latency: resp.latency, ResponseBody: resp.preview,
	}
	if f := resp.failure; f != nil {
		e.attemptFailed(ctx, c, f, stored)
		a.ErrorClass, a.Error = string(f.class), f.detail()
	} else {
		e.failures.succeeded(ctx, c, resp)
	}
	e.attemptLog.add(ctx, a)
	e.recordHealth(ctx, sub, resp.failure, at.Add(resp.latency))
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
