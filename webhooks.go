// Package webhooks adds webhook push delivery to a Durable Streams server.
//
// A host stream server creates an Engine with a Store, where subscriptions
// and consumer state live, and a StreamSource, through which the engine sees
// the host's streams. The host tells the engine when a stream is created,
// appended to or deleted, and mounts the engine's handlers: the subscription
// API and the callback API. When a stream that matches a subscription's glob
// pattern has pending work, the engine wakes that stream's consumer with a
// signed POST to the subscription's webhook; the consumer reads events over
// the ordinary stream protocol and calls back to ack, subscribe, unsubscribe
// and say it is done.
package webhooks

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// Engine delivers webhooks for one host stream server. Create it with New,
// mount its handlers, and call Start, which loads the token signing key and
// the subscriptions from the Store. Until Start has loaded them, the
// handlers answer 503 SERVICE_UNAVAILABLE and every method but Start, Stop,
// StreamDeleted and Authorize returns ErrNotStarted; StreamDeleted needs only the
// Store and works at any time. Errors are typed (see ErrNotStarted and
// ValidationError). Its methods are safe for concurrent use.
type Engine struct {
	store  Store
	source StreamSource
	cfg    config
	clock  clock.Clock
	log    *slog.Logger
	tel    *telemetry
	// The parts, which New wires: each gets what it uses. core runs the
	// consumer state machine's transitions; x is what mechanisms and
	// transports use; pipeline makes the attempts the core starts, and
	// outcomes reports what they came to; sched runs the deadlines; sweep
	// finds the appends no StreamAppended told of; feed follows the
	// Store's subscriptions; metrics is this instance's claim to report
	// the Store-wide gauge; keys are the Ed25519 webhook signing keys;
	// verifier sends pending subscriptions' challenges.
	core     cursorCore
	x        *executor
	pipeline *pipeline
	outcomes *outcomes
	sched    *scheduler
	sweep    *streamSweep
	feed     *subscriptionFeed
	metrics  *lease
	keys     *webhookKeyring
	verifier *verifier
	// outages logs API requests failed by a Store outage, sampled.
	outages *outageLog
	// signals tell a test what the engine did, by purpose.
	signals signals
	// ds delivers the subscriptions of the reserved __ds API.
	ds *dsDelivery
	// tenantCreate serializes the creates that count against a tenant's
	// limit (Tenancy.MaxSubscriptions).
	tenantCreate sync.Mutex

	// loaded is set once Start has set tokens and subs, which are
	// read only after it.
	loaded atomic.Bool
	tokens *tokens
	subs   *subscriptionSet
	missed missedStreams

	// The run state: Start starts the parts, Stop stops them all, once.
	mu       sync.Mutex
	running  bool
	stopped  bool
	stopOnce sync.Once
	done     chan struct{} // closed once every part has stopped
}

