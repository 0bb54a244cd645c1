package webhooks

import (
	"context"
	"strings"
	"time"
)

// The Store's optional capabilities. The engine finds each by a type
// assertion on its Store, and works without it: a Store implements the
// ones its deployment needs. memstore, sqlitestore and pgstore implement
// all of them. DSStore (store_ds.go) and WebhookKeyStore
// (store_webhook_keys.go) are declared in files of their own.

// SubscriptionFeed is an optional Store capability that lets engines
// sharing one Store cooperate: each learns of the subscriptions created or
// deleted through the others, and reloads them into the index by which it
// gives new streams their consumers and from which it takes each webhook's
// URL and secret. The engine finds it by type assertion on its Store.
//
// Only subscriptions go through the feed. Deadlines set by another engine
// need none: the scheduler reads the Store's deadlines at least every poll
// interval (WithPollInterval).
//
// Learning of a subscription takes a notification and a reload, so there
// is a window: a stream created through engine B after a subscription was
// created through engine A, but before B has reloaded, gets no consumer of
// it then (A adopts only the streams that existed when it created the
// subscription). It gets one, positioned before its first event, at the
// first stream sweep of any engine that knows the subscription once A has
// marked it adopted, or at its next append after B has reloaded. A
// subscription learned from the feed is not swept for existing streams as
// Start's subscriptions are: the engine that created it adopted them.
type SubscriptionFeed interface {
	// WatchSubscriptions calls changed after each subscription create,
	// update or delete committed through any handle on the same data, this one
	// included, until ctx ends; it may call it spuriously. It calls changed
	// once as soon as it watches, and again after reconnecting, since
	// changes may have been missed meanwhile: every change committed after
	// a call is followed by another. It returns ctx's error once ctx ends,
	// or another error if it cannot watch, and the engine calls it again
	// after a pause.
	WatchSubscriptions(ctx context.Context, changed func()) error
}

// Leaser is an optional capability of a Store that several engine
// instances share. It grants a named lease to one holder at a time, for a
// limited term. An engine over a Store that implements it reports the
// Store-wide gauge webhooks.consumers only while it holds the lease
// "metrics", so that the gauge summed over the instances counts each
// consumer once; the lease passes to another instance when its holder
// stops or fails to renew it. An engine over a Store without it reports
// the gauge always: such a Store serves one engine.
//
// Times are those of the engines' clocks, as consumer deadlines are:
// engines sharing a Store need clocks that agree to well within a lease's
// term, which is at least 15 seconds.
type Leaser interface {
	// TryLease grants the lease name to holder until the time until, if no
	// one holds it, if its term has ended (its until is not after now), or
	// if holder holds it already, and reports whether holder now holds it.
	// Racing calls for one name grant it to one holder at most.
	TryLease(ctx context.Context, name, holder string, now, until time.Time) (bool, error)
	// ReleaseLease ends the lease name at once if holder holds it, so that
	// another holder may take it; otherwise it does nothing.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// DeliveryLog is an optional Store capability: a bounded log of each
// consumer's latest delivery attempts, which the subscription API shows
// (…&deliveries&consumer=ID). The engine finds it by type assertion on its
// Store; without it the engine keeps no log. memstore, sqlitestore and
// pgstore implement it.
type DeliveryLog interface {
	// AppendAttempts adds attempts to their consumers' logs, keeping only
	// the newest keep of each consumer's, so that a log never grows past
	// keep. Attempts of a consumer that no longer exists are dropped.
	// Deleting a consumer deletes its log. A Store that is a DSStore keeps
	// the attempts of its DS subscriptions too (DSDeliveryLogKey).
	AppendAttempts(ctx context.Context, attempts []*DeliveryAttempt, keep int) error
	// ListAttempts returns up to limit of the newest attempts of consumer
	// id, newest first; none if it has no log.
	ListAttempts(ctx context.Context, consumerID string, limit int) ([]*DeliveryAttempt, error)
}

// DSDeliveryLogKey is the DeliveryAttempt.ConsumerID under which a
// DeliveryLog that is also a DSStore keeps the attempts of DS subscription
// id: "__ds/" + id, which no consumer ID is. The log is kept while the
// subscription is live; deleting it deletes its log, and one created
// again under its ID starts with none.
func DSDeliveryLogKey(id string) string { return dsReservedSegment + "/" + id }

// DSDeliveryLogSubscription returns the DS subscription ID of DeliveryLog
// key, and false for a consumer's ID.
func DSDeliveryLogSubscription(key string) (string, bool) {
	return strings.CutPrefix(key, dsReservedSegment+"/")
}

// DeliveryAttempt is one delivery attempt in a DeliveryLog.
type DeliveryAttempt struct {
	ConsumerID string
	// At is when the attempt was made.
	At time.Time
	// DeliveryID is the wake id of a wake-up, or the delivery id of a
	// batch.
	DeliveryID string
	// Attempt numbers the attempt within its delivery, from 1.
	Attempt int
	// StatusCode is the response's status, or 0 if none arrived.
	StatusCode int
	// Latency is how long the request took.
	Latency time.Duration
	// ErrorClass is empty for a 2xx, and otherwise says why the attempt
	// failed: dns, connect, tls, timeout, ssrf_blocked, status_3xx,
	// status_4xx, status_5xx, body, other, or handler for a BatchHandler's
	// error or panic.
	ErrorClass string
	// Error is the failure's detail.
	Error string
	// ResponseBody is the start of the response body, at most
	// MaxResponsePreview bytes.
	ResponseBody string
}

// MaxResponsePreview bounds DeliveryAttempt.ResponseBody, in bytes.
const MaxResponsePreview = 500
