package webhooks

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// Sentinel errors returned by Store implementations. Match them with errors.Is.
var (
	ErrSubscriptionNotFound = errors.New("webhooks: subscription not found")
	ErrSubscriptionExists   = errors.New("webhooks: subscription already exists")
	ErrConsumerNotFound     = errors.New("webhooks: consumer not found")
	ErrConsumerExists       = errors.New("webhooks: consumer already exists")
	// ErrStoreUnavailable marks an error meaning the Store's backend cannot
	// be reached right now (a lost connection, a refused dial, a timeout):
	// the same call may succeed later. Stores wrap it around such errors;
	// the engine's APIs answer them 503 SERVICE_UNAVAILABLE, not 500.
	ErrStoreUnavailable = errors.New("webhooks: store unavailable")
)

// Store keeps subscriptions and consumer state. The engine holds no consumer
// state in memory: every transition is one UpdateConsumer call, so a Store
// that is durable makes the engine crash-safe.
//
// Engines may share a Store that implements SubscriptionFeed: each learns
// through the feed of the subscriptions created and deleted through the
// others, after the window SubscriptionFeed describes, and its scheduler
// finds the deadlines the others store within its poll interval
// (WithPollInterval). Without the feed an engine loads the subscriptions
// once, at Start, and learns of later ones only through its own
// subscription API, so engines must not share such a Store. memstore,
// sqlitestore and pgstore implement the feed.
//
// Implementations must be safe for concurrent use. Values passed in and
// returned are owned by the caller: a Store must copy what it keeps. An
// error meaning the backend cannot be reached right now wraps
// ErrStoreUnavailable.
//
// A durable Store keeps in columns only the consumer fields it indexes or
// queries: ID, SubscriptionID, PrimaryStream, State, Deadline, and the paths
// of Streams, by which ConsumersByStream finds a consumer. It stores the
// rest as the one opaque value of Consumer.MarshalData, and reads a
// consumer back by setting the indexed fields from its columns and calling
// UnmarshalData, which sets every other field. The engine versions that
// value, so a field added to Consumer needs no migration in the Store.
//
// The whole contract of a backend is in the store*.go files: this
// interface, the optional capabilities a Store may add (SubscriptionFeed,
// Leaser, DeliveryLog) and the types they carry, and the codecs only
// backends call (MarshalData and UnmarshalData of Consumer, Subscription
// and DeliveryAttempt). storetest checks a backend against all of it.
type Store interface {
	// CreateSubscription stores sub. It returns ErrSubscriptionExists if a
	// subscription with the same ID exists.
	CreateSubscription(ctx context.Context, sub *Subscription) error
	// GetSubscription returns ErrSubscriptionNotFound if there is no such
	// subscription.
	GetSubscription(ctx context.Context, id string) (*Subscription, error)
	// ListSubscriptions returns every subscription, ordered by ID.
	ListSubscriptions(ctx context.Context) ([]*Subscription, error)
	// UpdateSubscription is an atomic read-modify-write of one
	// subscription. It calls fn with a copy of the stored subscription and
	// stores what fn leaves, except ID, Pattern and CreatedAt, which never
	// change. If fn returns an error nothing changes and UpdateSubscription
	// returns that error. It returns ErrSubscriptionNotFound, without
	// calling fn, if there is no such subscription, and otherwise the
	// subscription as stored afterwards. fn may run more than once, each
	// time on a fresh copy. A Store with a SubscriptionFeed reports the
	// change to its watchers as it does a create.
	UpdateSubscription(ctx context.Context, id string, fn func(s *Subscription) error) (*Subscription, error)
	// DeleteSubscription removes the subscription and, atomically with it,
	// every consumer it owns. It returns ErrSubscriptionNotFound if there is
	// no such subscription.
	DeleteSubscription(ctx context.Context, id string) error

	// CreateConsumer stores c. It returns ErrConsumerExists if the ID is taken
	// and ErrSubscriptionNotFound if c's subscription does not exist, so that
	// a consumer never outlives a concurrent subscription delete.
	CreateConsumer(ctx context.Context, c *Consumer) error
	// GetConsumer returns ErrConsumerNotFound if there is no such consumer.
	GetConsumer(ctx context.Context, id string) (*Consumer, error)
	// UpdateConsumer is an atomic read-modify-write of one consumer. It calls
	// fn with a private copy of the stored consumer and then stores, keeps or
	// deletes it as fn's action says. No other UpdateConsumer or delete of the
	// same consumer may take effect between the read fn sees and the write:
	// implementations lock the consumer (or its row) for the duration of fn.
	// If fn returns an error nothing changes and UpdateConsumer returns that
	// error. It returns ErrConsumerNotFound, without calling fn, if there is
	// no such consumer. It returns the consumer as stored afterwards, or nil
	// if it was deleted.
	//
	// fn may run more than once, as a database may retry a transaction that
	// conflicted, each time on a fresh copy: it must be a pure function of
	// the consumer it is given and what it reads. The engine's fn reads the
	// StreamSource while the consumer is locked, so a slow StreamSource
	// holds the lock that long.
	UpdateConsumer(ctx context.Context, id string, fn func(c *Consumer) (UpdateAction, error)) (*Consumer, error)
	// ConsumersByStream returns every consumer whose primary stream is path
	// or whose Streams include path, ordered by ID.
	ConsumersByStream(ctx context.Context, path string) ([]*Consumer, error)
	// DueConsumers returns up to limit consumers whose Deadline is set and not
	// after now, earliest deadline first.
	DueConsumers(ctx context.Context, now time.Time, limit int) ([]*Consumer, error)
	// NextDeadline returns the earliest set Deadline of any consumer, and
	// false if no consumer has one.
	NextDeadline(ctx context.Context) (time.Time, bool, error)
	// CountConsumers returns how many consumers are in each state.
	CountConsumers(ctx context.Context) (map[ConsumerState]int, error)
	// ListConsumers returns up to p.Limit consumers of subscription
	// p.SubscriptionID whose ID sorts after p.After, ordered by ID, and
	// only those in p.State if it is set. Its cost grows with p.Limit, not
	// with the subscription's consumers: durable Stores answer from an
	// index.
	ListConsumers(ctx context.Context, p *ListConsumersParams) ([]*Consumer, error)

	// UpdateHealth is an atomic read-modify-write of the health of
	// subscription id, which starts zero. It calls fn with a copy and
	// stores what fn leaves, returning it. It returns
	// ErrSubscriptionNotFound, without calling fn, if there is no such
	// subscription. It does not go through the SubscriptionFeed: health
	// changes with every failed delivery, and watchers need not reload for
	// it. Deleting the subscription deletes its health. fn may run more
	// than once, each time on a fresh copy.
	UpdateHealth(ctx context.Context, id string, fn func(h *SubscriptionHealth)) (*SubscriptionHealth, error)

	// LoadOrStoreSigningKey returns the stored callback-token signing key,
	// storing key first if none is stored. Engines that share a Store thereby
	// share one key, and tokens survive restarts of a durable Store.
	LoadOrStoreSigningKey(ctx context.Context, key []byte) ([]byte, error)
}