// New returns an engine over store and source. It does no I/O: Start reads
// the Store. WithCallbackBaseURL is required.
func New(store Store, source StreamSource, opts ...Option) (*Engine, error) {
	if store == nil {
		return nil, errors.New("webhooks: New: store is nil")
	}
	if source == nil {
		return nil, errors.New("webhooks: New: source is nil")
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
	}
	if cfg.callbackBase == nil {
		return nil, errors.New("webhooks: WithCallbackBaseURL is required")
	}
	if cfg.sweepInterval == 0 {
		cfg.sweepInterval = sweepPolls * cfg.pollInterval
	}
	metrics := newLease(store, metricsLease, &cfg)
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider, store, metrics, cfg.subscriptionMetrics, cfg.clock)
	if err != nil {
		return nil, fmt.Errorf("webhooks: setting up telemetry: %w", err)
	}
	policy := cfg.webhookPolicy.netguard()
	transport := cfg.transport
	if transport == nil {
		t := policy.Transport()
		// Every consumer of a subscription posts to the same host: keep a
		// connection per delivery in flight, not Go's default two per host,
		// or under load nearly every delivery dials anew.
		t.MaxIdleConns = cfg.maxConcurrentDeliveries
		t.MaxIdleConnsPerHost = cfg.maxConcurrentDeliveries
		transport = t
	}
	if cfg.transport != nil || policy.Proxy != nil {
		// Another transport, or the proxy, dials the webhook, past the
		// default transport's checks at dial: the engine checks each
		// POST's URL before handing it over.
		transport = policy.Guard(transport)
	}
	e := &Engine{
		store:  store,
		source: source,
		cfg:    cfg,
		clock:  cfg.clock,
		log:    cfg.logger,
		tel:    tel,
		done:   make(chan struct{}),
	}
	e.sched = &scheduler{
		clock:        cfg.clock,
		store:        store,
		log:          cfg.logger,
		pollInterval: cfg.pollInterval,
		catchUp:      e.retryMissed,
		due:          e.handleDue,
		parkedSignal: e.signals.schedulerParked.Send,
		kick:         make(chan struct{}, 1),
	}
	e.core = cursorCore{
		store:  store,
		source: source,
		clock:  cfg.clock,
		log:    cfg.logger,
		tel:    tel,
		rules: cursorMachine{
			wakingTimeout:   cfg.wakingTimeout,
			livenessTimeout: cfg.livenessTimeout,
			requestTimeout:  cfg.requestTimeout,
			failureGCAfter:  cfg.failureGCAfter,
			backoff:         cfg.backoff,
			maxRetryAfter:   cfg.maxRetryAfter,
		},
		deadline: e.sched.kickAt,
		written:  e.signals.consumerWritten.Send,
	}
	e.sweep = &streamSweep{
		source:   source,
		store:    store,
		log:      cfg.logger,
		clock:    cfg.clock,
		interval: cfg.sweepInterval,
		seed:     maphash.MakeSeed(),
		subscriptions: func() map[string]*Pattern {
			return e.subs.patterns()
		},
		match:          func(path string) []string { return e.subs.index.match(path) },
		spawnAndWake:   e.spawnAndWake,
		startIfPending: e.startIfPending,
		swept:          e.signals.streamsSwept.Send,
	}
	e.keys = newWebhookKeyring(store, &cfg, e.signals.webhookKeysReread.Send)
	e.verifier = &verifier{
		clock:   cfg.clock,
		kick:    make(chan struct{}, 1),
		due:     e.challengeDue,
		checked: e.signals.challengesChecked.Send,
	}
	e.ds = newDSDelivery(e)
	e.x = &executor{
		clock:          cfg.clock,
		keys:           e.keys,
		cursors:        &e.core.rules,
		source:         source,
		callbackPrefix: cfg.callbackBase.String() + callbackSegment,
		client: &http.Client{
			Transport: transport,
			// Redirects are not followed: a 3xx is a failed delivery, and
			// cannot steer the engine to an address the policy forbids.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		policy:          policy,
		propagator:      cfg.propagator,
		handlers:        cfg.handlers,
		log:             cfg.logger,
		handlerReturned: e.signals.handlerReturned.Send,
		receiptDeferred: e.signals.receiptDeferred.Send,
	}
	e.outcomes = &outcomes{
		store:        store,
		clock:        cfg.clock,
		log:          cfg.logger,
		tel:          tel,
		breaker:      cfg.breaker,
		updated:      func(sub *Subscription) { e.subs.update(sub) },
		disabledHook: cfg.disabledHook,
		attemptLog:   newAttemptLog(store, cfg.deliveryLogKeep, tel, cfg.clock, e.signals.attemptLogged.Send),
		failures:     newFailureLog(cfg.logger, cfg.clock),
	}
	e.pipeline = &pipeline{
		clock:        cfg.clock,
		log:          cfg.logger,
		tel:          tel,
		core:         &e.core,
		x:            e.x,
		outcomes:     e.outcomes,
		subscription: e.subscription,
		latest:       e.latest,
		ended:        e.signals.attemptEnded.Send,
	}
	e.pipeline.lanes = newLanes(cfg.clock, cfg.maxConcurrentDeliveries, cfg.maxDeliveriesPerHost, e.pipeline.startDelivery)
	e.core.started = e.pipeline.sendStarted
	feed, _ := store.(SubscriptionFeed)
	e.feed = &subscriptionFeed{
		feed:     feed,
		store:    store,
		clock:    cfg.clock,
		log:      cfg.logger,
		reloadDS: func(ctx context.Context) error { return e.ds.reload(ctx) },
		reloaded: func() {
			e.signals.subscriptionsReloaded.Send()
			e.signals.reloadEnded.Send()
		},
	}
	e.outages = newOutageLog(cfg.logger, cfg.clock)
	e.metrics = metrics
	return e, nil
}

