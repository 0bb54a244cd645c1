package webhooks

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// machine holds the rules of the consumer state machine. Its methods change
// a consumer in place and run inside Store.UpdateConsumer, so each is one
// atomic transition; none does I/O. Stream tails are passed in as a map of
// the consumer's existing streams, read inside the same update so that an
// append racing with a transition to IDLE cannot be missed.
//
// Transitions that depend on the subscription's delivery mode take the
// subscription; nil stands for a wake one.
type machine struct {
	wakingTimeout   time.Duration
	livenessTimeout time.Duration
	requestTimeout  time.Duration
	failureGCAfter  time.Duration
	backoff         func(retry int) time.Duration
	maxRetryAfter   time.Duration
}

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

// readTails asks the source about each path once. Paths with no stream are
// left out. Any other failure of the source is marked ErrStoreUnavailable:
// the read may succeed later, so the engine retries what needed it, and its
// APIs answer 503, not 500.
func (e *Engine) readTails(ctx context.Context, paths []string) (tails, error) {
	t := make(tails, len(paths))
	for _, p := range paths {
		if _, seen := t[p]; seen {
			continue
		}
		info, err := e.source.Stream(ctx, p)
		if errors.Is(err, ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w: %w", p, ErrStoreUnavailable, err)
		}
		t[p] = info
	}
	return t, nil
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

func newWakeID() string {
	id := uuid.New()
	return "w_" + hex.EncodeToString(id[:])
}

// wake starts a new wake cycle: IDLE → WAKING (or LIVE → WAKING on done with
// pending work), and marks its first attempt as sent in the same transition,
// which the caller hands to the lanes once it is stored: a wake costs no
// further write to start its POST. The WAKING timeout runs from now, so if
// the process dies between the commit and the POST, the attempt times out
// and is retried like a lost POST; and, marked before any POST, it is sent
// by the one engine whose transition woke the consumer.
func (m *machine) wake(c *Consumer, t tails, triggeredBy []string, now time.Time) {
	c.State = StateWaking
	c.Epoch++
	c.WakeID = newWakeID()
	c.TriggeredBy = triggeredBy
	c.WakeTails = c.WakeTails[:0]
	for _, s := range c.Streams {
		if info, ok := t[s.Path]; ok {
			c.WakeTails = append(c.WakeTails, StreamOffset{Path: s.Path, Offset: info.Tail})
		}
	}
	c.Attempt = 0
	m.startAttempt(c, nil, now)
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

// wakeIfPending wakes an IDLE consumer that has pending work.
func (m *machine) wakeIfPending(c *Consumer, t tails, now time.Time) change {
	if c.State != StateIdle {
		return noChange
	}
	pending := pendingStreams(c, t)
	if len(pending) == 0 {
		return noChange
	}
	m.wake(c, t, pending, now)
	return changeSend
}

// finish ends a wake cycle: to IDLE, or straight into a new wake if work is
// pending (L3; the same rule keeps L1 after a liveness timeout).
func (m *machine) finish(c *Consumer, sub *Subscription, t tails, now time.Time) change {
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
func (m *machine) goLive(c *Consumer, now time.Time) {
	c.State = StateLive
	c.InFlight = false
	deliveryOK(c)
	m.touch(c, now)
}

// touch restarts the liveness timeout of a LIVE consumer.
func (m *machine) touch(c *Consumer, now time.Time) {
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

// startAttempt marks a delivery attempt of a WAKING consumer of sub as
// sent: the first, when the wake or batch starts, or a retry that has come
// due. It moves the deadline on to the attempt's timeout, so that of
// several engines sharing a Store only the first finds the attempt due.
func (m *machine) startAttempt(c *Consumer, sub *Subscription, now time.Time) {
	c.Attempt++
	c.InFlight = true
	c.Deadline = m.ageCap(c, m.retryPolicy(sub), now.Add(m.attemptTimeout(sub)))
}

// attemptTimeout is how long an attempt for sub may stay in flight before
// it counts as failed: the WAKING timeout, or for event push the POST's
// own timeout and a grace, so that an engine that is alive always ends its
// POST before another may send the batch again.
func (m *machine) attemptTimeout(sub *Subscription) time.Duration {
	if !sub.pushes() {
		return m.wakingTimeout
	}
	return m.pushTimeout(sub) + pushTimeoutGrace
}

// deliveryResult is the outcome of one wake-up POST.
type deliveryResult struct {
	epoch   int64
	wakeID  string
	attempt int
	ok      bool             // 2xx
	done    bool             // 2xx with {"done": true}
	failure *deliveryFailure // why it failed, if it did
}

// applyDelivery applies a wake-up outcome. A response from a wake cycle
// that has ended changes nothing.
func (m *machine) applyDelivery(c *Consumer, sub *Subscription, r deliveryResult, t tails, now time.Time) change {
	if c.Epoch != r.epoch || c.WakeID != r.wakeID {
		return noChange
	}
	switch {
	case r.ok && r.done:
		if c.State == StateIdle {
			return noChange
		}
		deliveryOK(c)
		m.autoAck(c)
		return m.finish(c, sub, t, now)
	case r.ok:
		// LIVE and IDLE consumers have no failure run to end: goLive
		// ended it.
		if c.State != StateWaking {
			return noChange
		}
		m.goLive(c, now)
		return changeSave
	default:
		if c.State != StateWaking || !c.InFlight || c.Attempt != r.attempt {
			return noChange
		}
		return m.fail(c, sub, r.failure, now)
	}
}

// autoAck acks every stream up to its tail when the wake began: the
// synchronous-done shortcut, which cannot have seen anything newer.
func (m *machine) autoAck(c *Consumer) {
	for _, wt := range c.WakeTails {
		i := streamIndex(c.Streams, wt.Path)
		if i >= 0 && compareOffsets(wt.Offset, c.Streams[i].Offset) > 0 {
			c.Streams[i].Offset = wt.Offset
		}
	}
}

// fail records failed attempt f of a consumer of sub and schedules the
// retry, after the wait its subscription's retry policy gives, or longer
// if the webhook asked for it with Retry-After. A consumer that has failed
// for as long, or as many times, as the policy allows becomes a dead
// letter instead.
func (m *machine) fail(c *Consumer, sub *Subscription, f *deliveryFailure, now time.Time) change {
	c.InFlight = false
	c.Failures++
	c.LastError = f.reason()
	if c.FailingSince.IsZero() {
		c.FailingSince = now
	}
	p := m.retryPolicy(sub)
	if p.MaxAttempts > 0 && c.Attempt >= p.MaxAttempts || m.tooOld(c, p, now) {
		return m.deadLetter(c)
	}
	wait := m.retryWait(p, c.Failures)
	if f.retryAfter > 0 {
		wait = max(wait, min(f.retryAfter, m.maxRetryAfter))
	}
	c.Deadline = m.ageCap(c, p, now.Add(wait))
	return changeSave
}

// deadLetter stops c in StateFailed, its cursor where it is.
func (m *machine) deadLetter(c *Consumer) change {
	c.State = StateFailed
	c.InFlight = false
	c.Deadline = time.Time{}
	return changeSave
}

// retryPolicy is sub's retry policy, or its mode's default: event push
// gives up on a batch after DefaultMaxAttempts, and a wake-up after the
// failure GC period (spec 001's three days).
func (m *machine) retryPolicy(sub *Subscription) RetryPolicy {
	switch {
	case sub != nil && sub.Retry != nil:
		return *sub.Retry
	case sub.pushes():
		return RetryPolicy{MaxAttempts: DefaultMaxAttempts}
	default:
		return RetryPolicy{MaxAge: m.failureGCAfter}
	}
}

// retryWait is the wait before retry number failures under p.
func (m *machine) retryWait(p RetryPolicy, failures int) time.Duration {
	if n := len(p.Schedule); n > 0 {
		return p.Schedule[min(failures, n)-1]
	}
	return m.backoff(failures)
}

// ageCap brings t forward to when failing consumer c gives up under p, if
// that is sooner.
func (m *machine) ageCap(c *Consumer, p RetryPolicy, t time.Time) time.Time {
	if c.FailingSince.IsZero() || p.MaxAge <= 0 {
		return t
	}
	if end := c.FailingSince.Add(p.MaxAge); end.Before(t) {
		return end
	}
	return t
}

// tooOld reports whether c has been failing for as long as p allows.
func (m *machine) tooOld(c *Consumer, p RetryPolicy, now time.Time) bool {
	return p.MaxAge > 0 && !c.FailingSince.IsZero() && !now.Before(c.FailingSince.Add(p.MaxAge))
}

// onDue handles a passed deadline of a consumer of sub: starts the next
// attempt, times out a WAKING attempt (a failure) or a LIVE consumer,
// collects the consumer, or starts an IDLE one's delivery that its
// mechanism scheduled. A deadline not yet passed is another engine's
// doing: it got there first.
func (m *machine) onDue(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if c.Deadline.IsZero() || c.Deadline.After(now) {
		return noChange
	}
	switch c.State {
	case StateWaking:
		if m.tooOld(c, m.retryPolicy(sub), now) {
			return m.deadLetter(c)
		}
		if c.InFlight {
			return m.fail(c, sub, transportFailure(errAttemptTimeout), now)
		}
		if !sub.active() {
			// The retry waits, with no deadline, for the subscription
			// to be enabled.
			break
		}
		m.startAttempt(c, sub, now)
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
func (m *machine) start(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	if !sub.active() {
		return noChange
	}
	return mechanismOf(sub).start(m, c, sub, t, now)
}

// update runs one atomic transition of a consumer through the Store,
// stamping UpdatedAt, counting wakes, sending the delivery attempt the
// transition started, and waking the scheduler when the consumer has a
// deadline.
func (e *Engine) update(ctx context.Context, id string, fn func(c *Consumer) (change, error)) (*Consumer, error) {
	var (
		before    int64
		wasFailed bool
		ch        change
	)
	c, err := e.store.UpdateConsumer(ctx, id, func(c *Consumer) (UpdateAction, error) {
		before, wasFailed = c.Epoch, c.State == StateFailed
		var err error
		ch, err = fn(c)
		action := ch.action()
		if action == UpdateSave {
			c.UpdatedAt = e.clock.Now()
		}
		return action, err
	})
	e.progressed.Send()
	if err != nil || c == nil {
		return c, err
	}
	if c.Epoch > before {
		e.tel.started(ctx, c)
	}
	if c.State == StateFailed && !wasFailed {
		e.log.InfoContext(ctx, deadLetterMsg,
			"consumer_id", c.ID, "attempts", c.Attempt, "failing_since", c.FailingSince, "last_error", c.LastError)
	}
	if ch == changeSend {
		e.sendStarted(c)
	}
	if !c.Deadline.IsZero() {
		e.kickScheduler(c.Deadline)
	}
	return c, nil
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
	_, err = e.update(ctx, id, func(c *Consumer) (change, error) {
		if c.State != StateFailed {
			return noChange, nil
		}
		t, err := e.readTails(ctx, streamPaths(c))
		if err != nil {
			return noChange, err
		}
		return e.m.revive(c, sub, t, e.clock.Now()), nil
	})
	return err
}

// revive brings dead letter c of sub back at its cursor: an events
// consumer retries its batch, and one whose batch a rewind dropped, like a
// wake consumer, starts afresh.
func (m *machine) revive(c *Consumer, sub *Subscription, t tails, now time.Time) change {
	c.Failures, c.FailingSince, c.LastError = 0, time.Time{}, ""
	if !sub.pushes() || c.Batch == (ReadLimit{}) {
		c.Attempt = 0
		return m.finish(c, sub, t, now)
	}
	c.State = StateWaking
	c.Attempt = 0
	if !sub.active() {
		// The batch waits, with no deadline, for its subscription.
		c.InFlight, c.Deadline = false, time.Time{}
		return changeSave
	}
	m.startAttempt(c, sub, now)
	return changeSend
}
