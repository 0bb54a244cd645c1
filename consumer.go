package webhooks

import (
	"context"
	"errors"
	"slices"
	"time"
)

// cursorMachine holds the rules of the consumer state machine, the cursor
// core: cursors, epochs, attempts, deadlines and retries. Its methods are
// the transitions, and the only code that writes a Consumer's fields. Each
// changes a consumer in place inside Store.UpdateConsumer, so each is one
// atomic transition, and none does I/O. Stream tails are passed in as a map
// of the consumer's existing streams, read inside the same update so that
// an append racing with a transition to IDLE cannot be missed.
//
// What differs between delivery modes, the machine asks of the
// subscription's mechanism (mechanism.go), which picks among the
// transitions; so every transition that may start or end a delivery takes
// the subscription, never nil.
type cursorMachine struct {
	wakingTimeout   time.Duration
	livenessTimeout time.Duration
	requestTimeout  time.Duration
	failureGCAfter  time.Duration
	backoff         func(retry int) time.Duration
	maxRetryAfter   time.Duration
}

// stateDelivering is StateWaking as the core means it: a delivery, a wake
// cycle or an event-push batch, with an attempt in flight or awaiting its
// retry. Its wire name stays the spec's WAKING.
const stateDelivering = StateWaking

// tails maps a stream path to what the source said of it; missing paths have
// no stream.
type tails map[string]StreamInfo

