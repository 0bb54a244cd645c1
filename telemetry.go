package webhooks

import (
	"context"
	"sync"
	"time"

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
	registration    metric.Registration

	// byOutcome and byCode hold the measurement options of each outcome
	// and callback code, built once: an attribute set costs a sort and
	// allocations.
	byOutcome sync.Map // string → *measureOpts
	byCode    sync.Map // string → *measureOpts
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
	set := metric.WithAttributeSet(attribute.NewSet(attribute.String(key, value)))
	o, _ := cache.LoadOrStore(value, &measureOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}})
	return o.(*measureOpts)
}

// newTelemetry sets up the instruments. The gauge of consumers counts the
// whole Store, so only the instance that holds metrics reports it.
func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, store Store, metrics *lease) (*telemetry, error) {
	meter := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName)}
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
	t.registration, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if !metrics.holds() {
			return nil
		}
		counts, err := store.CountConsumers(ctx)
		if err != nil {
			return err
		}
		for _, state := range []ConsumerState{StateIdle, StateWaking, StateLive, StateFailed} {
			o.ObserveInt64(t.consumers, int64(counts[state]), metric.WithAttributes(attribute.String("state", string(state))))
		}
		return nil
	}, t.consumers)
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

// delivered records a delivery attempt's outcome, and its failure if it
// failed.
func (t *telemetry) delivered(ctx context.Context, span trace.Span, outcome string, failure *deliveryFailure, took time.Duration) {
	opts := optsFor(&t.byOutcome, "outcome", outcome)
	t.deliveries.Add(ctx, 1, opts.add...)
	t.deliveryLatency.Record(ctx, took.Seconds(), opts.record...)
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

func consumerAttrs(c *Consumer) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("webhooks.consumer_id", c.ID),
		attribute.Int64("webhooks.epoch", c.Epoch),
		attribute.String("webhooks.wake_id", c.WakeID),
		attribute.Int("webhooks.attempt", c.Attempt),
	}
}

// disabled counts a subscription the engine disabled.
func (t *telemetry) disabled(ctx context.Context) { t.disabledSubs.Add(ctx, 1) }

// operated counts an operator action.
func (t *telemetry) operated(ctx context.Context, op string) {
	t.operations.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", op)))
}
