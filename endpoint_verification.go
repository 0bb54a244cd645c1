package webhooks

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// Endpoint verification (seed 002, section 3.3). A subscription created
// pending delivers nothing until its endpoint proves that it wants the
// deliveries: the engine POSTs it a signed challenge, and activates the
// subscription once the endpoint answers 2xx with the challenge echoed,
// {"challenge": "<the challenge>"}. An operator may verify it by hand
// instead (Engine.VerifySubscription). Events that arrive meanwhile wait
// at the consumers' cursors, as a paused subscription's do.
//
// The first challenge goes out at once; a failed one is tried again after
// each wait of ChallengeRetrySchedule, until VerificationExpiry after the
// verification began. Then the subscription stays pending, sending
// nothing, until an operator verifies it, restarts its verification
// (Engine.RestartVerification), or deletes it. Engines that share a Store
// send one challenge at a time: each claims the attempt in the stored
// subscription before it sends.

// Verification is the progress of a pending subscription's challenge.
type Verification struct {
	// Attempts counts the challenges sent since the verification began.
	Attempts int
	// NextAttemptAt is when the next challenge is due, or the end of the
	// claim of the one in flight; zero once the verification expired.
	NextAttemptAt time.Time
	// ExpiresAt is when the engine stops sending challenges.
	ExpiresAt time.Time
	// LastError says why the last challenge failed.
	LastError string
}

const (
	// VerificationExpiry is how long the engine sends challenges to a
	// pending subscription's endpoint.
	VerificationExpiry = 24 * time.Hour
	// challengeTick is how often an engine looks for challenges due.
	challengeTick = time.Minute
)

// ChallengeRetrySchedule is the wait before each retry of a failed
// challenge, the last one for every retry past the list.
var ChallengeRetrySchedule = []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, time.Hour}

// Errors of the verification methods, which the subscription API answers
// 409 INVALID_REQUEST.
var (
	// ErrPendingVerification refuses to pause or resume a subscription
	// whose endpoint is not verified yet.
	ErrPendingVerification = errors.New("webhooks: subscription is pending verification")
	// ErrNotPending refuses to verify a subscription that is not pending.
	ErrNotPending = errors.New("webhooks: subscription is not pending verification")
)

// errNotDue stops a claim of a challenge that is not due, or not this
// engine's to send.
var errNotDue = errors.New("webhooks: challenge not due")

// newVerification is the verification of a subscription that starts
// pending at now: its first challenge is due at once.
func newVerification(now time.Time) *Verification {
	return &Verification{NextAttemptAt: now, ExpiresAt: now.Add(VerificationExpiry)}
}

// challengeRetry is the wait after failed attempt n (from 1).
func challengeRetry(n int) time.Duration {
	return ChallengeRetrySchedule[min(n, len(ChallengeRetrySchedule))-1]
}

// VerifySubscription verifies pending subscription id by hand, as an
// operator who knows its endpoint does: it becomes active and delivers
// the events that waited. It returns the subscription as stored,
// ErrSubscriptionNotFound, also for another tenant's than ctx's
// (WithTenant), or an error wrapping ErrNotPending.
func (e *Engine) VerifySubscription(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.inScope(ctx, id); err != nil {
		return nil, err
	}
	sub, err := e.activate(ctx, id)
	if err != nil {
		return nil, err
	}
	e.tel.operated(ctx, "verify")
	return sub, nil
}