// ListConsumersParams select a page of a subscription's consumers for
// Store.ListConsumers.
type ListConsumersParams struct {
	SubscriptionID string
	// State, if set, keeps only the consumers in that state.
	State ConsumerState
	// After is the ID of the last consumer of the previous page, or "" for
	// the first page.
	After string
	// Limit is the most consumers to return; it is at least 1.
	Limit int
}

// UpdateAction tells Store.UpdateConsumer what to do with the consumer after
// the update function returns.
type UpdateAction int

const (
	// UpdateNone leaves the stored consumer as it was.
	UpdateNone UpdateAction = iota
	// UpdateSave stores the modified consumer.
	UpdateSave
	// UpdateDelete deletes the consumer.
	UpdateDelete
)

// Subscription maps a glob pattern of stream paths to a webhook URL. Its
// ID, Pattern and CreatedAt never change.
//
// A Store keeps ID, Pattern, Webhook, Description, Secret and CreatedAt as
// they are, Health apart (Store.UpdateHealth), and every other field as the
// one opaque value of Subscription.MarshalData, which it gives back to
// UnmarshalData: a field added to Subscription needs no migration in any
// backend. The value holds credentials, such as a webhook's custom headers
// and its previous secret, so a Store that seals Secret at rest seals it
// too.
type Subscription struct {
	ID          string
	Pattern     string
	Webhook     string
	Description string
	// Name labels the subscription for people, as Description describes
	// it; at most MaxNameLength bytes.
	Name string
	// Secret signs webhook notifications. It is returned to the client only
	// when the subscription is created. A client may give its own at
	// creation (ValidateSecret); otherwise the engine makes one.
	Secret    string
	CreatedAt time.Time
	// UpdatedAt is when the engine last changed the subscription's
	// configuration, secret or status (see Engine.UpdateSubscription).
	// Zero for one stored before it was kept; the API then shows
	// CreatedAt.
	UpdatedAt time.Time
	// Delivery is how the engine delivers to the webhook. The zero value
	// is DeliveryWake.
	Delivery DeliveryMode
	// Handler names the BatchHandler a DeliveryHandler subscription
	// delivers to (WithBatchHandler); such a subscription has no Webhook.
	Handler string
	// Tenant is the tenant the subscription belongs to, "" for none
	// (WithTenancy). It never changes: UpdateSubscription refuses to.
	Tenant string
	// Events configures a subscription whose Delivery is DeliveryEvents
	// or DeliveryHandler, and is nil for other modes.
	Events *EventsOptions
	// Status says whether the subscription delivers. The zero value is
	// StatusActive.
	Status SubscriptionStatus
	// Signature is the scheme that signs its deliveries. The zero value
	// is SignatureStreamhooks.
	Signature SignatureScheme
	// PreviousSecret, after a rotation, signs deliveries beside Secret
	// until PreviousSecretExpiresAt, so that receivers can switch over
	// without downtime. The API never shows it.
	PreviousSecret          string
	PreviousSecretExpiresAt time.Time
	// Retry, if set, replaces the engine's retry schedule and limits for
	// this subscription.
	Retry *RetryPolicy
	// RateLimit bounds the deliveries started per minute; zero means no
	// bound. Deliveries beyond it wait their turn.
	RateLimit int
	// Verification is the progress of the challenge of a StatusPending
	// subscription, and nil for every other status.
	Verification *Verification
	// Health is the webhook's recent record of deliveries. Stores keep it
	// apart (Store.UpdateHealth): GetSubscription, ListSubscriptions and
	// UpdateSubscription return it, and CreateSubscription and
	// UpdateSubscription ignore it.
	Health SubscriptionHealth
	// adopted says that the engine that created the subscription has given
	// every stream it matched then a consumer (adoptExistingStreams): from
	// then on, a matching stream without one of its consumers was created
	// later, and the stream sweep gives it one before its first event.
	adopted bool
}

