package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamhooks/webhooks/receiver"
)

// The webhook transport: a signed POST to a subscription's webhook URL,
// which carries wake-ups and event-push batches alike.

const (
	// MaxWebhookResponseBytes bounds how much of a webhook response body is
	// read. A longer body is not looked at for {"done": true}: the 2xx
	// alone counts.
	MaxWebhookResponseBytes = 64 << 10
)

// errRequestTimeout cancels a webhook POST that outlived the request timeout.
var errRequestTimeout = errors.New("webhook request timed out")

// webhookTransport POSTs messages to a subscription's webhook.
type webhookTransport struct{}

// send signs msg for sub and POSTs it: its body, or its batch's payload,
// with sub's custom headers beside the signed ones.
func (webhookTransport) send(ctx context.Context, x *executor, sub *Subscription, msg *message, received func()) (response, error) {
	body := msg.body
	if msg.batch != nil {
		body = eventsBody(&msg.batch.EventsPayload)
	}
	header, err := x.signedHeader(sub, msg.id, body, x.clock.Now())
	if err != nil {
		// It times out, and is retried, as a lost POST is.
		return response{}, &failedStep{"signing a delivery", err}
	}
	for k, v := range msg.headers {
		if header.Get(k) == "" {
			header.Set(k, v)
		}
	}
	return x.post(ctx, sub.Webhook, header, body, msg.timeout, received), nil
}

// lane is the webhook's host.
func (webhookTransport) lane(sub *Subscription) string { return laneKey(sub.Webhook) }

// validate checks the webhook URL, by the engine's policy too.
func (webhookTransport) validate(x *executor, sub *Subscription) error {
	if sub.Handler != "" {
		return invalid("handler", "a handler applies only to delivery %q", DeliveryHandler)
	}
	if len(sub.Webhook) > MaxWebhookURLLength {
		return invalid("webhook", "webhook URL is longer than %d characters", MaxWebhookURLLength)
	}
	if _, err := x.policy.CheckURL(sub.Webhook); err != nil {
		return invalid("webhook", "webhook URL rejected: %v", err)
	}
	return nil
}

func (webhookTransport) testable() error { return nil }

func (webhookTransport) offeredOverHTTP() bool { return true }

// signedHeader returns the headers of a POST of JSON body, delivery id,
// to sub's webhook, signed at now by its scheme. It fails only for a
// subscription whose secret or scheme is not one the engine made.
func (x *executor) signedHeader(sub *Subscription, id string, body []byte, now time.Time) (http.Header, error) {
	h := http.Header{
		"Content-Type": {"application/json"},
		"User-Agent":   {"streamhooks"},
	}
	if sub.Signature == SignatureEd25519 {
		x.keys.signEd25519(h, id, now, body)
		return h, nil
	}
	if err := signDelivery(h, sub, id, now, body); err != nil {
		return nil, err
	}
	return h, nil
}

// response is what one webhook POST came to.
type response struct {
	outcome string
	failure *deliveryFailure // nil for a 2xx
	status  int              // 0 if no response arrived
	// preview is the start of the response body, for the delivery log.
	preview string
	// ack is the offset a 2xx acknowledged up to, AckResponse's; empty
	// for the whole message.
	ack     string
	sentAt  time.Time
	latency time.Duration
}

// post sends one webhook POST of body with header to url, and classifies
// the outcome, and the failure if it is one. It calls accepted, if set, as
// soon as a 2xx status arrives, before reading the body. The timeout runs
// on the engine's clock; it cancels the request rather than setting a
// context deadline, which the dialer would read against the real clock.
func (x *executor) post(ctx context.Context, url string, header http.Header, body []byte, timeout time.Duration, accepted func()) (r response) {
	r.sentAt = x.clock.Now()
	defer func() { r.latency = x.clock.Since(r.sentAt) }()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := x.clock.AfterFunc(timeout, func() { cancel(errRequestTimeout) })
	defer timer.Stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		r.outcome, r.failure = outcomeError, transportFailure(err)
		return r
	}
	req.Header = header
	if x.propagator != nil {
		x.propagator.Inject(ctx, propagation.HeaderCarrier(header))
	}
	resp, err := x.client.Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			// A transport other than net/http's may not pass the cause on.
			r.outcome, r.failure = outcomeTimeout, transportFailure(errRequestTimeout)
			return r
		}
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("webhooks.error", err.Error()))
		r.outcome, r.failure = outcomeError, transportFailure(err)
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if f := statusFailure(resp.StatusCode); f != nil {
		f.retryAfter = retryAfter(resp, x.clock.Now())
		data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponsePreview))
		r.outcome, r.failure, r.preview = outcomeHTTPError, f, responsePreview(data)
		return r
	}
	receipt := x.receipt(resp, accepted)
	// Only a body read whole can finish the wake or acknowledge part of a
	// batch: a "done" or an "offset" in a body cut short or past the limit
	// may not be what the receiver meant, and acking on it could lose
	// events.
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookResponseBytes+1))
	r.preview = responsePreview(data)
	var d struct {
		receiver.DoneResponse
		receiver.AckResponse
	}
	r.outcome = outcomeOK
	if err == nil && len(data) <= MaxWebhookResponseBytes && json.Unmarshal(data, &d) == nil {
		r.ack = d.Offset
		if d.Done {
			r.outcome = outcomeDone
		}
	}
	receipt.bodyRead(r.outcome == outcomeDone)
	return r
}

// receiptGrace bounds how long a 2xx whose body is on its way goes
// unrecorded: the receipt waits for the body so that a {"done": true}
// records claim, acks and done in one Store write, and is recorded on its
// own if the body is slower.
const receiptGrace = time.Second

// receipt records the receipt of a 2xx (accepted) once: at once if the
// body may be held open, as a receiver that works before it answers does
// (spec 001, WAKING Timeout), and otherwise when the body has been read,
// and not at all if the body finishes the wake, whose write records it.
type receipt struct {
	accepted func()
	mu       sync.Mutex
	recorded bool
	guard    *clock.Timer
}

// receipt starts the receipt of resp, a 2xx. A body of a declared length
// within the limit is on its way: its receipt waits for it, at most
// receiptGrace and half the WAKING timeout, so that the consumer is LIVE
// well before the timeout.
func (x *executor) receipt(resp *http.Response, accepted func()) *receipt {
	rc := &receipt{accepted: accepted}
	switch {
	case accepted == nil:
		rc.recorded = true
	case resp.ContentLength < 0 || resp.ContentLength > MaxWebhookResponseBytes:
		rc.record()
	default:
		rc.guard = x.clock.AfterFunc(min(receiptGrace, x.cursors.wakingTimeout/2), rc.record)
		x.receiptDeferred()
	}
	return rc
}

// record records the receipt unless it has been. It holds mu while it
// does, so that bodyRead returns only once a receipt under way is stored.
func (rc *receipt) record() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.recorded {
		rc.recorded = true
		rc.accepted()
	}
}

// bodyRead records the receipt, now that the body has been read, unless
// the body finishes the wake.
func (rc *receipt) bodyRead(done bool) {
	if rc.guard != nil {
		rc.guard.Stop()
	}
	if done {
		rc.mu.Lock()
		rc.recorded = true
		rc.mu.Unlock()
		return
	}
	rc.record()
}
