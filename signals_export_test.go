package webhooks

import (
	"context"
	"maps"
	"slices"
)

// SignalProgress makes e send on ch after each write of consumers it makes
// to its Store, each delivery attempt it ends, each reload of its
// subscriptions and each time its scheduler parks, so that a test waits
// for their effects without polling. Call it before Start.
func SignalProgress(e *Engine, ch chan<- struct{}) { e.progressed.Set(ch) }

// SignalReloaded makes e send on ch after each reload of its subscriptions
// through the SubscriptionFeed. Call it before Start.
func SignalReloaded(e *Engine, ch chan<- struct{}) { e.reloaded.Set(ch) }

// SignalSwept makes e send on ch after Start's recovery and after each
// stream sweep. Call it before Start.
func SignalSwept(e *Engine, ch chan<- struct{}) { e.swept.Set(ch) }

// SignalStopping makes e send on ch when Stop has stopped its work and
// waits for its deliveries in flight. Call it before Start.
func SignalStopping(e *Engine, ch chan<- struct{}) { e.stopping.Set(ch) }

// SchedulerParked reports whether e's scheduler waits for work, its timer
// armed after the clock's time and no kick pending: it acts again only when
// the clock passes its timer or a transition kicks it.
func SchedulerParked(e *Engine) bool {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	return e.parked && e.armed.Load() > e.clock.Now().UnixNano()
}

// DeliveriesRunning is how many delivery attempts e has started and not
// ended.
func DeliveriesRunning(e *Engine) int64 { return e.attempts.Load() }

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
	_, ok := e.handling.Load(id)
	return ok
}

// DeliveryLogLinger is how long the delivery log gathers attempts.
const DeliveryLogLinger = attemptLogLinger

// DeliveryLogLingering reports whether e's delivery log waits, its timer
// set, for more attempts to join those it holds.
func DeliveryLogLingering(e *Engine) bool { return e.attemptLog.lingering.Load() }

// LoadForBench loads e's signing key and subscriptions, as Start does,
// without starting it, and readies its stream sweep.
func LoadForBench(ctx context.Context, e *Engine) error {
	if err := e.load(ctx); err != nil {
		return err
	}
	e.sweep.known = make(map[string]bool)
	for id := range e.stored {
		e.sweep.known[id] = true
	}
	return nil
}

// RecoverForBench runs Start's recovery on a loaded e, recording the
// stream sweep's first tails.
func RecoverForBench(ctx context.Context, e *Engine) {
	e.sweep.tails = make(map[uint64]uint64)
	e.recover(ctx, e.sweep.tails)
}

// SweepForBench runs one stream sweep of a loaded e.
func SweepForBench(ctx context.Context, e *Engine) { e.sweepStreams(ctx) }