// Start loads the token signing key and the subscriptions from the Store
// with ctx, then starts delivering webhooks in the background, and
// following the Store's SubscriptionFeed if it has one: it waits for no
// delivery and no sweep. If loading fails it returns the error and the
// engine stays unstarted, so Start may be called again. Calling it while the
// engine runs does nothing; after Stop it returns ErrStopped. Cancelling ctx
// afterwards does not stop the engine: Stop does.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.stopped:
		return ErrStopped
	case e.running:
		return nil
	}
	// The pipeline takes attempts before load lets the API start them.
	run := context.WithoutCancel(ctx)
	e.pipeline.Start(run)
	if err := e.load(ctx); err != nil {
		e.pipeline.Stop()
		return err
	}
	e.running = true
	e.metrics.Start(ctx)
	e.keys.Start(run)
	e.outcomes.Start(run)
	e.sweep.Start(run)
	e.feed.Start(run)
	e.sched.Start(run)
	e.ds.Start(run)
	e.verifier.Start(run)
	return nil
}

// load reads the token signing key and the webhook signing keys, creating
// them if the Store has none, and the subscriptions, and then lets the handlers and stream methods use them.
func (e *Engine) load(ctx context.Context) error {
	key := e.cfg.tokenKey
	if key == nil {
		fresh := make([]byte, MinTokenKeyLength)
		_, _ = rand.Read(fresh)
		var err error
		if key, err = e.store.LoadOrStoreSigningKey(ctx, fresh); err != nil {
			return fmt.Errorf("webhooks: loading the token signing key: %w", err)
		}
	}
	if err := e.keys.load(ctx); err != nil {
		return err
	}
	if err := e.ds.reload(ctx); err != nil {
		return err
	}
	subs, err := e.store.ListSubscriptions(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: loading subscriptions: %w", err)
	}
	set := newSubscriptionSet()
	if _, _, errs := set.endReload(subs); len(errs) > 0 {
		return fmt.Errorf("webhooks: %w", errs[0])
	}
	e.tokens, e.subs = newTokens(key, e.cfg.tokenTTL, e.clock), set
	e.feed.set, e.sweep.stored = set, set.patterns()
	count := set.countByStatus
	e.tel.subscriptionsByStatus.Store(&count)
	e.x.tokens = e.tokens
	e.loaded.Store(true)
	return nil
}

// checkLoaded refuses a call that arrives before Start has loaded the
// signing key and the subscriptions: ErrNotStarted, which the handlers
// answer 503 so that the client retries.
func (e *Engine) checkLoaded() error {
	if e.loaded.Load() {
		return nil
	}
	return ErrNotStarted
}

// Stop stops the engine and waits, until ctx ends, for its goroutines to
// exit. It starts no delivery, and lets those in flight end and record
// their outcomes, so that a delivery its receiver accepted is not sent
// again by another engine. If ctx ends first, the deliveries still in
// flight are abandoned, and Stop returns ctx's error: their attempts time
// out and are retried by the next engine on the Store. Stop is idempotent.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	running := e.running
	e.stopped = true
	e.mu.Unlock()
	if !running {
		return nil
	}
	e.stopOnce.Do(func() {
		go func() {
			defer close(e.done)
			startstop.StopAll(e.sched, e.ds, e.feed, e.sweep, e.pipeline, e.outcomes, e.keys, e.metrics, e.verifier)
			// Kept-alive webhook connections would otherwise hold up the
			// receivers' graceful shutdown.
			e.x.client.CloseIdleConnections()
		}()
	})
	e.signals.stopWaiting.Send()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		e.pipeline.abandonAttempts()
		return ctx.Err()
	}
}