// newConsumer returns the IDLE consumer that subscription sub spawns for the
// stream at path, positioned at offset.
func newConsumer(sub, path, offset string, now time.Time) *Consumer {
	return &Consumer{
		ID:             ConsumerID(sub, path),
		SubscriptionID: sub,
		PrimaryStream:  path,
		State:          StateIdle,
		Streams:        []StreamOffset{{Path: path, Offset: offset}},
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

// streamPaths lists the paths of c's subscribed streams.
func streamPaths(c *Consumer) []string {
	paths := make([]string, len(c.Streams))
	for i, s := range c.Streams {
		paths[i] = s.Path
	}
	return paths
}

// compareOffsets orders two offsets of one stream. OffsetNone sorts before
// every real offset; real offsets are fixed-width and compare as strings.
func compareOffsets(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == OffsetNone:
		return -1
	case b == OffsetNone:
		return 1
	case a < b:
		return -1
	default:
		return 1
	}
}

// hasPending reports whether a stream acked at offset has pending work:
// its tail is past offset. OffsetNone sorts before every tail, so an
// empty stream of which nothing is acked counts too; pendingStreams tells
// it apart for wake-ups.
func hasPending(offset string, s StreamInfo) bool {
	return compareOffsets(s.Tail, offset) > 0
}

// streamIndex returns the position of path in streams, or -1.
func streamIndex(streams []StreamOffset, path string) int {
	return slices.IndexFunc(streams, func(s StreamOffset) bool { return s.Path == path })
}

// pendingStreams lists the subscribed streams with pending work, which is
// events (spec 001, Pending Work): an empty stream of which nothing is
// acked has none. Only its creation wakes its consumer for it (RFC), so a
// consumer that says done without an ack is not woken again and again.
func pendingStreams(c *Consumer, t tails) []string {
	var out []string
	for _, s := range c.Streams {
		info, ok := t[s.Path]
		switch {
		case !ok:
		case s.Offset == OffsetNone && info.Empty:
			if owedCreationWake(c, s) {
				out = append(out, s.Path)
			}
		case hasPending(s.Offset, info):
			out = append(out, s.Path)
		}
	}
	return out
}

// owedCreationWake reports whether c, never woken and with nothing acked of
// its primary stream s, is owed the wake the RFC sends when a stream is
// created. Consumers adopted at the tails of existing streams are not
// (spec 001, Existing Streams).
func owedCreationWake(c *Consumer, s StreamOffset) bool {
	return c.Epoch == 0 && s.Path == c.PrimaryStream && s.Offset == OffsetNone
}

// change is what a transition did to a consumer, and so what the
// UpdateConsumer that ran it must do.
type change int

const (
	noChange     change = iota // nothing; another engine may have got there first
	changeSave                 // save the consumer
	changeSend                 // save it, then send the delivery attempt it started
	changeDelete               // delete it
)

// action is the Store's action for ch.
func (ch change) action() UpdateAction {
	switch ch {
	case changeSave, changeSend:
		return UpdateSave
	case changeDelete:
		return UpdateDelete
	default:
		return UpdateNone
	}
}

// finish ends a delivery: to IDLE, or straight into a new one if work is
// pending (L3; the same rule keeps L1 after a liveness timeout).
func (m *cursorMachine) finish(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	c.State = StateIdle
	c.InFlight = false
	c.Deadline = time.Time{}
	if ch := m.start(c, sub, t, now); ch != noChange {
		return ch
	}
	// Only a wake cycle reads these: an IDLE consumer, of which there may
	// be millions, does not keep them. WakeID stays, since callbacks and
	// late webhook outcomes of the ended cycle are told apart by it.
	c.WakeTails, c.TriggeredBy = nil, nil
	return changeSave
}

// goLive moves a WAKING consumer to LIVE and starts its liveness timeout.
// Both ways in, a 2xx and a claim, prove the notification arrived, so the
// failure run ends.
func (m *cursorMachine) goLive(c *Consumer, now time.Time) {
	c.State = StateLive
	c.InFlight = false
	deliveryOK(c)
	m.touch(c, now)
}

// touch restarts the liveness timeout of a LIVE consumer.
func (m *cursorMachine) touch(c *Consumer, now time.Time) {
	if c.State == StateLive {
		c.Deadline = now.Add(m.livenessTimeout)
	}
}

// deliveryOK clears the failure run: a 2xx breaks it.
func deliveryOK(c *Consumer) {
	c.Failures = 0
	c.FailingSince = time.Time{}
	c.LastError = ""
}

// begin starts a new delivery of c, of sub, under delivery id id: its
// epoch fences the outcomes and callbacks of every earlier one. It marks
// the first attempt as sent in the same transition, which the caller
// hands to the lanes once it is stored: a delivery costs no further write
// to start. The attempt's timeout runs from now, so if the process dies
// between the commit and the send, the attempt times out and is retried
// like a lost POST; and, marked before it is sent, it is sent by the one
// engine whose transition started it.
func (m *cursorMachine) begin(c *Consumer, sub *Subscription, mech mechanism, id string, now time.Time) change {
	c.State = stateDelivering
	c.Epoch++
	c.WakeID = id
	c.Attempt = 0
	m.startAttempt(c, sub, mech, now)
	return changeSend
}

// startAttempt marks a delivery attempt of a delivering consumer of sub,
// delivered by mech, as sent: the first, when the delivery begins, or a
// retry that has come due. It moves the deadline on to the attempt's
// timeout, so that of several engines sharing a Store only the first finds
// the attempt due.
func (m *cursorMachine) startAttempt(c *Consumer, sub *Subscription, mech mechanism, now time.Time) {
	c.Attempt++
	c.InFlight = true
	c.Deadline = m.ageCap(c, m.retryPolicyOf(sub, mech), now.Add(mech.attemptTimeout(m, sub)))
}

// failAttempt fails c's attempt in flight with r's failure if r is that
// attempt's outcome: a failure counts only for the attempt in flight.
func (m *cursorMachine) failAttempt(c *Consumer, sub *Subscription, r attemptResult, now time.Time) change {
	if c.State != stateDelivering || !c.InFlight || c.Attempt != r.attempt {
		return noChange
	}
	if r.next != "" {
		c.BatchEnd = r.next
	}
	return m.fail(c, sub, r.failure, now)
}

// deferAttempt puts back c's attempt in flight, the one that sent was
// marked as sent for, to be sent at until, its turn under a rate limit:
// the attempt is not counted, and c waits as for a retry, never past when
// a failing consumer gives up.
func (m *cursorMachine) deferAttempt(c, sent *Consumer, sub *Subscription, until time.Time) change {
	if c.State != stateDelivering || !c.InFlight || c.Epoch != sent.Epoch || c.WakeID != sent.WakeID || c.Attempt != sent.Attempt {
		return noChange
	}
	c.InFlight = false
	c.Attempt--
	c.Deadline = m.ageCap(c, m.retryPolicy(sub), until)
	return changeSave
}

// fail records failed attempt f of a consumer of sub and schedules the
// retry, after the wait its subscription's retry policy gives, or longer
// if the webhook asked for it with Retry-After. A consumer that has failed
// for as long, or as many times, as the policy allows, or permanently,
// gives up instead.
func (m *cursorMachine) fail(c *Consumer, sub *Subscription, f *deliveryFailure, now time.Time) change {
	c.InFlight = false
	c.Failures++
	c.LastError = f.reason()
	if c.FailingSince.IsZero() {
		c.FailingSince = now
	}
	p := m.retryPolicy(sub)
	if p.permanent(f) || p.MaxAttempts > 0 && c.Attempt >= p.MaxAttempts || m.tooOld(c, p, now) {
		return m.giveUp(c, sub, p, now)
	}
	wait := m.retryWait(p, c.Failures)
	if f.retryAfter > 0 {
		wait = max(wait, min(f.retryAfter, m.maxRetryAfter))
	}
	c.Deadline = m.ageCap(c, p, now.Add(wait))
	return changeSave
}

// giveUp ends delivering consumer c's delivery, which failed as often, as
// long or as permanently as p allows: its mechanism skips it if p says so
// and it can, and c becomes a dead letter otherwise.
func (m *cursorMachine) giveUp(c *Consumer, sub *Subscription, p RetryPolicy, now time.Time) change {
	if p.skips() {
		if ch := mechanismOf(sub).skip(m, c, now); ch != noChange {
			return ch
		}
	}
	return m.deadLetter(c)
}

// deadLetter stops c in StateFailed, its cursor where it is.
func (m *cursorMachine) deadLetter(c *Consumer) change {
	c.State = StateFailed
	c.InFlight = false
	c.Deadline = time.Time{}
	return changeSave
}

// retryPolicy is sub's retry policy, or its mechanism's default.
func (m *cursorMachine) retryPolicy(sub *Subscription) RetryPolicy {
	return m.retryPolicyOf(sub, mechanismOf(sub))
}

// retryPolicyOf is sub's retry policy, or the default of mech, its
// mechanism, which the caller has at hand.
func (m *cursorMachine) retryPolicyOf(sub *Subscription, mech mechanism) RetryPolicy {
	if sub.Retry != nil {
		return *sub.Retry
	}
	return mech.defaultRetry(m)
}

// retryWait is the wait before retry number failures under p.
func (m *cursorMachine) retryWait(p RetryPolicy, failures int) time.Duration {
	if n := len(p.Schedule); n > 0 {
		return p.Schedule[min(failures, n)-1]
	}
	return m.backoff(failures)
}

// ageCap brings t forward to when failing consumer c gives up under p, if
// that is sooner.
func (m *cursorMachine) ageCap(c *Consumer, p RetryPolicy, t time.Time) time.Time {
	if c.FailingSince.IsZero() || p.MaxAge <= 0 {
		return t
	}
	if end := c.FailingSince.Add(p.MaxAge); end.Before(t) {
		return end
	}
	return t
}

// tooOld reports whether c has been failing for as long as p allows.
func (m *cursorMachine) tooOld(c *Consumer, p RetryPolicy, now time.Time) bool {
	return p.MaxAge > 0 && !c.FailingSince.IsZero() && !now.Before(c.FailingSince.Add(p.MaxAge))
}

// onDue handles a passed deadline of a consumer of sub: starts the next
// attempt, times out a WAKING attempt (a failure) or a LIVE consumer,
// collects the consumer, or starts an IDLE one's delivery that its
// mechanism scheduled. A deadline not yet passed is another engine's
// doing: it got there first.
func (m *cursorMachine) onDue(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if c.Deadline.IsZero() || c.Deadline.After(now) {
		return noChange
	}
	switch c.State {
	case stateDelivering:
		mech := mechanismOf(sub)
		if p := m.retryPolicyOf(sub, mech); m.tooOld(c, p, now) {
			return m.giveUp(c, sub, p, now)
		}
		if c.InFlight {
			return m.fail(c, sub, transportFailure(errAttemptTimeout), now)
		}
		if !sub.active() {
			// The retry waits, with no deadline, for the subscription
			// to be enabled.
			break
		}
		m.startAttempt(c, sub, mech, now)
		return changeSend
	case StateLive:
		return m.finish(c, sub, t, now)
	case StateIdle:
		if ch := m.start(c, sub, t, now); ch != noChange {
			return ch
		}
	}
	// Clear a deadline nothing is scheduled at rather than spin on it.
	c.Deadline = time.Time{}
	return changeSave
}

// start is the transition of IDLE consumer c of sub: its subscription's
// mechanism starts delivering pending work, unless the subscription is
// disabled.
func (m *cursorMachine) start(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if !sub.active() {
		return noChange
	}
	return mechanismOf(sub).start(m, c, sub, t, now)
}

// deadLetterMsg is logged when a consumer's deliveries have failed for as
// long, or as often, as its retry policy allows.
const deadLetterMsg = "webhooks: consumer is a dead letter; its cursor is kept until it is revived"

// ResumeConsumer revives consumer id from the dead letter (StateFailed)
// at its cursor: an events consumer retries its batch, as a new run of
// attempts under the same delivery id, and a wake consumer starts a new
// wake cycle if it has pending work. Of a paused or disabled subscription,
// the consumer waits to be resumed with it. It does nothing to a consumer
// in another state, and returns ErrConsumerNotFound if there is no such
// consumer.
func (e *Engine) ResumeConsumer(ctx context.Context, id string) error {
	if err := e.checkLoaded(); err != nil {
		return err
	}
	subID, _, err := ParseConsumerID(id)
	if err != nil {
		return ErrConsumerNotFound
	}
	sub, err := e.subscription(ctx, subID)
	if errors.Is(err, ErrSubscriptionNotFound) {
		return ErrConsumerNotFound
	}
	if err != nil {
		return err
	}
	e.tel.operated(ctx, "revive")
	_, err = e.core.update(ctx, id, func(c *Consumer) (change, error) {
		if c.State != StateFailed {
			return noChange, nil
		}
		t, err := e.core.readTails(ctx, streamPaths(c))
		if err != nil {
			return noChange, err
		}
		return e.core.rules.revive(c, sub, t, e.clock.Now()), nil
	})
	return err
}

// revive brings dead letter c of sub back at its cursor, its failures
// forgotten, as its mechanism says.
func (m *cursorMachine) revive(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	c.Failures, c.FailingSince, c.LastError = 0, time.Time{}, ""
	return mechanismOf(sub).revive(m, c, sub, t, now)
}

// restart starts c afresh from its cursor, its attempts forgotten: IDLE,
// or a new delivery if work is pending.
func (m *cursorMachine) restart(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	c.Attempt = 0
	return m.finish(c, sub, t, now)
}

// removeStream takes the stream at path out of c, and c with it if it was
// c's primary stream or last one. If before is set it leaves c alone if c
// was created after it.
func (m *cursorMachine) removeStream(c *Consumer, path string, before time.Time) change {
	if !before.IsZero() && c.CreatedAt.After(before) {
		return noChange
	}
	if c.PrimaryStream == path {
		return changeDelete
	}
	n := len(c.Streams)
	c.Streams = slices.DeleteFunc(c.Streams, func(s StreamOffset) bool { return s.Path == path })
	switch {
	case len(c.Streams) == 0:
		return changeDelete
	case len(c.Streams) < n:
		return changeSave
	default:
		return noChange
	}
}
