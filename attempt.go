package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// The one attempt pipeline of every delivery mode: a transition marks an
// attempt as sent (changeSend), send hands it to its destination's lane,
// the lane starts it, deliver has its mechanism prepare the message and
// its transport send it, and record applies the outcome through the
// mechanism, in one Store update, before it is reported once
// (outcomes.attemptEnded).

// pipeline is the engine's part that makes delivery attempts: it holds
// the rate limits, the lanes and the attempts in flight, and gets from the
// engine only what it uses. Between Start and Stop it takes the attempts
// that transitions start; Stop refuses new ones and waits for those in
// flight, which run in a context of their own that only abandon cancels.
type pipeline struct {
	startstop.Base
	clock    clock.Clock
	log      *slog.Logger
	tel      *telemetry
	core     *cursorCore
	x        *executor
	outcomes *outcomes
	// subscription looks up an attempt's subscription; latest is the
	// subscription as the engine's set now holds it.
	subscription func(ctx context.Context, id string) (*Subscription, error)
	latest       func(sub *Subscription) *Subscription
	ended        func() // a test's signal: an attempt ended

	limits rateLimits
	lanes  *lanes

	mu sync.Mutex
	// accept is the context of the run, from Start to Stop, in which
	// transitions hand attempts over; nil while not running.
	accept context.Context
	// sending is that of the attempts in flight: it outlives accept until
	// they end, or abandon cancels it.
	sending  context.Context
	abandon  context.CancelFunc
	inFlight sync.WaitGroup
	// attempts counts the attempts started and not ended.
	attempts atomic.Int64
}

// Start opens the pipeline to attempts, in ctx, until Stop.
func (p *pipeline) Start(ctx context.Context) {
	ctx, ok, stopped := p.StartInit(ctx)
	if !ok {
		return
	}
	p.mu.Lock()
	p.accept = ctx
	p.sending, p.abandon = context.WithCancel(context.WithoutCancel(ctx))
	abandon := p.abandon
	p.mu.Unlock()
	go func() {
		defer stopped()
		<-ctx.Done()
		p.mu.Lock()
		p.accept = nil
		p.mu.Unlock()
		p.inFlight.Wait()
		abandon()
	}()
}

// abandonAttempts cancels the attempts still in flight: their POSTs end,
// and their attempts stay in flight in the Store, to time out.
func (p *pipeline) abandonAttempts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandon != nil {
		p.abandon()
	}
}

// sendStarted sends the attempt of c that a transition has just started
// and stored: a delivery's first, which needs no further write, or a retry
// come due.
func (p *pipeline) sendStarted(c *Consumer) {
	if c.State != stateDelivering || !c.InFlight {
		return
	}
	p.admit(func(ctx context.Context) { p.send(ctx, c) })
}

// submit hands attempt a, which a transition has just started and
// stored, to lane, as sendStarted does; a `__ds` subscription's attempt
// comes this way. It reports whether the pipeline took it.
func (p *pipeline) submit(lane string, a *attempt) bool {
	return p.admit(func(ctx context.Context) {
		a.ctx = ctx
		p.lanes.enqueue(lane, a)
	})
}

// admit calls hand, which hands a stored attempt over to its lane, with
// the pipeline's context, not the caller's, which may be a request's, and
// reports whether it did. A pipeline not running leaves the attempt to
// time out and be retried, as after a crash.
func (p *pipeline) admit(hand func(ctx context.Context)) bool {
	p.mu.Lock()
	ctx := p.accept
	if ctx == nil || ctx.Err() != nil {
		p.mu.Unlock()
		return false
	}
	// Counted before Stop can begin to wait.
	p.inFlight.Add(1)
	p.mu.Unlock()
	defer p.inFlight.Done()
	hand(ctx)
	return true
}

// send hands the attempt of c, just marked as sent, to the lane of its
// destination, or puts it back until its turn under its subscription's
// rate limit.
func (p *pipeline) send(ctx context.Context, c *Consumer) {
	sub, err := p.subscription(ctx, c.SubscriptionID)
	if err != nil {
		// A deleted subscription took the consumer with it. After another
		// error the attempt stays in flight in the Store and times out like
		// a lost POST.
		if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
			p.log.ErrorContext(ctx, "webhooks: loading subscription", "consumer_id", c.ID, "error", err)
		}
		return
	}
	if wait := p.limits.turn(sub, c.ID, p.clock.Now()); wait > 0 {
		p.deferAttempt(ctx, c, sub, wait)
		return
	}
	mech := mechanismOf(sub)
	p.lanes.enqueue(mech.transport().lane(sub), &attempt{
		ctx: ctx, key: c.ID, deadline: c.Deadline, ended: p.ended,
		run: func(ctx context.Context, answered func(string)) { p.deliver(ctx, c, sub, mech, answered) },
	})
}