// StreamCreated tells the engine that the stream at path was created. The
// engine gives it a consumer for every matching subscription, positioned
// before the first event (OffsetNone), and wakes it: a new stream has
// pending work even while empty, since its tail is past OffsetNone. A
// stream created with an initial body needs no separate StreamAppended. A
// path that ValidateStreamPath refuses gets no consumers, and its
// *ValidationError.
// Before Start it returns ErrNotStarted, and Start's sweep does the work.
func (e *Engine) StreamCreated(ctx context.Context, path string) error {
	if err := ValidateStreamPath(path); err != nil {
		return err
	}
	return e.streamChanged(ctx, path)
}

// StreamAppended tells the engine that events were appended to the stream
// at path. Call it after the append is durable: the engine reads the new
// tail from the StreamSource. Before Start it returns ErrNotStarted, and
// Start's sweep does the work. An error that wraps ErrStoreUnavailable
// needs no retry either: the scheduler makes up the event once the Store
// answers again.
func (e *Engine) StreamAppended(ctx context.Context, path string) error {
	if err := ValidateStreamPath(path); err != nil {
		return err
	}
	return e.streamChanged(ctx, path)
}

// streamChanged spawns the consumers path lacks and wakes the IDLE ones
// subscribed to it that now have pending work.
func (e *Engine) streamChanged(ctx context.Context, path string) error {
	if !e.loaded.Load() {
		return fmt.Errorf("%w: %s is left to the start-up sweep", ErrNotStarted, path)
	}
	err := errors.Join(e.spawnAndWake(ctx, path, e.subs.index.match(path), nil), e.ds.streamChanged(ctx, path))
	if errors.Is(err, ErrStoreUnavailable) {
		e.missed.add(path)
	}
	return err
}

// spawnAndWake gives path a consumer for each of subs that lacks one, and
// wakes the IDLE consumers subscribed to path that now have pending work.
// A sweep passes the stream as it listed it (listed), before it read the
// consumers: those that cannot be stranded are then left alone (see
// mayBeStranded) rather than each read and locked again in UpdateConsumer.
func (e *Engine) spawnAndWake(ctx context.Context, path string, subs []string, listed *StreamInfo) error {
	if err := ValidateStreamPath(path); err != nil {
		return fmt.Errorf("webhooks: %w: it gets no consumers", err)
	}
	existing, err := e.store.ConsumersByStream(ctx, path)
	if err != nil {
		return fmt.Errorf("webhooks: consumers of %s: %w", path, err)
	}
	// Consumers whose primary stream is path are looked at too, even if
	// they unsubscribed from it: the start-up sweep reaches every consumer
	// through its primary stream, and wakeIfPending only counts the streams
	// a consumer is subscribed to.
	type consumerOf struct{ id, sub string }
	toWake := make([]consumerOf, 0, len(existing))
	for _, c := range existing {
		if listed == nil || mayBeStranded(c, *listed) {
			toWake = append(toWake, consumerOf{c.ID, c.SubscriptionID})
		}
	}
	var errs []error
	for _, sub := range subs {
		id := ConsumerID(sub, path)
		if slices.ContainsFunc(existing, func(c *Consumer) bool { return c.ID == id }) {
			continue
		}
		err := e.store.CreateConsumer(ctx, newConsumer(sub, path, OffsetNone, e.clock.Now()))
		e.signals.consumerWritten.Send()
		switch {
		case err == nil, errors.Is(err, ErrConsumerExists):
			toWake = append(toWake, consumerOf{id, sub})
		case errors.Is(err, ErrSubscriptionNotFound):
		default:
			errs = append(errs, fmt.Errorf("webhooks: creating consumer %s: %w", id, err))
		}
	}
	for _, c := range toWake {
		if err := e.startIfPending(ctx, c.id, c.sub); err != nil {
			errs = append(errs, fmt.Errorf("webhooks: waking consumer %s: %w", c.id, err))
		}
	}
	return errors.Join(errs...)
}

