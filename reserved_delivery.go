package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// Delivery of the reserved `__ds` subscriptions (upstream protocol,
// section 7). Their cursors live in the Store's DSStore capability: one
// cursor group per subscription (generation, wake id, lease, holder, due
// time) and one cursor per linked stream. The Store fences; the engine
// decides when a wake starts, sends it through the subscription's
// mechanism (a signed webhook POST, or a wake event appended to the wake
// stream) and expires leases, all from one due time per subscription.

// Retry of a failed `__ds` delivery (section 7.1): from 1 s, doubling, up
// to 60 s, each with 20 % jitter.
const (
	dsRetryFirst  = time.Second
	dsRetryMax    = 60 * time.Second
	dsRetryJitter = 0.2
)

// dsDueBatch is how many due subscriptions the scheduler takes at once.
const dsDueBatch = 100

// dsLinkPage is how many pending links a wake lists: a wake costs what
// it shows, not the number of links.
const dsLinkPage = 1000

// dsBackoff is the wait before retry attempt (1 for the first retry).
func dsBackoff(attempt int) time.Duration {
	d := dsRetryFirst
	for i := 1; i < attempt && d < dsRetryMax; i++ {
		d *= 2
	}
	d = min(d, dsRetryMax)
	jitter := (rand.Float64()*2 - 1) * dsRetryJitter
	return time.Duration(float64(d) * (1 + jitter))
}

// StreamAppender is an optional capability of a StreamSource that pull-wake
// subscriptions of the reserved `__ds` API need: the engine appends their
// wake events to the application's wake stream through it.
type StreamAppender interface {
	// Append appends event, one JSON value, as one message to the JSON
	// stream at path, and returns once it is durable. It returns
	// ErrStreamNotFound if there is no stream at path.
	Append(ctx context.Context, path string, event []byte) error
}

// dsMechanism is how a `__ds` subscription's wake goes out: the webhook
// POST of section 7.1 or the wake event of section 7.2. It is all that
// differs between them: both go through the engine's pipeline (lanes,
// spans, metrics, the delivery log, Stop), and the webhook through the
// webhook transport.
type dsMechanism interface {
	// send delivers wake w of sub, seen by the shared core as view, and
	// reports the outcome.
	send(ctx context.Context, d *dsDelivery, sub *DSSubscription, view *Subscription, w dsWake) dsOutcome
	// lane is the lane of sub's attempts.
	lane(d *dsDelivery, sub *DSSubscription) string
	// spanName names an attempt's trace span.
	spanName() string
	// leaseAtSend is the lease the wake holds while it is being sent;
	// zero for none.
	leaseAtSend(d *dsDelivery, sub *DSSubscription) time.Duration
	// dueAtSend is how long the sending engine has before another
	// engine may send the wake again; zero for never (at most once).
	dueAtSend(d *dsDelivery) time.Duration
}

// dsMechanismOf is the mechanism of sub.
func dsMechanismOf(sub *DSSubscription) dsMechanism {
	if sub.Type == DSPullWake {
		return dsPullWake{}
	}
	return dsWebhook{}
}

// dsWake is one attempt of a wake, as the transition that started it
// fixed it.
type dsWake struct {
	generation int64
	wakeID     string
	attempt    int
}

// dsOutcome is what sending a wake came to.
type dsOutcome struct {
	// resp is the transport's outcome, for the lanes, the telemetry and
	// the delivery log; sent is unset if nothing was sent.
	resp response
	sent bool
	err  error
	// done is set when a webhook answered {"done": true}, and acks are
	// the tails of the wake's snapshot to ack then.
	done bool
	acks []DSAck
}

// dsDelivery runs the `__ds` subscriptions' deliveries on one engine: its
// scheduler starts them, and hands each attempt to the engine's pipeline.
type dsDelivery struct {
	startstop.Base
	e     *Engine
	store DSStore
	kick  chan struct{}
	// parked is set while the scheduler waits for its timer, armed at
	// armed (zero for none), with no kick pending: a test moves a mock
	// clock only while it is idle (DSSchedulerParked).
	parkMu sync.Mutex
	parked bool
	armed  time.Time

	mu sync.RWMutex
	// subs are the live subscriptions, for glob matching on appends.
	subs map[string]*DSSubscription
	// remembered counts remember's changes to subs, so that a reload whose
	// read may predate one reads again rather than undo it.
	remembered uint64
}