// SignatureScheme names how deliveries are signed.
type SignatureScheme string

const (
	// SignatureStreamhooks is spec 001's Webhook-Signature header,
	// "t=<unix>,sha256=<hex>", keyed with the whole secret string.
	SignatureStreamhooks SignatureScheme = "streamhooks"
	// SignatureStandard is Standard Webhooks: "v1,<base64>" signatures
	// keyed with the base64 secret after "whsec_".
	SignatureStandard SignatureScheme = "standard"
)

// RetryPolicy says when a failed delivery is tried again and when the
// engine gives up. A consumer that gives up becomes a dead letter
// (StateFailed), which keeps its cursor until Engine.ResumeConsumer.
type RetryPolicy struct {
	// Schedule is the wait before each retry: Schedule[0] before the
	// first, and the last entry for every retry past the list. Empty
	// means the engine's backoff (WithBackoff).
	Schedule []time.Duration
	// MaxAttempts is how many attempts one delivery gets; zero means no
	// limit.
	MaxAttempts int
	// MaxAge is how long deliveries may fail in a row before the consumer
	// gives up; zero means no limit.
	MaxAge time.Duration
	// ClientErrors says which 4xx responses are retried; the zero value
	// is RetryClientErrors, every one.
	ClientErrors ClientErrorPolicy
	// OnExhausted says what a consumer does once it gives up; the zero
	// value is ExhaustedStop, a dead letter.
	OnExhausted ExhaustedAction
}

// SubscriptionStatus says whether a subscription delivers.
type SubscriptionStatus string

