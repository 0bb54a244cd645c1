// Package pgstore is a durable webhooks.Store in PostgreSQL, on a pgx
// connection pool. Several engine instances may share one database: every
// transition happens in a transaction that locks the consumer's row, and
// each instance learns of the subscriptions the others create or delete
// by LISTEN/NOTIFY (see WatchSubscriptions), on a pooled connection it
// holds while the engine runs.
//
// Calls made at once share round trips: the transitions of many consumers
// share one transaction, and the reads the engine makes per webhook and
// per append share one query each (see UpdateConsumer). Under load a
// transition costs the database a share of a few statements rather than
// four.
//
// New creates or upgrades its tables, named streamhooks_*, in the first
// schema of the connections' search_path; set search_path in the pool's
// configuration to keep them in a schema of their own.
//
// A batch of updates holds a pooled connection while the engine's update
// functions run, which read the host's StreamSource, and commits when the
// slowest of them returns: a StreamSource read that hangs holds up the
// updates batched with it and those queued behind it, so give the
// StreamSource's reads a timeout. A StreamSource that reads PostgreSQL
// must use another pool: on a shared one, every connection could be held
// by an update that waits for a connection to read a stream.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
	"github.com/streamhooks/webhooks/internal/seal"
)

var (
	_ webhooks.Store            = (*Store)(nil)
	_ webhooks.SubscriptionFeed = (*Store)(nil)
)

// Option configures a Store. Pass options to New.
type Option func(*options) error

type options struct {
	key []byte
}

// WithEncryptionKey seals webhook secrets and the token signing key with
// AES-256-GCM under key, which must be 32 bytes. Take the key from the
// host's secret manager, not from beside the database's credentials.
// Without this option secrets are stored in plaintext.
//
// A database is encrypted or not from the New that creates its tables on.
// Opening it with the wrong key, or without the key, fails.
func WithEncryptionKey(key []byte) Option {
	return func(o *options) error {
		if len(key) != 32 {
			return fmt.Errorf("pgstore: encryption key must be 32 bytes, got %d", len(key))
		}
		o.key = append([]byte(nil), key...)
		return nil
	}
}

// Store is a webhooks.Store in PostgreSQL. It is safe for concurrent use.
// It has no Close: the pool is the caller's, to close after the engine has
// stopped.
type Store struct {
	pool              *pgxpool.Pool
	sealer            *seal.Sealer // nil: secrets are stored in plaintext
	updates           combine.Combiner[*updateOp]
	subscriptionReads combine.Lookups[string, *webhooks.Subscription]
	streamReads       combine.Lookups[string, []*webhooks.Consumer]
}

// New returns a Store on pool after bringing the schema up to date. Engines
// starting together migrate it once. It refuses a schema written by a newer
// version of this package.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	s := &Store{pool: pool}
	if o.key != nil {
		var err error
		if s.sealer, err = seal.New(o.key); err != nil {
			return nil, fmt.Errorf("pgstore: %w", err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Time bounds of a Unix nanosecond timestamp.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos encodes t as UTC Unix nanoseconds, NULL when zero: timestamptz
// keeps only microseconds.
func nanos(t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("pgstore: time %v is outside the storable range", t)
	}
	n := t.UnixNano()
	return &n, nil
}

// fromNanos decodes what nanos encoded, in UTC.
func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}
