package inbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	webhooks "github.com/streamhooks/webhooks"
)

// errNotARecord refuses to replay a dead letter that holds no record.
var errNotARecord = errors.New("inbox: the dead letter holds an event that was never a record; it cannot be replayed")

// maxErrorHistory bounds the errors a dead letter keeps, the latest.
const maxErrorHistory = 32

// RecordHandler processes one verified record. An error leaves the record
// to be tried again (see Processor).
type RecordHandler func(ctx context.Context, rec *Record) error

// DeadLetter is what a Processor appends to a provider's dead-letter
// stream: the record as it was received, and why it was set aside.
type DeadLetter struct {
	Record
	// Reason says why: the signature's failure, or the last error after
	// the record's attempts.
	Reason string `json:"reason"`
	// Errors are the record's handler errors, oldest first, as this
	// process saw them: attempts made before a restart are counted in
	// Reason but not listed.
	Errors []string  `json:"errors,omitempty"`
	DeadAt time.Time `json:"dead_at"`
	// Raw is the event as stored, for one that is not a record of the
	// stream's provider: its Record then holds only that Provider, and it
	// cannot be replayed.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Processor processes inbox records. It is the webhooks.BatchHandler of a
// webhooks.DeliveryHandler subscription on the inbox streams, registered
// with webhooks.WithBatchHandler: the engine delivers it each stream's
// records in order, in batches, calling it in-process, so that no loopback
// URL needs an exemption from the engine's SSRF policy and no second
// signature is made and checked, and its cursor, retries, dead letters and
// delivery log apply unchanged. A batch is acknowledged only when each of
// its records has been dealt with, so a crash or an error before then
// delivers the batch again: nothing received is lost.
//
// For each record of a batch, in order, the Processor:
//   - skips a record, or a verified delivery id, that it has dealt with
//     within its dedup window (WithDedup);
//   - verifies the record with its provider's Scheme; one that fails is
//     appended to the provider's dead-letter stream with the reason, and
//     is never processed or retried;
//   - calls the RecordHandler registered for its provider and event type
//     (Handle); a record that no handler takes is acknowledged unprocessed;
//   - on the handler's error, fails the batch, which the engine retries on
//     the subscription's schedule, from this record, the ones before it
//     being skipped. If the attempt was the batch's last
//     (webhooks.Batch.MaxAttempts), it appends the record to the dead-letter
//     stream with its errors instead and goes on, so that one record does
//     not stop its stream; Replay processes it again.
//
// A record's attempts are its batch's, so that the count is durable: give
// the subscription a batch size of 1 for each record to get all its
// attempts whatever the others do. An event that is not a record of the
// stream's provider (not JSON, not a record, another provider's) is a dead
// letter with the reason and the event as stored (DeadLetter.Raw), so that
// one bad event never blocks the others; an event of a stream that is no
// provider's is skipped, and logged.
//
// Deduplication is in memory, per Processor, within its window and
// capacity (WithDedup); it does not survive a restart and is not shared
// between instances. What holds everywhere is the engine's durable cursor:
// a record whose batch was acknowledged is never delivered again, by any
// instance. So a record is processed again only when
//   - its batch was not acknowledged (a crash, a Stop, a lost
//     acknowledgement, a later record's error) and another instance, or
//     this one after a restart, gets the batch again: the records it had
//     dealt with are processed again;
//   - the Handler appended a delivery twice (a sender's retry that reached
//     another instance, or came after the Handler's window), and the two
//     records are processed by different processes, or by this one more
//     than its window or capacity apart;
//   - it is replayed (Replay): each replay is processed once, on purpose.
//
// Delivery is therefore at least once: handlers must be idempotent by
// Record.DeliveryID. The host creates each provider's dead-letter stream,
// as a JSON stream, before the first dead letter.
type Processor struct {
	appender  Appender
	providers map[string]*provider
	clock     clock.Clock
	log       *slog.Logger
	done      *dedup
	daily     bool

	mu       sync.Mutex
	handlers map[handlerKey]RecordHandler
	errs     map[idKey][]string // the errors of records that have failed and not yet been dealt with
	locks    map[string]chan struct{}
}

type handlerKey struct{ provider, eventType string }

// NewProcessor returns a Processor of the providers' records that appends
// dead letters and replays through appender. WithClock, WithLogger and
// WithDedup apply; WithDedup sets how long, and how many, dealt-with
// records and delivery ids are remembered.
func NewProcessor(appender Appender, providers []Provider, opts ...Option) (*Processor, error) {
	// New checks the same things, and the providers are the Handler's.
	h, err := New(appender, providers, opts...)
	if err != nil {
		return nil, err
	}
	return &Processor{
		appender:  appender,
		providers: h.providers,
		clock:     h.clock,
		log:       h.log,
		done:      h.seen,
		daily:     h.daily,
		handlers:  make(map[handlerKey]RecordHandler),
		errs:      make(map[idKey][]string),
		locks:     make(map[string]chan struct{}),
	}, nil
}

// Handle registers h for the records of provider whose event type
// (EventType) is eventType, or for every other of its records if eventType
// is "".
func (p *Processor) Handle(provider, eventType string, h RecordHandler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handlers[handlerKey{provider, eventType}] = h
}

// EventType is a record's event type: GitHub's X-GitHub-Event header, or
// else the "type" field of a JSON object body, as Stripe and Standard
// Webhooks send it; "" if it has neither.
func EventType(rec *Record) string {
	if t := rec.Header.Get("X-GitHub-Event"); t != "" {
		return t
	}
	return jsonField(rec.Body, "type")
}

// HandleBatch processes the records of b in order; it is the
// webhooks.BatchHandler to register.
func (p *Processor) HandleBatch(ctx context.Context, b *webhooks.Batch) error {
	// One batch of a stream at a time: a handler the engine abandoned at
	// its timeout may still run when the batch comes again.
	lock := p.lock(b.Stream)
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-lock }()
	for _, raw := range b.Events {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.process(ctx, b, raw); err != nil {
			return err
		}
	}
	return nil
}

