package webhooks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the engine's tracer and meter.
const instrumentationName = "github.com/streamhooks/webhooks"

// Delivery outcomes, as recorded on spans and metrics.
const (
	outcomeOK        = "ok"         // 2xx
	outcomeDone      = "done"       // 2xx with {"done": true}
	outcomeHTTPError = "http_error" // non-2xx
	outcomeTimeout   = "timeout"    // no response within the request timeout
	outcomeError     = "error"      // network error, refused dial, ...
	// outcomeHandlerError is a BatchHandler's error or panic.
	outcomeHandlerError = "handler_error"
	// outcomeBadAck is a 2xx that acknowledged up to an offset outside
	// its batch (AckResponse).
	outcomeBadAck = "bad_ack"
)

// telemetry holds the engine's OpenTelemetry instruments.
type telemetry struct {
	tracer          trace.Tracer
	wakes           metric.Int64Counter
	batches         metric.Int64Counter
	deliveries      metric.Int64Counter
	failures        metric.Int64Counter
	deliveryLatency metric.Float64Histogram
	callbacks       metric.Int64Counter
	disabledSubs    metric.Int64Counter
	operations      metric.Int64Counter
	logDropped      metric.Int64Counter
	consumers       metric.Int64ObservableGauge
	retries         metric.Int64Counter
	batchEvents     metric.Int64Histogram
	subscriptions   metric.Int64ObservableGauge
	oldestDue       metric.Float64ObservableGauge
	registration    metric.Registration

	// labels names the subscriptions the metrics carry, if any.
	labels *subscriptionLabels
	// subscriptionsByStatus counts the engine's subscriptions, once
	// Start has loaded them; nil before.
	subscriptionsByStatus atomic.Pointer[func() map[SubscriptionStatus]int]

	// byOutcome and byCode hold the measurement options of each outcome
	// and callback code, built once: an attribute set costs a sort and
	// allocations.
	byOutcome sync.Map // outcome, or outcome and subscription label → *measureOpts
	byCode    sync.Map // string → *measureOpts
	bySub     sync.Map // subscription label → *measureOpts
}

// measureOpts are the options of a measurement with one attribute, as
// the variadic arguments of Add and Record, which only read them.
type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// optsFor returns the options of a measurement whose attribute key has
// value, from cache.
func optsFor(cache *sync.Map, key, value string) *measureOpts {
	if o, ok := cache.Load(value); ok {
		return o.(*measureOpts)
	}
	return storeOpts(cache, value, attribute.String(key, value))
}

// storeOpts caches, under key, the options of a measurement with attrs.
func storeOpts(cache *sync.Map, key string, attrs ...attribute.KeyValue) *measureOpts {
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o, _ := cache.LoadOrStore(key, &measureOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}})
	return o.(*measureOpts)
}

// subOpts returns the options of a measurement for subscription sub, with
// key=value as well unless key is empty: a "subscription_id" attribute
// if the engine labels sub, with a "tenant" one if it has a tenant, and
// none without WithSubscriptionMetrics. A subscription has one tenant, so
// the tenant adds no series; OtherSubscriptions carries none, so that
// tenants do not multiply its series.
func (t *telemetry) subOpts(cache *sync.Map, sub *Subscription, key, value string) *measureOpts {
	label := t.labels.of(sub.ID)
	if label == "" {
		if key == "" {
			return noOpts
		}
		return optsFor(cache, key, value)
	}
	tenant := sub.Tenant
	if label == OtherSubscriptions {
		tenant = ""
	}
	k := value + "\x00" + label + "\x00" + tenant
	if o, ok := cache.Load(k); ok {
		return o.(*measureOpts)
	}
	attrs := []attribute.KeyValue{attribute.String("subscription_id", label)}
	if tenant != "" {
		attrs = append(attrs, attribute.String("tenant", tenant))
	}
	if key != "" {
		attrs = append(attrs, attribute.String(key, value))
	}
	return storeOpts(cache, k, attrs...)
}

// noOpts are the options of a measurement without attributes.
var noOpts = &measureOpts{}

