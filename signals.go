package webhooks

import "github.com/streamhooks/webhooks/internal/testsignal"

// signals are the points in the engine a test may wait on, instead of
// polling or sleeping, each named by what it tells.
type signals struct {
	// consumerWritten: a write of consumers to the Store was made, or
	// tried.
	consumerWritten testsignal.Signal
	// attemptEnded: a delivery attempt that a lane started has ended.
	attemptEnded testsignal.Signal
	// handlerReturned: a BatchHandler call returned, even one abandoned
	// at its timeout.
	handlerReturned testsignal.Signal
	// subscriptionsReloaded: the SubscriptionFeed's reload ended.
	subscriptionsReloaded testsignal.Signal
	// reloadEnded: the same point, on a channel of its own, for a test
	// that waits for reloads alone while SignalProgress takes the rest.
	reloadEnded testsignal.Signal
	// streamsSwept: Start's recovery, or a stream sweep, ended.
	streamsSwept testsignal.Signal
	// stopWaiting: Stop has stopped the engine's work and waits for the
	// deliveries in flight.
	stopWaiting testsignal.Signal
	// schedulerParked: the scheduler waits for its timer or a kick.
	schedulerParked testsignal.Signal
	// attemptLogged: the delivery log wrote attempts to the Store.
	attemptLogged testsignal.Signal
	// receiptDeferred: the receipt of a 2xx waits for its body.
	receiptDeferred testsignal.Signal
	// webhookKeysReread: the periodic reread of the webhook signing keys
	// ended.
	webhookKeysReread testsignal.Signal
	// challengesChecked: the verifier sent the challenges that were due.
	challengesChecked testsignal.Signal
	// dsSchedulerParked: the __ds scheduler waits for its timer or a
	// poke.
	dsSchedulerParked testsignal.Signal
	// dsAttemptEnded: a __ds wake was sent, or failed to be, and its
	// outcome applied.
	dsAttemptEnded testsignal.Signal
}