// RestartVerification starts the verification of pending subscription id
// again, expired or not: a challenge is sent at once, and retried for
// VerificationExpiry. It returns the subscription as stored,
// ErrSubscriptionNotFound, also for another tenant's than ctx's
// (WithTenant), or an error wrapping ErrNotPending.
func (e *Engine) RestartVerification(ctx context.Context, id string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := e.inScope(ctx, id); err != nil {
		return nil, err
	}
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		if s.status() != StatusPending {
			return detail(ErrNotPending, "subscription %s is %s, not pending verification", id, s.status())
		}
		s.Verification = newVerification(e.clock.Now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.subs.update(sub)
	e.tel.operated(ctx, "challenge")
	e.verifier.kickNow()
	return sub, nil
}

// activate makes pending subscription id active and starts its consumers'
// pending work, as a resume does.
func (e *Engine) activate(ctx context.Context, id string) (*Subscription, error) {
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		if s.status() != StatusPending {
			return detail(ErrNotPending, "subscription %s is %s, not pending verification", id, s.status())
		}
		s.Status, s.Verification, s.UpdatedAt = StatusActive, nil, e.clock.Now()
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.subs.update(sub)
	return sub, e.resumeConsumers(ctx, sub)
}

// challengeDue sends each challenge that is due, one at a time.
func (e *Engine) challengeDue(ctx context.Context) {
	now := e.clock.Now()
	for _, sub := range e.subs.pending() {
		if v := sub.Verification; v == nil || v.NextAttemptAt.IsZero() || v.NextAttemptAt.After(now) {
			continue
		}
		if err := e.challenge(ctx, sub.ID); err != nil && ctx.Err() == nil && !errors.Is(err, ErrSubscriptionNotFound) {
			e.log.ErrorContext(ctx, "webhooks: sending a verification challenge", "subscription_id", sub.ID, "error", err)
		}
	}
}

// challenge claims the due challenge of subscription id in the Store,
// sends it, and stores what came of it: the subscription is activated, or
// the next challenge is scheduled, or the verification expires. A claim
// holds the attempt for its timeout and a tick, so that another engine
// sends it only if this one fails to finish it.
func (e *Engine) challenge(ctx context.Context, id string) error {
	now := e.clock.Now()
	attempt := 0
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		v := s.Verification
		if s.status() != StatusPending || v == nil || v.NextAttemptAt.IsZero() || v.NextAttemptAt.After(now) {
			return errNotDue
		}
		if !now.Before(v.ExpiresAt) {
			v.NextAttemptAt = time.Time{}
			return nil
		}
		v.Attempts++
		attempt = v.Attempts
		v.NextAttemptAt = now.Add(mechanismOf(s).requestTimeout(&e.core.rules, s) + challengeTick)
		return nil
	})
	if errors.Is(err, errNotDue) {
		return nil
	}
	if err != nil {
		return err
	}
	e.subs.update(sub)
	if attempt == 0 {
		return nil // expired
	}
	failure := e.sendChallenge(ctx, sub)
	if failure == "" {
		_, err := e.activate(ctx, id)
		if errors.Is(err, ErrNotPending) {
			return nil // an operator verified it meanwhile
		}
		if err == nil {
			e.log.InfoContext(ctx, "webhooks: subscription verified; it delivers from its cursors", "subscription_id", id)
		}
		return err
	}
	done := e.clock.Now()
	sub, err = e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		v := s.Verification
		if s.status() != StatusPending || v == nil || v.Attempts != attempt {
			return errNotDue // verified or restarted meanwhile
		}
		v.LastError = failure
		if next := done.Add(challengeRetry(attempt)); next.Before(v.ExpiresAt) {
			v.NextAttemptAt = next
		} else {
			v.NextAttemptAt = time.Time{}
		}
		return nil
	})
	if errors.Is(err, errNotDue) {
		return nil
	}
	if err != nil {
		return err
	}
	e.subs.update(sub)
	return nil
}

// challengeEvent is the body of a challenge.
type challengeEvent struct {
	Type           string    `json:"type"`
	SubscriptionID string    `json:"subscription_id"`
	DeliveryID     string    `json:"delivery_id"`
	Challenge      string    `json:"challenge"`
	SentAt         time.Time `json:"sent_at"`
}

// sendChallenge POSTs a new challenge to sub's webhook, signed as its
// deliveries are and through the same egress policy, and returns why it
// failed, or "" if the endpoint echoed it.
func (e *Engine) sendChallenge(ctx context.Context, sub *Subscription) string {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	ev := challengeEvent{Type: receiver.ChallengeType, SubscriptionID: sub.ID, DeliveryID: newDeliveryID(),
		Challenge: "verify_" + hex.EncodeToString(token), SentAt: e.clock.Now().UTC()}
	body, err := json.Marshal(ev)
	if err != nil {
		return "internal error"
	}
	mech := mechanismOf(sub)
	headers := map[string]string{receiver.ChallengeHeader: ev.Challenge}
	if sub.Events != nil {
		for k, v := range sub.Events.Headers {
			headers[k] = v
		}
	}
	msg := &message{id: ev.DeliveryID, body: body, headers: headers, timeout: mech.requestTimeout(&e.core.rules, sub)}
	resp, err := mech.transport().send(ctx, e.x, sub, msg, nil)
	if err != nil {
		e.log.ErrorContext(ctx, "webhooks: sending a verification challenge", "subscription_id", sub.ID, "error", err)
		return "internal error"
	}
	if f := resp.failure; f != nil {
		return f.reason()
	}
	var answer receiver.ChallengeResponse
	if json.Unmarshal([]byte(resp.preview), &answer) != nil ||
		subtle.ConstantTimeCompare([]byte(answer.Challenge), []byte(ev.Challenge)) != 1 {
		return `the endpoint answered 2xx without echoing the challenge as {"challenge": "..."}`
	}
	return ""
}

// verifyRequest verifies a pending subscription by hand.
func (e *Engine) verifyRequest(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	if err := readOptionalRequest(r.Body, &struct{}{}); err != nil {
		return 0, nil, err
	}
	sub, err := e.VerifySubscription(ctx, sub.ID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, e.view(sub), nil
}

// challengeRequest restarts a pending subscription's verification.
func (e *Engine) challengeRequest(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	if err := readOptionalRequest(r.Body, &struct{}{}); err != nil {
		return 0, nil, err
	}
	sub, err := e.RestartVerification(ctx, sub.ID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, e.view(sub), nil
}

// verificationJSON is a pending subscription's verification as the API
// shows it.
type verificationJSON struct {
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	ExpiresAt     time.Time  `json:"expires_at"`
	Expired       bool       `json:"expired"`
	LastError     string     `json:"last_error,omitempty"`
}

// verificationView is v as the API shows it, or nil.
func verificationView(v *Verification) *verificationJSON {
	if v == nil {
		return nil
	}
	out := &verificationJSON{Attempts: v.Attempts, ExpiresAt: v.ExpiresAt.UTC(), Expired: v.NextAttemptAt.IsZero(), LastError: v.LastError}
	if !v.NextAttemptAt.IsZero() {
		next := v.NextAttemptAt.UTC()
		out.NextAttemptAt = &next
	}
	return out
}