// OtherSubscriptions is the subscription_id label of the subscriptions
// past WithSubscriptionMetrics's limit.
const OtherSubscriptions = "other"

// subscriptionLabels gives the first max subscription ids it is asked
// about a label of their own, and folds the rest into OtherSubscriptions,
// so that a metric's series stay bounded however many subscriptions come
// and go.
type subscriptionLabels struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool
}

// of returns the label of subscription id: "" when labels are off (nil).
func (l *subscriptionLabels) of(id string) string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[id] {
		return id
	}
	if len(l.seen) < l.max {
		l.seen[id] = true
		return id
	}
	return OtherSubscriptions
}

// newTelemetry sets up the instruments. The gauge of consumers counts the
// whole Store, so only the instance that holds metrics reports it.
func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, store Store, metrics *lease, labelSubs int, clk clock.Clock) (*telemetry, error) {
	meter := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName)}
	if labelSubs > 0 {
		t.labels = &subscriptionLabels{max: labelSubs, seen: make(map[string]bool)}
	}
	var err error
	if t.wakes, err = meter.Int64Counter("webhooks.wakes",
		metric.WithDescription("Wake cycles started.")); err != nil {
		return nil, err
	}
	if t.batches, err = meter.Int64Counter("webhooks.batches",
		metric.WithDescription("Event-push batches started.")); err != nil {
		return nil, err
	}
	if t.deliveries, err = meter.Int64Counter("webhooks.delivery.attempts",
		metric.WithDescription("Webhook delivery attempts, by outcome.")); err != nil {
		return nil, err
	}
	if t.failures, err = meter.Int64Counter("webhooks.delivery.failures",
		metric.WithDescription("Failed webhook delivery attempts, by error class.")); err != nil {
		return nil, err
	}
	if t.deliveryLatency, err = meter.Float64Histogram("webhooks.delivery.duration",
		metric.WithDescription("Time from sending a webhook to its outcome."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if t.callbacks, err = meter.Int64Counter("webhooks.callbacks",
		metric.WithDescription("Callback requests, by response code.")); err != nil {
		return nil, err
	}
	if t.disabledSubs, err = meter.Int64Counter("webhooks.subscriptions.disabled",
		metric.WithDescription("Subscriptions the engine disabled: 410 Gone or the circuit breaker.")); err != nil {
		return nil, err
	}
	if t.operations, err = meter.Int64Counter("webhooks.operations",
		metric.WithDescription("Operator actions done, by operation.")); err != nil {
		return nil, err
	}
	if t.logDropped, err = meter.Int64Counter("webhooks.delivery_log.dropped",
		metric.WithDescription("Delivery attempts left out of the delivery log: its writer fell behind.")); err != nil {
		return nil, err
	}
	if t.consumers, err = meter.Int64ObservableGauge("webhooks.consumers",
		metric.WithDescription("Consumers, by state.")); err != nil {
		return nil, err
	}
	if t.retries, err = meter.Int64Counter("webhooks.delivery.retries",
		metric.WithDescription("Delivery attempts after the first of their wake or batch.")); err != nil {
		return nil, err
	}
	if t.batchEvents, err = meter.Int64Histogram("webhooks.batch.events",
		metric.WithDescription("Events in an event-push batch, at its first attempt."), metric.WithUnit("{event}"),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)); err != nil {
		return nil, err
	}
	if t.subscriptions, err = meter.Int64ObservableGauge("webhooks.subscriptions",
		metric.WithDescription("Subscriptions, by status.")); err != nil {
		return nil, err
	}
	if t.oldestDue, err = meter.Float64ObservableGauge("webhooks.pending.oldest_age",
		metric.WithDescription("How long the earliest due deadline (a wake, batch, retry or timeout) has waited for the scheduler; 0 when none is due."),
		metric.WithUnit("s")); err != nil {
		return nil, err
	}
	t.registration, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if !metrics.holds() {
			return nil
		}
		if count := t.subscriptionsByStatus.Load(); count != nil {
			counts := (*count)()
			for _, status := range []SubscriptionStatus{StatusActive, StatusPaused, StatusDisabled, StatusPending} {
				o.ObserveInt64(t.subscriptions, int64(counts[status]), metric.WithAttributes(attribute.String("status", string(status))))
			}
		}
		counts, err := store.CountConsumers(ctx)
		if err != nil {
			return err
		}
		for _, state := range []ConsumerState{StateIdle, StateWaking, StateLive, StateFailed} {
			o.ObserveInt64(t.consumers, int64(counts[state]), metric.WithAttributes(attribute.String("state", string(state))))
		}
		next, ok, err := store.NextDeadline(ctx)
		if err != nil {
			return err
		}
		age := 0.0
		if now := clk.Now(); ok && next.Before(now) {
			age = now.Sub(next).Seconds()
		}
		o.ObserveFloat64(t.oldestDue, age)
		return nil
	}, t.consumers, t.subscriptions, t.oldestDue)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// started counts a wake cycle, or an event-push batch, which c has just