// startDelivery runs attempt a, started by its lane, in a goroutine that
// Stop waits for. Its context is the pipeline's context for attempts in
// flight, which Stop leaves them until abandonAttempts; an attempt that
// its lane has not started by Stop is not (lanes.next). The lanes call it
// only while an attempt is counted in flight, so Stop is not yet past its
// wait.
func (p *pipeline) startDelivery(a *attempt) {
	p.inFlight.Add(1)
	p.attempts.Add(1)
	go p.runDelivery(a)
}

// runDelivery makes attempt a and reports its outcome to its lane as soon
// as the POST is answered: the Store write that records it holds no slot
// of the destination, so other consumers' POSTs, as other streams' next
// batches, do not wait for this one's commit.
func (p *pipeline) runDelivery(a *attempt) {
	defer p.inFlight.Done()
	p.mu.Lock()
	ctx := p.sending
	p.mu.Unlock()
	answered := false
	a.run(ctx, func(outcome string) {
		answered = true
		p.lanes.finish(a, laneOutcomeOf(outcome))
	})
	if !answered {
		p.lanes.finish(a, laneOutcomeOf(""))
	}
	p.attempts.Add(-1)
	a.ended()
}

// deliver makes the attempt of c, of sub delivered by mech, that a
// transition has just marked as sent, and records its outcome. It calls
// answered with the transport's outcome once the POST has its answer,
// before recording it, and not at all if nothing was sent. An attempt
// that cannot be prepared or sent stays in flight in the Store and times
// out, to be retried, as a lost POST does; so does one cut short by Stop.
func (p *pipeline) deliver(ctx context.Context, c *Consumer, sub *Subscription, mech mechanism, answered func(outcome string)) {
	ctx, span := p.tel.tracer.Start(ctx, mech.spanName(), trace.WithAttributes(deliveryAttrs(c, sub)...))
	defer span.End()
	msg, err := mech.prepare(ctx, p.x, c, sub)
	if err != nil {
		p.stepFailed(ctx, c, err)
		return
	}
	if msg.empty() {
		p.core.record(ctx, c, mech, p.latest(sub), msg.result)
		return
	}
	if msg.batch != nil {
		p.tel.batchSent(ctx, c, sub, len(msg.batch.Events))
	}
	var (
		received    func()
		receivedErr error
	)
	if msg.onReceipt {
		received = func() {
			r := msg.result
			r.received = true
			_, _, receivedErr = p.core.record(ctx, c, mech, p.latest(sub), r)
		}
	}
	resp, err := mech.transport().send(ctx, p.x, sub, msg, received)
	if err != nil {
		p.stepFailed(ctx, c, err)
		return
	}
	if ctx.Err() != nil {
		return
	}
	resp = checkAck(msg, resp)
	answered(resp.outcome)
	p.tel.delivered(ctx, span, c, sub, resp.outcome, resp.failure, resp.latency)
	r := msg.result
	r.failure, r.done, r.ack = resp.failure, resp.outcome == outcomeDone, resp.ack
	switch {
	case r.failure != nil:
		// A failure counts only if it ended the attempt in flight: one
		// that its timeout failed first was reported then.
		if stored, applied, _ := p.core.record(ctx, c, mech, p.latest(sub), r); applied {
			p.outcomes.attemptEnded(ctx, c, sub, resp, stored)
		}
	case msg.onReceipt && !r.done:
		// Recorded when it was received.
		if reported(receivedErr) {
			p.outcomes.attemptEnded(ctx, c, sub, resp, nil)
		}
	default:
		if stored, _, err := p.core.record(ctx, c, mech, p.latest(sub), r); reported(err) {
			p.outcomes.attemptEnded(ctx, c, sub, resp, stored)
		}
	}
}

// reported reports whether a delivered attempt whose recording returned
// err is reported now: unless the Store failed to record it, since then
// the attempt stays in flight and its timeout reports it.
func reported(err error) bool {
	return err == nil || errors.Is(err, ErrConsumerNotFound)
}

// stepFailed logs err, which kept an attempt of c from being sent, unless
// the engine stops or the stream is gone, which takes c with it.
func (p *pipeline) stepFailed(ctx context.Context, c *Consumer, err error) {
	if ctx.Err() != nil || errors.Is(err, ErrStreamNotFound) {
		return
	}
	step := "sending a delivery"
	var f *failedStep
	if errors.As(err, &f) {
		step, err = f.step, f.err
	}
	p.log.ErrorContext(ctx, "webhooks: "+step, "consumer_id", c.ID, "error", err)
}

// checkAck checks the offset that resp, a 2xx, acknowledged msg up to
// (AckResponse): one of msg's acks, or a failure of the whole message. A
// message that takes no partial acknowledgement ignores it.
func checkAck(msg *message, resp response) response {
	switch {
	case resp.failure != nil || resp.ack == "" || msg.acks == nil:
		resp.ack = ""
	case !slices.Contains(msg.acks, resp.ack):
		resp.outcome = outcomeBadAck
		resp.failure = &deliveryFailure{class: failBadAck, err: fmt.Errorf("acknowledged offset %q is not one of the batch's", resp.ack)}
		resp.ack = ""
	}
	return resp
}
