package webhooks

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The operator routes of the subscription API are in the route table
// (routes.go): each is the path of a pattern that matches the
// subscription's, its id, and one more query parameter naming the
// operation.

// Page sizes of the consumer listings.
const (
	defaultConsumerPage = 100
	maxConsumerPage     = 1000
)

// listConsumers answers &consumers, of the state &state= names if any.
func (e *Engine) listConsumers(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	q := r.URL.Query()
	return e.consumerPage(ctx, sub, ConsumerState(strings.ToUpper(q.Get("state"))), q)
}

// listDeadLetters answers &dead: the consumers in StateFailed.
func (e *Engine) listDeadLetters(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	return e.consumerPage(ctx, sub, StateFailed, r.URL.Query())
}

// getConsumer answers &consumer={cid}.
func (e *Engine) getConsumer(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	return e.showConsumer(ctx, sub, r.URL.Query().Get("consumer"))
}

// testRequest answers &test with a test delivery.
func (e *Engine) testRequest(ctx context.Context, _ *http.Request, sub *Subscription) (int, any, error) {
	res, err := e.SendTestDelivery(ctx, sub.ID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, res, nil
}

// consumerJSON is a consumer as the API shows it.
type consumerJSON struct {
	ConsumerID    string          `json:"consumer_id"`
	PrimaryStream string          `json:"primary_stream"`
	State         ConsumerState   `json:"state"`
	Epoch         int64           `json:"epoch"`
	DeliveryID    string          `json:"delivery_id,omitempty"`
	Streams       []streamJSON    `json:"streams"`
	Pending       bool            `json:"pending"`
	Attempt       int             `json:"attempt"`
	InFlight      bool            `json:"in_flight"`
	NextAttemptAt *time.Time      `json:"next_attempt_at"`
	Deadline      *time.Time      `json:"deadline"`
	Failures      int             `json:"failures"`
	FailingSince  *time.Time      `json:"failing_since"`
	LastError     string          `json:"last_error,omitempty"`
	UpdatedAt     time.Time       `json:"updated_at"`
	DeadLetter    *deadLetterJSON `json:"dead_letter,omitempty"`
	Skipped       []skippedJSON   `json:"skipped,omitempty"`
}

// skippedJSON is a skipped batch's dead-letter record (SkippedBatch).
type skippedJSON struct {
	DeliveryID   string     `json:"delivery_id"`
	FromOffset   string     `json:"from_offset"`
	ToOffset     string     `json:"to_offset"`
	Attempts     int        `json:"attempts"`
	Failures     int        `json:"failures"`
	FailingSince *time.Time `json:"failing_since"`
	LastError    string     `json:"last_error"`
	SkippedAt    time.Time  `json:"skipped_at"`
}

// streamJSON is a subscribed stream: its cursor and, if it exists, its
// tail.
type streamJSON struct {
	Path   string `json:"path"`
	Offset string `json:"offset"`
	Tail   string `json:"tail,omitempty"`
}

// deadLetterJSON says why a consumer became a dead letter.
type deadLetterJSON struct {
	Reason string `json:"reason"`
}

// consumerViews shows cs with their streams' tails, read from the source.
func (e *Engine) consumerViews(ctx context.Context, cs []*Consumer) ([]consumerJSON, error) {
	out := make([]consumerJSON, len(cs))
	for i, c := range cs {
		t, err := e.core.readTails(ctx, streamPaths(c))
		if err != nil {
			return nil, err
		}
		v := consumerJSON{
			ConsumerID: c.ID, PrimaryStream: c.PrimaryStream, State: c.State, Epoch: c.Epoch, DeliveryID: c.WakeID,
			Pending: len(pendingStreams(c, t)) > 0, Attempt: c.Attempt, InFlight: c.InFlight,
			Deadline: timeOrNil(c.Deadline), Failures: c.Failures, FailingSince: timeOrNil(c.FailingSince),
			LastError: c.LastError, UpdatedAt: c.UpdatedAt, Streams: make([]streamJSON, len(c.Streams)),
		}
		if c.State == stateDelivering && !c.InFlight {
			v.NextAttemptAt = v.Deadline
		}
		if c.State == StateFailed {
			v.DeadLetter = &deadLetterJSON{Reason: c.LastError}
		}
		for j, s := range c.Streams {
			v.Streams[j] = streamJSON{Path: s.Path, Offset: s.Offset, Tail: t[s.Path].Tail}
		}
		for _, s := range c.Skipped {
			v.Skipped = append(v.Skipped, skippedJSON{
				DeliveryID: s.DeliveryID, FromOffset: s.From, ToOffset: s.To, Attempts: s.Attempts, Failures: s.Failures,
				FailingSince: timeOrNil(s.FailingSince), LastError: s.LastError, SkippedAt: s.SkippedAt,
			})
		}
		out[i] = v
	}
	return out, nil
}

// ListConsumers returns a page of the consumers of subscription
// p.SubscriptionID, as Store.ListConsumers does; StateFailed lists its
// dead letters. A limit below 1 is a *ValidationError; another tenant's
// subscription than ctx's (WithTenant) is ErrSubscriptionNotFound.
func (e *Engine) ListConsumers(ctx context.Context, p *ListConsumersParams) ([]*Consumer, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if p.Limit < 1 {
		return nil, invalid("limit", "limit must be at least 1")
	}
	if err := e.inScope(ctx, p.SubscriptionID); err != nil {
		return nil, err
	}
	return e.store.ListConsumers(ctx, p)
}

func (e *Engine) consumerPage(ctx context.Context, sub *Subscription, state ConsumerState, q url.Values) (int, any, error) {
	switch state {
	case "", StateIdle, StateWaking, StateLive, StateFailed:
	default:
		return 0, nil, invalid("state", "unknown state %q; use IDLE, WAKING, LIVE or FAILED", q.Get("state"))
	}
	limit, err := pageLimit(q)
	if err != nil {
		return 0, nil, err
	}
	after, err := base64.RawURLEncoding.DecodeString(q.Get("cursor"))
	if err != nil {
		return 0, nil, invalid("cursor", "cursor is not one a listing returned")
	}
	page, err := e.ListConsumers(ctx, &ListConsumersParams{SubscriptionID: sub.ID, State: state, After: string(after), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	views, err := e.consumerViews(ctx, page)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]any{"consumers": views}
	if len(page) == limit {
		// Opaque and URL-safe, so that a client can paste it as it is.
		out["next_cursor"] = base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].ID))
	}
	return http.StatusOK, out, nil
}