func (p *Processor) lock(stream string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.locks[stream]
	if l == nil {
		l = make(chan struct{}, 1)
		p.locks[stream] = l
	}
	return l
}

// process deals with one record of b, raw as stored: it returns an error
// only to fail the batch.
func (p *Processor) process(ctx context.Context, b *webhooks.Batch, raw []byte) error {
	owner := p.owner(b.Stream)
	if owner == nil {
		// Not a provider's stream: there is nothing to process it with,
		// nor a dead-letter stream for it; it stays where it is.
		p.log.WarnContext(ctx, "inbox: skipped an event of a stream that is no provider's", "stream", b.Stream)
		return nil
	}
	rawKey := string(raw)
	now := p.clock.Now()
	if p.seen(owner.name, rawKey, now) {
		return nil
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return p.buryRaw(ctx, owner, raw, fmt.Sprintf("not a record: %v", err), now)
	}
	prov := p.providers[rec.Provider]
	if prov == nil || !holds(prov.stream, b.Stream) {
		return p.buryRaw(ctx, owner, raw, fmt.Sprintf("a record for provider %q in the stream of %q", rec.Provider, owner.name), now)
	}
	if prov != owner && p.seen(prov.name, rawKey, now) { // providers that share a stream
		return nil
	}
	if err := prov.scheme.Verify(&rec); err != nil {
		if err := p.bury(ctx, prov, &rec, err.Error(), nil); err != nil {
			return err
		}
		p.remember(prov.name, rawKey, "", now)
		return nil
	}
	// A replay is processed again on purpose, whatever its delivery id.
	if rec.DeliveryID != "" && rec.Replay == "" && p.seen(prov.name, rec.DeliveryID, now) {
		p.remember(prov.name, rawKey, "", now)
		return nil
	}
	err := p.call(ctx, &rec)
	if err == nil {
		p.settle(prov.name, rawKey, rec.DeliveryID, now)
		return nil
	}
	history := p.failed(prov.name, rawKey, err)
	if b.MaxAttempts > 0 && b.Attempt >= b.MaxAttempts {
		reason := fmt.Sprintf("failed %d attempts: %v", b.Attempt, err)
		if err := p.bury(ctx, prov, &rec, reason, history); err != nil {
			return err
		}
		p.settle(prov.name, rawKey, rec.DeliveryID, now)
		return nil
	}
	return fmt.Errorf("%s record %s: %w", prov.name, rec.DeliveryID, err)
}

// call calls the record's handler, if it has one, turning a panic into an
// error.
func (p *Processor) call(ctx context.Context, rec *Record) (err error) {
	p.mu.Lock()
	h := p.handlers[handlerKey{rec.Provider, EventType(rec)}]
	if h == nil {
		h = p.handlers[handlerKey{rec.Provider, ""}]
	}
	p.mu.Unlock()
	if h == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, rec)
}

