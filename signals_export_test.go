package webhooks

import (
	"context"
	"maps"
	"slices"

	"github.com/streamhooks/webhooks/internal/testsignal"
)

// SignalProgress makes e send on ch at each of its signals: after each
// write of consumers it makes to its Store, each delivery attempt it ends,
// each handler call that returns, each reload of its subscriptions, each
// write of its delivery log and each time its scheduler parks, so that a
// test waits for their effects without polling. Call it before Start.
func SignalProgress(e *Engine, ch chan<- struct{}) {
	s := &e.signals
	for _, sig := range []*testsignal.Signal{
		&s.consumerWritten, &s.attemptEnded, &s.handlerReturned,
		&s.subscriptionsReloaded, &s.schedulerParked, &s.attemptLogged,
	} {
		sig.Set(ch)
	}
}

// SignalReloaded makes e send on ch after each reload of its subscriptions
// through the SubscriptionFeed. Call it before Start.
func SignalReloaded(e *Engine, ch chan<- struct{}) { e.signals.reloadEnded.Set(ch) }

// SignalSwept makes e send on ch after Start's recovery and after each
// stream sweep. Call it before Start.
func SignalSwept(e *Engine, ch chan<- struct{}) { e.signals.streamsSwept.Set(ch) }

// SignalReceiptDeferred makes e send on ch each time the receipt of a
// wake's 2xx waits for its body, its guard armed on e's clock. Call it
// before Start.
func SignalReceiptDeferred(e *Engine, ch chan<- struct{}) { e.signals.receiptDeferred.Set(ch) }

// SignalStopping makes e send on ch when Stop has stopped its work and
// waits for its deliveries in flight. Call it before Start.
func SignalStopping(e *Engine, ch chan<- struct{}) { e.signals.stopWaiting.Set(ch) }

// SchedulerParked reports whether e's scheduler waits for work, its timer
// armed after the clock's time and no kick pending: it acts again only when
// the clock passes its timer or a transition kicks it.
func SchedulerParked(e *Engine) bool {
	s := e.sched
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	return s.parked && s.armed.Load() > e.clock.Now().UnixNano()
}

// DeliveriesRunning is how many delivery attempts e has started and not
// ended.
func DeliveriesRunning(e *Engine) int64 { return e.pipeline.attempts.Load() }

// KnownSubscriptions lists the IDs of the subscriptions e has loaded.
func KnownSubscriptions(e *Engine) []string {
	return slices.Sorted(maps.Keys(e.subs.patterns()))
}

// LoadedSubscription is subscription id as e has loaded it, or nil.
func LoadedSubscription(e *Engine, id string) *Subscription { return e.subs.get(id).Clone() }

// DeadLetterMsg is logged when a consumer becomes a dead letter.
const DeadLetterMsg = deadLetterMsg

// HandlerRunning reports whether a BatchHandler call for consumer id runs.
func HandlerRunning(e *Engine, id string) bool {
	_, ok := e.x.handling.Load(id)
	return ok
}

// DeliveryLogLinger is how long the delivery log gathers attempts.
const DeliveryLogLinger = attemptLogLinger

// DeliveryLogLingering reports whether e's delivery log waits, its timer
// set, for more attempts to join those it holds.
func DeliveryLogLingering(e *Engine) bool { return e.outcomes.attemptLog.lingering.Load() }

// DeliveryLogPending is how many attempts e's delivery log holds that its
// writer has not taken.
func DeliveryLogPending(e *Engine) int {
	l := e.outcomes.attemptLog
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// LoadForBench loads e's signing key and subscriptions, as Start does,
// without starting it, and readies its stream sweep.
func LoadForBench(ctx context.Context, e *Engine) error {
	if err := e.load(ctx); err != nil {
		return err
	}
	e.sweep.begin()
	return nil
}

// RecoverForBench runs Start's recovery on a loaded e, recording the
// stream sweep's first marks.
func RecoverForBench(ctx context.Context, e *Engine) {
	marks := newSweepMarks()
	e.sweep.recover(ctx, marks)
	e.sweep.marks = marks.done()
}

// SweepForBench runs one stream sweep of a loaded e.
func SweepForBench(ctx context.Context, e *Engine) { e.sweep.sweep(ctx) }

// ReceiptGrace is how long a 2xx's receipt waits for a body on its way.
const ReceiptGrace = receiptGrace

// SignalDSProgress makes e send on ch each time its __ds scheduler parks
// and each time a __ds wake's attempt ends. Call it before Start.
func SignalDSProgress(e *Engine, ch chan<- struct{}) {
	e.signals.dsSchedulerParked.Set(ch)
	e.signals.dsAttemptEnded.Set(ch)
}

// MarkAdopted marks subscription id in store as the engine that creates it
// does once it has adopted the streams that existed.
func MarkAdopted(ctx context.Context, store Store, id string) error {
	_, err := store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		s.adopted = true
		return nil
	})
	return err
}

// LanesPending counts e's attempts in flight and waiting in its lanes.
func LanesPending(e *Engine) int { return e.pipeline.lanes.pending() }