// pageLimit reads &limit=, defaultConsumerPage if absent.
func pageLimit(q url.Values) (int, error) {
	if !q.Has("limit") {
		return defaultConsumerPage, nil
	}
	n, err := strconv.Atoi(q.Get("limit"))
	if err != nil || n < 1 || n > maxConsumerPage {
		return 0, invalid("limit", "limit must be 1 to %d", maxConsumerPage)
	}
	return n, nil
}

// consumerOf returns consumer id of sub, or ErrConsumerNotFound.
func (e *Engine) consumerOf(ctx context.Context, sub *Subscription, id string) (*Consumer, error) {
	notFound := detail(ErrConsumerNotFound, "subscription %s has no consumer %q", sub.ID, id)
	if subID, _, err := ParseConsumerID(id); err != nil || subID != sub.ID {
		return nil, notFound
	}
	c, err := e.store.GetConsumer(ctx, id)
	if errors.Is(err, ErrConsumerNotFound) {
		return nil, notFound
	}
	return c, err
}

// DeliveryLog returns up to limit of the latest delivery attempts of
// consumer id, newest first: none if the Store keeps no DeliveryLog.
// A consumer of another tenant's subscription than ctx's (WithTenant) is
// ErrConsumerNotFound.
func (e *Engine) DeliveryLog(ctx context.Context, id string, limit int) ([]*DeliveryAttempt, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.consumerInScope(ctx, id); err != nil {
		return nil, err
	}
	if e.outcomes.attemptLog.store == nil {
		return nil, nil
	}
	return e.outcomes.attemptLog.store.ListAttempts(ctx, id, limit)
}

// DSDeliveryLog returns up to limit of the latest delivery attempts of
// the reserved `__ds` subscription id, newest first: its webhook POSTs or
// its wake events' appends, kept under DSDeliveryLogKey(id). It returns
// none if the Store keeps no DeliveryLog, and ErrDSSubscriptionNotFound
// if there is no such subscription.
func (e *Engine) DSDeliveryLog(ctx context.Context, id string, limit int) ([]*DeliveryAttempt, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if !e.ds.enabled() {
		return nil, ErrDSSubscriptionNotFound
	}
	if _, err := e.ds.store.GetDSSubscription(ctx, id); err != nil {
		return nil, err
	}
	if e.outcomes.attemptLog.store == nil {
		return nil, nil
	}
	return e.outcomes.attemptLog.store.ListAttempts(ctx, DSDeliveryLogKey(id), limit)
}

// attemptJSON is a delivery attempt as the API shows it.
type attemptJSON struct {
	At           time.Time `json:"at"`
	DeliveryID   string    `json:"delivery_id"`
	Attempt      int       `json:"attempt"`
	StatusCode   int       `json:"status_code,omitempty"`
	LatencyMS    float64   `json:"latency_ms"`
	ErrorClass   string    `json:"error_class,omitempty"`
	Error        string    `json:"error,omitempty"`
	ResponseBody string    `json:"response_body,omitempty"`
}

func (e *Engine) listDeliveries(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	q := r.URL.Query()
	c, err := e.consumerOf(ctx, sub, q.Get("consumer"))
	if err != nil {
		return 0, nil, err
	}
	limit, err := pageLimit(q)
	if err != nil {
		return 0, nil, err
	}
	attempts, err := e.DeliveryLog(ctx, c.ID, limit)
	if err != nil {
		return 0, nil, err
	}
	out := make([]attemptJSON, len(attempts))
	for i, a := range attempts {
		out[i] = attemptJSON{At: a.At, DeliveryID: a.DeliveryID, Attempt: a.Attempt, StatusCode: a.StatusCode,
			LatencyMS: float64(a.Latency) / float64(time.Millisecond), ErrorClass: a.ErrorClass, Error: a.Error, ResponseBody: a.ResponseBody}
	}
	return http.StatusOK, map[string]any{"consumer_id": c.ID, "deliveries": out}, nil
}

// consumerRequest is the body of a revive request.
type consumerRequest struct {
	Consumer string `json:"consumer"`
}

func (e *Engine) reviveRequest(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	var req consumerRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	c, err := e.consumerOf(ctx, sub, req.Consumer)
	if err != nil {
		return 0, nil, err
	}
	if c.State != StateFailed {
		return 0, nil, detail(errNotDeadLetter, "consumer %s is %s, not a dead letter", c.ID, c.State)
	}
	if err := e.ResumeConsumer(ctx, c.ID); err != nil {
		return 0, nil, err
	}
	return e.showConsumer(ctx, sub, c.ID)
}

// showConsumer answers with consumer id of sub as stored now.
func (e *Engine) showConsumer(ctx context.Context, sub *Subscription, id string) (int, any, error) {
	c, err := e.consumerOf(ctx, sub, id)
	if err != nil {
		return 0, nil, err
	}
	views, err := e.consumerViews(ctx, []*Consumer{c})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, views[0], nil
}