// bury appends rec to its provider's dead-letter stream.
func (p *Processor) bury(ctx context.Context, prov *provider, rec *Record, reason string, errs []string) error {
	return p.append(ctx, prov, &DeadLetter{Record: *rec, Reason: reason, Errors: errs, DeadAt: p.clock.Now().UTC()})
}

// append appends d to prov's dead-letter stream.
func (p *Processor) append(ctx context.Context, prov *provider, d *DeadLetter) error {
	data, err := json.Marshal(d)
	stream := p.at(prov.dead)
	if err == nil {
		err = p.appender.Append(ctx, stream, data)
	}
	if err != nil {
		return fmt.Errorf("inbox: appending a dead letter to %s: %w", stream, err)
	}
	p.log.WarnContext(ctx, "inbox: a record is a dead letter",
		"provider", prov.name, "delivery_id", d.DeliveryID, "stream", stream, "reason", d.Reason)
	return nil
}

// at is where to append to stream now: its partition of today with
// WithDailyPartitions.
func (p *Processor) at(stream string) string {
	if p.daily {
		return partition(stream, p.clock.Now())
	}
	return stream
}

// owner returns the provider whose records stream, or one of its
// partitions, is stream, the first by name if several share it, or nil.
func (p *Processor) owner(stream string) *provider {
	var first *provider
	for _, prov := range p.providers {
		if holds(prov.stream, stream) && (first == nil || prov.name < first.name) {
			first = prov
		}
	}
	return first
}

// buryRaw appends raw, an event of owner's stream that is not one of its
// records, to owner's dead-letter stream, and notes it as dealt with.
func (p *Processor) buryRaw(ctx context.Context, owner *provider, raw []byte, reason string, now time.Time) error {
	if !json.Valid(raw) {
		raw, _ = json.Marshal(string(raw)) // a JSON stream's events are JSON; this is defence
	}
	d := DeadLetter{Record: Record{Provider: owner.name}, Reason: reason, DeadAt: p.clock.Now().UTC(), Raw: raw}
	if err := p.append(ctx, owner, &d); err != nil {
		return err
	}
	p.remember(owner.name, string(raw), "", now)
	return nil
}

// Replay appends the record of dead, a dead letter as read from a
// dead-letter stream, to its provider's records stream again, as a new
// record (Record.Replay), so that the Processor processes it whatever it
// remembers of the original, and skips no delivery id for it. The Scheme
// verifies it again, against the time it was first received.
func (p *Processor) Replay(ctx context.Context, dead []byte) error {
	var d DeadLetter
	if err := json.Unmarshal(dead, &d); err != nil {
		return fmt.Errorf("inbox: not a dead letter: %w", err)
	}
	prov := p.providers[d.Provider]
	if prov == nil {
		return fmt.Errorf("inbox: no provider %q", d.Provider)
	}
	if d.Raw != nil {
		return errNotARecord
	}
	d.Record.Replay = rand.Text()
	record, err := json.Marshal(d.Record)
	if err != nil {
		return err
	}
	return p.appender.Append(ctx, p.at(prov.stream), record)
}

// seen reports whether key, a record or a delivery id, was dealt with.
func (p *Processor) seen(provider, key string, now time.Time) bool {
	return p.done != nil && p.done.has(provider, key, now)
}

// remember notes that the record and its delivery id, if given, were
// dealt with.
func (p *Processor) remember(provider, rawKey, id string, now time.Time) {
	if p.done == nil {
		return
	}
	p.done.add(provider, rawKey, now)
	if id != "" {
		p.done.add(provider, id, now)
	}
}

// settle remembers a record whose handler is done with it, and drops its
// errors.
func (p *Processor) settle(provider, rawKey, id string, now time.Time) {
	p.remember(provider, rawKey, id, now)
	p.mu.Lock()
	delete(p.errs, keyOf(provider, rawKey))
	p.mu.Unlock()
}

// failed adds err to the record's errors, and returns them.
func (p *Processor) failed(provider, rawKey string, err error) []string {
	k := keyOf(provider, rawKey)
	p.mu.Lock()
	defer p.mu.Unlock()
	h := append(p.errs[k], err.Error())
	if len(h) > maxErrorHistory {
		h = h[len(h)-maxErrorHistory:]
	}
	p.errs[k] = h
	return append([]string(nil), h...)
}