// started.
func (t *telemetry) started(ctx context.Context, c *Consumer) {
	if c.Batch != (ReadLimit{}) {
		t.batches.Add(ctx, 1)
		return
	}
	t.wakes.Add(ctx, 1)
}

// batchSent records the size of c's batch, of sub, at its first attempt.
func (t *telemetry) batchSent(ctx context.Context, c *Consumer, sub *Subscription, events int) {
	if c.Attempt == 1 {
		t.batchEvents.Record(ctx, int64(events), t.subOpts(&t.bySub, sub, "", "").record...)
	}
}

// delivered records the outcome of a delivery attempt for c, of sub, and
// its failure if it failed.
func (t *telemetry) delivered(ctx context.Context, span trace.Span, c *Consumer, sub *Subscription, outcome string, failure *deliveryFailure, took time.Duration) {
	opts := t.subOpts(&t.byOutcome, sub, "outcome", outcome)
	t.deliveries.Add(ctx, 1, opts.add...)
	t.deliveryLatency.Record(ctx, took.Seconds(), opts.record...)
	if c.Attempt > 1 {
		t.retries.Add(ctx, 1, t.subOpts(&t.bySub, sub, "", "").add...)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("webhooks.outcome", outcome))
	}
	if failure != nil {
		span.SetAttributes(attribute.String("webhooks.error_class", string(failure.class)))
	}
	if outcome != outcomeOK && outcome != outcomeDone {
		span.SetStatus(codes.Error, outcome)
	}
}

// attemptFailed counts one failed delivery attempt by its error class.
func (t *telemetry) attemptFailed(ctx context.Context, class failureClass) {
	t.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("error_class", string(class))))
}

func (t *telemetry) callbackDone(ctx context.Context, span trace.Span, code string) {
	t.callbacks.Add(ctx, 1, optsFor(&t.byCode, "code", code).add...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("webhooks.code", code))
	}
	if code != "OK" {
		span.SetStatus(codes.Error, code)
	}
}

// deliveryAttrs are the span attributes of an attempt of c, of sub.
func deliveryAttrs(c *Consumer, sub *Subscription) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("webhooks.consumer_id", c.ID),
		attribute.Int64("webhooks.epoch", c.Epoch),
		attribute.String("webhooks.wake_id", c.WakeID),
		attribute.Int("webhooks.attempt", c.Attempt),
	}
	if sub.Tenant != "" {
		attrs = append(attrs, attribute.String("webhooks.tenant", sub.Tenant))
	}
	return attrs
}

// disabled counts a subscription the engine disabled.
func (t *telemetry) disabled(ctx context.Context) { t.disabledSubs.Add(ctx, 1) }

// operated counts an operator action.
func (t *telemetry) operated(ctx context.Context, op string) {
	t.operations.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", op)))
}

// countByStatus counts the subscriptions of s by status.
func (s *subscriptionSet) countByStatus() map[SubscriptionStatus]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	counts := make(map[SubscriptionStatus]int, 4)
	for _, e := range s.entries {
		counts[e.sub.status()]++
	}
	return counts
}