const (
	// StatusActive subscriptions deliver.
	StatusActive SubscriptionStatus = "active"
	// StatusPaused subscriptions start no delivery and keep their
	// cursors; deliveries in flight finish. An operator pauses them, and
	// Engine.ResumeSubscription resumes them from their cursors.
	StatusPaused SubscriptionStatus = "paused"
	// StatusDisabled subscriptions deliver nothing either: the engine
	// disables a subscription whose webhook answers 410 Gone, or whose
	// failures trip its circuit breaker (WithCircuitBreaker).
	// Engine.ResumeSubscription resumes it from its cursors.
	StatusDisabled SubscriptionStatus = "disabled"
	// StatusPending subscriptions deliver nothing either, and keep the
	// events that arrive meanwhile, until their endpoint is verified: it
	// echoes the engine's challenge, or an operator verifies it
	// (Engine.VerifySubscription). They then become active and deliver
	// from their cursors. Pausing and resuming do not apply to them.
	StatusPending SubscriptionStatus = "pending"
)

// status is s's status, StatusActive for the zero value.
func (s *Subscription) status() SubscriptionStatus {
	if s.Status == "" {
		return StatusActive
	}
	return s.Status
}

// active reports whether s delivers.
func (s *Subscription) active() bool { return s.status() == StatusActive }

// DeliveryMode is how the engine delivers a subscription's streams to its
// webhook.
type DeliveryMode string

// DeliveryWake wakes a consumer with a signed POST; the consumer reads the
// streams itself and calls back (spec 001).
const DeliveryWake DeliveryMode = "wake"

// DeliveryEvents posts the streams' events themselves, in batches, in
// stream order; a 2xx acknowledges a batch and moves the cursor past it
// (event push).
const DeliveryEvents DeliveryMode = "events"

// EventsOptions configure event push (DeliveryEvents).
type EventsOptions struct {
	// MaxBatchEvents and MaxBatchBytes bound the events one POST carries,
	// as read from the stream: events the Filter leaves out count too. The
	// first event of a batch is sent whatever its size.
	MaxBatchEvents int
	MaxBatchBytes  int
	// MaxWait is how long a stream's first pending event waits for others
	// to join its batch; zero sends as soon as there are events.
	MaxWait time.Duration
	// Timeout bounds one POST; zero means the engine's request timeout
	// (WithTimeouts).
	Timeout time.Duration
	// Headers are added to every POST. They often carry credentials, so
	// the subscription API never shows their values.
	Headers map[string]string
	// Filter, if set, sends only the events it matches; the others move
	// the cursor without being sent.
	Filter *EventFilter
	// Columns, if set, are the fields of each event sent: dotted paths
	// into the event's JSON object. A field an event lacks is left out;
	// an event that is not a JSON object is sent whole.
	Columns []string
}

// EventFilter matches events by a string field of their JSON object, by
// an expression, or by both.
type EventFilter struct {
	// Field is the field's name, or a dotted path to a nested one, such
	// as "data.kind".
	Field string
	// Patterns are dotted globs, one of which the field's value must
	// match: '*' matches one dot-separated segment, '**' any number.
	// An event that is not a JSON object, or lacks a string at Field,
	// matches none. Field and Patterns come together, or not at all.
	Patterns []string
	// Expression, if set, is a CEL expression over the event's JSON
	// object, the variable event, that must hold as well, such as
	// `event.type.matchesPattern("tool.*") && event.total > 100`. An
	// event that is not a JSON object, or on which the expression fails
	// (a field it compares is missing, its cost limit is reached), is
	// skipped. See the README's "Filter expressions".
	Expression string
}

// orDefault is m, or DeliveryWake for the zero mode.
func (m DeliveryMode) orDefault() DeliveryMode {
	if m == "" {
		return DeliveryWake
	}
	return m
}

// ConsumerState is a consumer's place in the wake cycle.
type ConsumerState string

// The consumer states of the spec's state machine.
const (
	StateIdle ConsumerState = "IDLE"
	// StateWaking is a delivery in progress, with an attempt in flight or
	// awaiting its retry: a wake-up not yet received, or an event-push
	// batch not yet acknowledged.
	StateWaking ConsumerState = "WAKING"
	StateLive   ConsumerState = "LIVE"
	// StateFailed is a dead letter: a consumer whose deliveries failed for
	// longer, or more times, than its subscription's retry policy allows.
	// LastError says why, and its cursor has not moved past what failed.
	// It delivers nothing, and its callbacks are answered CONSUMER_GONE,
	// until Engine.ResumeConsumer revives it from its cursor.
	StateFailed ConsumerState = "FAILED"
)