func newDSDelivery(e *Engine) *dsDelivery {
	ds, _ := e.store.(DSStore)
	return &dsDelivery{e: e, store: ds, kick: make(chan struct{}, 1), subs: map[string]*DSSubscription{}}
}

// enabled reports whether the Store keeps `__ds` subscriptions.
func (d *dsDelivery) enabled() bool { return d.store != nil }

// reload reads the live subscriptions for glob matching. A subscription
// this engine creates or deletes during the read is remembered after its
// commit, which the read may not have seen: the read is then made again.
func (d *dsDelivery) reload(ctx context.Context) error {
	if d.store == nil {
		return nil
	}
	for {
		d.mu.RLock()
		before := d.remembered
		d.mu.RUnlock()
		subs, err := d.store.ListDSSubscriptions(ctx)
		if err != nil {
			return fmt.Errorf("webhooks: loading __ds subscriptions: %w", err)
		}
		m := make(map[string]*DSSubscription, len(subs))
		for _, s := range subs {
			m[s.ID] = s
		}
		d.mu.Lock()
		current := d.remembered == before
		if current {
			d.subs = m
		}
		d.mu.Unlock()
		if current {
			return nil
		}
	}
}

// remember adds or drops sub in the glob index after this engine created
// or deleted it.
func (d *dsDelivery) remember(id string, sub *DSSubscription) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remembered++
	if sub == nil {
		delete(d.subs, id)
		return
	}
	d.subs[id] = sub
}