// mayBeStranded reports whether c, read after st was listed, may be IDLE
// with pending work that no call will wake it for. One in a cycle is not:
// its return to IDLE reads the tails and wakes it again if work is pending.
// Nor is one whose only stream is st and that had acked st's listed tail:
// a later append calls StreamAppended, or moves the tail that the stream
// sweep compares with this listing. One with other streams is looked at
// in its update, which reads all its streams' tails.
func mayBeStranded(c *Consumer, st StreamInfo) bool {
	if c.State != StateIdle {
		return false
	}
	for _, so := range c.Streams {
		if so.Path != st.Path {
			return true
		}
	}
	return len(pendingStreams(c, tails{st.Path: st})) > 0
}

// startIfPending starts delivering the pending work of consumer id, of
// subscription sub, if it is IDLE.
func (e *Engine) startIfPending(ctx context.Context, id, subID string) error {
	sub, err := e.subscription(ctx, subID)
	if errors.Is(err, ErrSubscriptionNotFound) {
		return nil // its consumers went with it
	}
	if err != nil {
		return err
	}
	return e.core.startPending(ctx, id, sub)
}

// StreamDeleted tells the engine that the stream at path was deleted. The
// consumers whose primary stream it was are removed; others drop it from
// their streams, and are removed if it was their last. Every `__ds`
// subscription drops its link of the stream, glob or explicit, so that a
// stream created again at path is linked afresh. It works before
// Start too: no sweep looks for deleted streams. An error that wraps
// ErrStoreUnavailable needs no retry: once the Store answers again the
// scheduler removes the stream from the consumers that existed at the
// deletion, and not from those a new stream at path has since.
func (e *Engine) StreamDeleted(ctx context.Context, path string) error {
	at := e.clock.Now()
	err := errors.Join(e.removeStream(ctx, path, time.Time{}), e.ds.streamDeleted(ctx, path, false))
	if errors.Is(err, ErrStoreUnavailable) {
		e.missed.addDeleted(path, at)
	}
	return err
}

// removeStream removes the stream at path from its consumers, and those
// whose primary stream it was, or whose last stream, with it. If before
// is set it leaves alone the consumers created after it.
func (e *Engine) removeStream(ctx context.Context, path string, before time.Time) error {
	consumers, err := e.store.ConsumersByStream(ctx, path)
	if err != nil {
		return fmt.Errorf("webhooks: consumers of %s: %w", path, err)
	}
	var errs []error
	for _, c := range consumers {
		_, err := e.core.update(ctx, c.ID, func(c *Consumer) (change, error) {
			return e.core.rules.removeStream(c, path, before), nil
		})
		if err != nil && !errors.Is(err, ErrConsumerNotFound) {
			errs = append(errs, fmt.Errorf("webhooks: removing %s from consumer %s: %w", path, c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Handler returns a handler that serves the reserved `__ds` API under
// "{stream root}/__ds/" (WithStreamRoot) before anything else, as the
// Durable Streams protocol requires, the callback API under
// "{base path}/callback/", the subscription API for requests with a
// "subscription" or "subscriptions" query parameter, and passes every other
// request to next.
func (e *Engine) Handler(next http.Handler) http.Handler {
	callbacks := e.CallbackHandler()
	subscriptions := e.SubscriptionHandler()
	reserved := e.ReservedHandler()
	prefix := e.cfg.callbackBase.Path + callbackSegment
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case e.isReservedRequest(r):
			reserved.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, prefix):
			callbacks.ServeHTTP(w, r)
		case isSubscriptionRequest(r):
			subscriptions.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