// StreamOffset pairs a stream path with an offset. In Consumer.Streams the
// offset is the last acknowledged one; OffsetNone means nothing is acked.
// It is the wire type of package receiver, which notifications and
// callbacks carry.
type StreamOffset = receiver.StreamOffset

// OffsetNone is the acked offset of a stream of which nothing has been
// processed.
const OffsetNone = "-1"

// Consumer is one consumer instance: a subscription applied to one primary
// stream, with its offsets and its place in the wake cycle. Every deadline
// lives here so that a restarted or second engine can act on it.
type Consumer struct {
	// ID is "{subscription_id}:{url-encoded primary stream}"; see ConsumerID.
	ID             string
	SubscriptionID string
	PrimaryStream  string
	State          ConsumerState
	// Epoch increases on every wake and fences callbacks of older cycles.
	Epoch int64
	// WakeID identifies the current wake cycle; retries reuse it. For an
	// events consumer it is the delivery id of the batch in flight, which
	// the receiver may deduplicate by.
	WakeID string
	// Streams are the subscribed streams with their acked offsets.
	Streams []StreamOffset
	// WakeTails are the stream tails when the current wake began. A
	// synchronous {"done":true} webhook response acks up to these, never
	// beyond: the consumer cannot have seen later events.
	WakeTails []StreamOffset
	// TriggeredBy lists the streams that had pending work at the wake.
	TriggeredBy []string
	// Attempt counts delivery attempts in the current wake cycle.
	Attempt int
	// InFlight is set while the latest attempt awaits its outcome.
	InFlight bool
	// Failures counts consecutive failed deliveries; a 2xx resets it.
	Failures int
	// FailingSince is when the current run of failures began; zero if none.
	FailingSince time.Time
	// LastError says why the latest delivery attempt failed; a 2xx
	// clears it.
	LastError string
	// Batch is the read that gives an events consumer's batch in flight,
	// from its cursor: every attempt of the batch sends the same events,
	// even after more are appended. It is zero when no batch is in flight.
	Batch ReadLimit
	// BatchEnd is the offset just past the batch in flight once an
	// attempt has read it, where a skip (ExhaustedSkip) moves the cursor;
	// empty until then.
	BatchEnd string
	// Skipped records the batches skipped under ExhaustedSkip, oldest
	// first, at most MaxSkippedBatches. A rewind drops those it delivers
	// again.
	Skipped []SkippedBatch
	// Deadline is when the engine must next act on this consumer: send or
	// retry a delivery, expire a WAKING or LIVE consumer, or collect it. Zero
	// means nothing is scheduled.
	Deadline  time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Clone returns a deep copy of c.
func (c *Consumer) Clone() *Consumer {
	if c == nil {
		return nil
	}
	out := *c
	out.Streams = append([]StreamOffset(nil), c.Streams...)
	out.WakeTails = append([]StreamOffset(nil), c.WakeTails...)
	out.TriggeredBy = append([]string(nil), c.TriggeredBy...)
	out.Skipped = append([]SkippedBatch(nil), c.Skipped...)
	return &out
}

// Clone returns a deep copy of s.
func (s *Subscription) Clone() *Subscription {
	if s == nil {
		return nil
	}
	out := *s
	if s.Events != nil {
		ev := *s.Events
		ev.Headers = maps.Clone(s.Events.Headers)
		if f := s.Events.Filter; f != nil {
			ev.Filter = &EventFilter{Field: f.Field, Patterns: slices.Clone(f.Patterns), Expression: f.Expression}
		}
		ev.Columns = slices.Clone(s.Events.Columns)
		out.Events = &ev
	}
	if s.Retry != nil {
		r := *s.Retry
		r.Schedule = slices.Clone(s.Retry.Schedule)
		out.Retry = &r
	}
	if s.Verification != nil {
		v := *s.Verification
		out.Verification = &v
	}
	return &out
}