// poke wakes the scheduler.
func (d *dsDelivery) poke() {
	d.parkMu.Lock()
	defer d.parkMu.Unlock()
	d.parked = false
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// park records whether the scheduler waits, and for which time.
func (d *dsDelivery) park(waiting bool, armed time.Time) {
	d.parkMu.Lock()
	d.parked, d.armed = waiting && len(d.kick) == 0, armed
	d.parkMu.Unlock()
}

// relative is the stream-root-relative path of stream path, and false for
// a stream outside the root or in the reserved namespace.
func (d *dsDelivery) relative(path string) (string, bool) {
	root := d.e.cfg.streamRoot + "/"
	if !strings.HasPrefix(path, root) {
		return "", false
	}
	rel := path[len(root):]
	if rel == "" {
		return "", false
	}
	if first, _, _ := strings.Cut(rel, "/"); first == dsReservedSegment {
		return "", false
	}
	return rel, true
}

// absolute is the host's path of root-relative stream path rel.
func (d *dsDelivery) absolute(rel string) string { return d.e.cfg.streamRoot + "/" + rel }

// matches reports whether sub's pattern matches rel, its wake stream
// excepted: appends to its own wake stream never wake it.
func (sub *DSSubscription) matches(rel string) bool {
	if sub.Pattern == "" || rel == sub.WakeStream {
		return false
	}
	p, err := ParsePattern("/" + sub.Pattern)
	return err == nil && p.Match("/"+rel)
}

// streamChanged links path to the subscriptions whose pattern matches it,
// before its append counts, then records its new tail, and wakes the
// scheduler if a subscription became due.
func (d *dsDelivery) streamChanged(ctx context.Context, path string) error {
	if d.store == nil {
		return nil
	}
	rel, ok := d.relative(path)
	if !ok {
		return nil
	}
	d.mu.RLock()
	var matching []string
	for id, sub := range d.subs {
		if sub.matches(rel) {
			matching = append(matching, id)
		}
	}
	d.mu.RUnlock()
	info, err := d.e.source.Stream(ctx, path)
	if errors.Is(err, ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("webhooks: reading %s: %w", path, err)
	}
	var errs []error
	for _, id := range matching {
		// A stream found by its append is linked before it: its whole
		// history came after the subscription's backfill.
		err := d.store.LinkDSStreams(ctx, &LinkDSStreamsParams{ID: id, Links: []DSLinkSpec{{Path: rel, Type: DSLinkGlob, Offset: OffsetNone}}})
		if err != nil && !errors.Is(err, ErrDSSubscriptionNotFound) {
			errs = append(errs, err)
		}
	}
	if info.Empty {
		return errors.Join(errs...)
	}
	now := d.e.clock.Now()
	cursors, err := d.store.NoteDSAppend(ctx, &NoteDSAppendParams{Path: rel, Tail: info.Tail, Now: now})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, c := range cursors {
		if !c.Cursor.DueAt.IsZero() && !c.Cursor.DueAt.After(now) {
			d.poke()
			break
		}
	}
	return errors.Join(errs...)
}

// streamDeleted drops every subscription's link of the deleted stream at
// path, glob and explicit: a stream created again there is new, and is
// linked afresh, before its first event, by its creation or first append.
// A deletion replayed after a Store outage (late) may find a stream
// created again meanwhile: that one is linked again now, from before its
// first event, since its whole history came after the deletion.
func (d *dsDelivery) streamDeleted(ctx context.Context, path string, late bool) error {
	if d.store == nil {
		return nil
	}
	rel, ok := d.relative(path)
	if !ok {
		return nil
	}
	if err := d.store.DropDSStream(ctx, rel); err != nil {
		return fmt.Errorf("webhooks: dropping the __ds links of %s: %w", path, err)
	}
	if !late {
		return nil
	}
	if _, err := d.e.source.Stream(ctx, path); errors.Is(err, ErrStreamNotFound) {
		return nil
	}
	return d.streamChanged(ctx, path)
}

// Start runs the scheduler in ctx until Stop; without a DSStore it does
// nothing.
func (d *dsDelivery) Start(ctx context.Context) {
	if d.store == nil {
		return
	}
	run, ok, stopped := d.StartInit(ctx)
	if !ok {
		return
	}
	go func() {
		defer stopped()
		d.run(run)
	}()
}

// run is the scheduler: it acts on every due subscription, then waits for
// the next due time or a poke.
func (d *dsDelivery) run(ctx context.Context) {
	for {
		var next time.Time // none
		if err := d.runDue(ctx); err != nil {
			d.e.log.WarnContext(ctx, "webhooks: __ds scheduler: the store failed; retrying", "error", err)
			next = d.e.clock.Now().Add(storeErrorRetry)
		} else if due, ok, err := d.store.NextDSDeadline(ctx); err != nil {
			next = d.e.clock.Now().Add(storeErrorRetry)
		} else if ok {
			next = due
		}
		if !d.wait(ctx, next) {
			return
		}
	}
}

// wait parks the scheduler until next (never if zero), a poke, or ctx's
// end, and reports false at ctx's end.
func (d *dsDelivery) wait(ctx context.Context, next time.Time) bool {
	var timer <-chan time.Time
	var armed time.Time
	if !next.IsZero() {
		now := d.e.clock.Now()
		t := d.e.clock.Timer(d.e.clock.Until(next))
		defer t.Stop()
		if d.e.clock.Since(now) > armSlack {
			// The clock jumped while the timer was being armed, which
			// then fires late by the jump: look again.
			return true
		}
		timer, armed = t.C, later(next, now)
	}
	d.park(true, armed)
	defer d.park(false, time.Time{})
	d.e.signals.dsSchedulerParked.Send()
	select {
	case <-ctx.Done():
		return false
	case <-d.kick:
	case <-timer:
	}
	return true
}

// runDue acts on the subscriptions due now.
func (d *dsDelivery) runDue(ctx context.Context) error {
	for {
		due, err := d.store.DueDSSubscriptions(ctx, d.e.clock.Now(), dsDueBatch)
		if err != nil {
			return err
		}
		for _, c := range due {
			if err := d.step(ctx, c.ID); err != nil && !errors.Is(err, ErrDSSubscriptionNotFound) {
				return err
			}
		}
		if len(due) < dsDueBatch {
			return nil
		}
	}
}

// step is the transition of due subscription id: an expired lease ends
// its wake; pending work with no wake starts one; a wake whose attempt is
// due is sent again. Only the engine whose transition committed sends.
func (d *dsDelivery) step(ctx context.Context, id string) error {
	sub, err := d.store.GetDSSubscription(ctx, id)
	if err != nil {
		return err
	}
	mech := dsMechanismOf(sub)
	var (
		send     *dsWake
		deadline time.Time
	)
	_, err = d.store.UpdateDSCursor(ctx, id, func(c *DSCursor) error {
		send = nil
		now := d.e.clock.Now()
		if c.DueAt.IsZero() || c.DueAt.After(now) {
			return nil // another engine acted first
		}
		if c.WakeID != "" && !c.LeaseExpiresAt.IsZero() && !c.LeaseExpiresAt.After(now) {
			*c = c.EndWake(c.Pending, now) // section 7.3: clear holder and token
		}
		if c.WakeID == "" {
			if !c.Pending {
				c.DueAt = time.Time{}
				return nil
			}
			c.Generation++
			c.WakeID, c.Attempt = newWakeID(), 0
		}
		c.Attempt++
		c.LeaseExpiresAt = time.Time{}
		if l := mech.leaseAtSend(d, sub); l > 0 {
			c.LeaseExpiresAt = now.Add(l)
		}
		c.DueAt = time.Time{}
		if t := mech.dueAtSend(d); t > 0 {
			c.DueAt = now.Add(t)
		}
		send = &dsWake{generation: c.Generation, wakeID: c.WakeID, attempt: c.Attempt}
		deadline = c.DueAt
		return nil
	})
	if err != nil || send == nil {
		return err
	}
	// The attempt waits in its lane no later than another engine may send
	// it again; one not taken, as at Stop, waits for its due time.
	w := *send
	d.e.pipeline.submit(mech.lane(d, sub), &attempt{
		key: DSDeliveryLogKey(sub.ID), deadline: deadline, ended: d.e.signals.dsAttemptEnded.Send,
		run: func(ctx context.Context, answered func(string)) { d.deliver(ctx, sub, mech, w, answered) },
	})
	return nil
}

// dsAttemptView is attempt w of sub as the shared core sees an attempt:
// a consumer and a subscription named by DSDeliveryLogKey, the key of its
// attempts in the lanes, the telemetry and the logs, which carry the
// attempt's identity (generation, wake id, number) and destination, and
// none of its cursors, which stay in the DSStore.
func dsAttemptView(sub *DSSubscription, w dsWake) (*Consumer, *Subscription) {
	key := DSDeliveryLogKey(sub.ID)
	return &Consumer{ID: key, SubscriptionID: key, Epoch: w.generation, WakeID: w.wakeID, Attempt: w.attempt},
		&Subscription{ID: key, Webhook: sub.WebhookURL, Signature: SignatureEd25519}
}

// deliver sends wake w of sub, reports the transport's outcome to its
// lane (answered), its span, the metrics and the delivery log, as every
// attempt does, and applies it, fenced on w. An attempt cut short by the
// engine's Stop is left to its due time.
func (d *dsDelivery) deliver(ctx context.Context, sub *DSSubscription, mech dsMechanism, w dsWake, answered func(string)) {
	c, view := dsAttemptView(sub, w)
	tel := d.e.tel
	ctx, span := tel.tracer.Start(ctx, mech.spanName(), trace.WithAttributes(deliveryAttrs(c, view)...))
	defer span.End()
	if w.attempt == 1 {
		tel.started(ctx, c)
	}
	out := mech.send(ctx, d, sub, view, w)
	if ctx.Err() != nil {
		return
	}
	if out.sent {
		answered(out.resp.outcome)
		tel.delivered(ctx, span, c, view, out.resp.outcome, out.resp.failure, out.resp.latency)
		d.e.outcomes.logAttempt(ctx, c, out.resp, nil)
	}
	now := d.e.clock.Now()
	if out.done {
		cur, err := d.autoAck(ctx, sub.ID, w, out.acks, now)
		if err != nil && !errors.Is(err, ErrDSFenced) && !errors.Is(err, ErrDSSubscriptionNotFound) {
			d.e.log.ErrorContext(ctx, "webhooks: __ds auto-ack failed", "subscription", sub.ID, "error", err)
		}
		if err == nil && cur.Pending {
			d.poke()
		}
		return
	}
	_, err := d.store.UpdateDSCursor(ctx, sub.ID, func(c *DSCursor) error {
		if c.Generation != w.generation || c.WakeID != w.wakeID || c.Attempt != w.attempt {
			return nil // a callback, a claim or another attempt moved on
		}
		if out.err != nil {
			c.Status = DSFailed
			c.LeaseExpiresAt = time.Time{}
			c.DueAt = now.Add(dsBackoff(c.Attempt))
			return nil
		}
		c.Status = DSActive
		if sub.Type == DSWebhook {
			// The webhook took the wake: its lease runs from now.
			c.LeaseExpiresAt = now.Add(sub.LeaseTTL)
			c.DueAt = c.LeaseExpiresAt
		} else if c.Holder == "" {
			c.DueAt = time.Time{} // the event waits for a claim
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrDSSubscriptionNotFound) {
		d.e.log.ErrorContext(ctx, "webhooks: __ds delivery outcome not recorded", "subscription", sub.ID, "error", err)
	}
	if out.err != nil {
		d.e.log.WarnContext(ctx, "webhooks: __ds delivery failed; retrying", "subscription", sub.ID, "generation", w.generation, "attempt", w.attempt, "error", out.err)
	}
	d.poke()
}

// autoAck acks the snapshot of wake w, which the webhook answered
// {"done": true}, and ends the wake. A stream deleted since the snapshot
// is no longer linked: its ack is left out, not the whole ack refused.
func (d *dsDelivery) autoAck(ctx context.Context, id string, w dsWake, acks []DSAck, now time.Time) (*DSCursor, error) {
	p := &AckDSParams{ID: id, Generation: w.generation, WakeID: w.wakeID, Acks: acks, Done: true, Now: now}
	cur, err := d.store.AckDS(ctx, p)
	if !errors.Is(err, ErrDSNotLinked) {
		return cur, err
	}
	paths := make([]string, len(acks))
	for i, a := range acks {
		paths[i] = a.Path
	}
	links, err := d.store.ListDSLinks(ctx, &ListDSLinksParams{ID: id, Paths: paths})
	if err != nil {
		return nil, err
	}
	linked := make(map[string]bool, len(links))
	for _, l := range links {
		linked[l.Path] = true
	}
	p.Acks = slices.DeleteFunc(slices.Clone(acks), func(a DSAck) bool { return !linked[a.Path] })
	return d.store.AckDS(ctx, p)
}

// pendingLinks are up to dsLinkPage of sub's links with pending work.
func (d *dsDelivery) pendingLinks(ctx context.Context, id string) ([]DSLink, error) {
	return d.store.ListDSLinks(ctx, &ListDSLinksParams{ID: id, Limit: dsLinkPage, PendingOnly: true})
}

// dsStreamJSON is a linked stream in a wake or a claim.
type dsStreamJSON struct {
	Path        string `json:"path"`
	LinkType    string `json:"link_type"`
	AckedOffset string `json:"acked_offset"`
	TailOffset  string `json:"tail_offset"`
	HasPending  bool   `json:"has_pending"`
}

func dsStreamsJSON(links []DSLink) []dsStreamJSON {
	out := make([]dsStreamJSON, len(links))
	for i, l := range links {
		out[i] = dsStreamJSON{Path: l.Path, LinkType: l.Type.String(), AckedOffset: l.AckedOffset, TailOffset: l.TailOffset, HasPending: l.Pending}
	}
	return out
}

// dsTokenSubject is the subject of the callback and claim tokens of
// subscription id, apart from every consumer ID, which has no "__ds/".
func dsTokenSubject(id string) string { return dsReservedSegment + "/" + id }

// dsWebhook is webhook delivery (section 7.1).
type dsWebhook struct{}

// dsWakePayload is the body of a webhook wake.
type dsWakePayload struct {
	SubscriptionID string         `json:"subscription_id"`
	WakeID         string         `json:"wake_id"`
	Generation     int64          `json:"generation"`
	Streams        []dsStreamJSON `json:"streams"`
	CallbackURL    string         `json:"callback_url"`
	CallbackToken  string         `json:"callback_token"`
}

// The webhook's lease covers its request, so that an answer of
// {"done": true} is applied however long it took, and then runs for the
// subscription's lease from the answer.
func (dsWebhook) leaseAtSend(d *dsDelivery, sub *DSSubscription) time.Duration {
	return d.e.cfg.requestTimeout + sub.LeaseTTL
}

// A webhook attempt lost with its engine is sent again once its request
// has surely ended.
func (dsWebhook) dueAtSend(d *dsDelivery) time.Duration { return 2 * d.e.cfg.requestTimeout }

// The webhook's lane is its host's, shared with every subscription that
// posts there.
func (dsWebhook) lane(_ *dsDelivery, sub *DSSubscription) string { return laneKey(sub.WebhookURL) }

func (dsWebhook) spanName() string { return "webhooks.ds.webhook" }

// send POSTs the wake through the webhook transport, signed with Ed25519
// as view's scheme says.
func (dsWebhook) send(ctx context.Context, d *dsDelivery, sub *DSSubscription, view *Subscription, w dsWake) dsOutcome {
	links, err := d.pendingLinks(ctx, sub.ID)
	if err != nil {
		return dsOutcome{err: err}
	}
	token, err := d.e.tokens.issue(dsTokenSubject(sub.ID), w.generation, w.wakeID)
	if err != nil {
		return dsOutcome{err: err}
	}
	body, err := json.Marshal(dsWakePayload{
		SubscriptionID: sub.ID, WakeID: w.wakeID, Generation: w.generation, Streams: dsStreamsJSON(links),
		CallbackURL: d.e.dsURL("subscriptions/" + sub.ID + "/callback"), CallbackToken: token,
	})
	if err != nil {
		return dsOutcome{err: err}
	}
	r, err := webhookTransport{}.send(ctx, d.e.x, view, &message{id: w.wakeID, body: body, timeout: d.e.cfg.requestTimeout}, nil)
	if err != nil {
		return dsOutcome{err: err}
	}
	out := dsOutcome{resp: r, sent: true}
	switch {
	case r.failure != nil && r.failure.err != nil:
		out.err = r.failure.err
	case r.failure != nil:
		out.err = fmt.Errorf("the webhook answered %d", r.failure.status)
	case r.outcome == outcomeDone:
		out.done = true
		out.acks = make([]DSAck, len(links))
		for i, l := range links {
			out.acks[i] = DSAck{Path: l.Path, Offset: l.TailOffset}
		}
	}
	return out
}

// dsPullWake is pull-wake delivery (section 7.2).
type dsPullWake struct{}

// dsWakeEvent is a wake event on the wake stream.
type dsWakeEvent struct {
	Type           string `json:"type"`
	SubscriptionID string `json:"subscription_id"`
	Stream         string `json:"stream,omitempty"`
	Generation     int64  `json:"generation"`
	TS             int64  `json:"ts"`
}

// A pull-wake wake holds no lease until it is claimed.
func (dsPullWake) leaseAtSend(*dsDelivery, *DSSubscription) time.Duration { return 0 }

// A wake event is appended at most once per generation: an engine lost
// mid-append leaves the wake to a claim, never to a second event.
func (dsPullWake) dueAtSend(*dsDelivery) time.Duration { return 0 }

// The wake stream is the lane: its appends, of every subscription that
// shares it, are its destination's load.
func (dsPullWake) lane(d *dsDelivery, sub *DSSubscription) string {
	return "append:" + d.absolute(sub.WakeStream)
}

func (dsPullWake) spanName() string { return "webhooks.ds.pull_wake" }

func (dsPullWake) send(ctx context.Context, d *dsDelivery, sub *DSSubscription, _ *Subscription, w dsWake) dsOutcome {
	appender, ok := d.e.source.(StreamAppender)
	if !ok {
		return dsOutcome{err: errors.New("the StreamSource cannot append wake events (StreamAppender)")}
	}
	links, err := d.store.ListDSLinks(ctx, &ListDSLinksParams{ID: sub.ID, Limit: 1, PendingOnly: true})
	if err != nil {
		return dsOutcome{err: err}
	}
	ev := dsWakeEvent{Type: "wake", SubscriptionID: sub.ID, Generation: w.generation, TS: d.e.clock.Now().UnixMilli()}
	if len(links) > 0 {
		ev.Stream = links[0].Path
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return dsOutcome{err: err}
	}
	sentAt := d.e.clock.Now()
	err = appender.Append(ctx, d.absolute(sub.WakeStream), body)
	out := dsOutcome{resp: response{outcome: outcomeOK, sentAt: sentAt, latency: d.e.clock.Since(sentAt)}, sent: true, err: err}
	if err != nil {
		out.resp.outcome, out.resp.failure = outcomeError, &deliveryFailure{class: failOther, err: err}
	}
	return out
}
