// Package sqlitestore is a durable webhooks.Store in one SQLite file, for
// running the engine without a database server. It is pure Go (no cgo).
//
// The file is opened in WAL mode, so readers never wait for the writer.
// Several Stores, in one process or in several, may share a file: every
// write takes SQLite's write lock before it reads, so UpdateConsumer is a
// read-modify-write under the lock across processes, and the engines on
// them learn of each other's subscriptions by polling a counter of their
// changes (see WatchSubscriptions).
//
// Writes go through one writer goroutine that commits them in groups: calls
// that arrive while a commit is in progress run in the next transaction,
// each inside its own savepoint, and return once that transaction has
// committed. One fsync thus serves a group: with the default SyncFull, a
// write that returned without error survives an OS crash.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine"
	"github.com/streamhooks/webhooks/internal/seal"
)

var (
	_ webhooks.Store            = (*Store)(nil)
	_ webhooks.SubscriptionFeed = (*Store)(nil)
)

// ErrClosed is returned by writes to a closed Store.
var ErrClosed = errors.New("sqlitestore: store is closed")

// Defaults for the options.
const (
	// DefaultBusyTimeout is how long a write waits for another process that
	// holds the database's write lock.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultChangePollInterval is how often WatchSubscriptions looks for
	// subscription changes.
	DefaultChangePollInterval = 250 * time.Millisecond
)

// maxBatch bounds the writes committed in one transaction, so that one
// commit cannot delay the first caller of a batch without bound.
const maxBatch = 128

// maxReaders bounds the connections used for reads; one more writes.
const maxReaders = 4

// Option configures a Store. Pass options to Open.
type Option func(*options) error

type options struct {
	key         []byte
	busyTimeout time.Duration
	synchronous Synchronous
	changePoll  time.Duration
}

// Synchronous is how hard a commit waits for the disk; see WithSynchronous.
type Synchronous string

const (
	// SyncFull syncs the write-ahead log on every commit: a write that
	// returned survives an OS crash or power loss. It is the default.
	SyncFull Synchronous = "FULL"
	// SyncNormal syncs only at checkpoints: a write that returned survives
	// a crash of the process but may be lost, with the writes after it, if
	// the OS crashes or power fails. The database stays consistent either
	// way.
	SyncNormal Synchronous = "NORMAL"
)

// WithEncryptionKey seals webhook secrets and the token signing key with
// AES-256-GCM under key, which must be 32 bytes. Take the key from the
// host's secret manager: a key kept beside the database would protect
// nothing, which is why, without this option, secrets are stored in
// plaintext and the file is created readable by its owner only (0600).
//
// A database is encrypted or not from the Open that creates it on. Opening
// it with the wrong key, or without the key, fails.
func WithEncryptionKey(key []byte) Option {
	return func(o *options) error {
		if len(key) != 32 {
			return fmt.Errorf("sqlitestore: encryption key must be 32 bytes, got %d", len(key))
		}
		o.key = append([]byte(nil), key...)
		return nil
	}
}

// WithBusyTimeout sets how long a write waits for the write lock while
// another process holds it. The default is DefaultBusyTimeout.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("sqlitestore: busy timeout %v is below 1ms", d)
		}
		o.busyTimeout = d
		return nil
	}
}

// WithSynchronous sets SQLite's synchronous mode. The default, SyncFull,
// keeps every acknowledged offset across an OS crash; grouped commits make
// its cost one fsync per group rather than per write.
func WithSynchronous(s Synchronous) Option {
	return func(o *options) error {
		if s != SyncFull && s != SyncNormal {
			return fmt.Errorf("sqlitestore: unknown synchronous mode %q", s)
		}
		o.synchronous = s
		return nil
	}
}

// WithChangePollInterval sets how often WatchSubscriptions reads the
// counter of subscription changes, and so how soon an engine learns of a
// subscription created or deleted through another Store on the file. The
// default is DefaultChangePollInterval.
func WithChangePollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("sqlitestore: change poll interval %v is below 1ms", d)
		}
		o.changePoll = d
		return nil
	}
}

// Store is a webhooks.Store in a SQLite file. It is safe for concurrent
// use. Create it with Open and release it with Close.
type Store struct {
	w      *wtx
	r      *readers
	sealer *seal.Sealer // nil: secrets are stored in plaintext

	changePoll time.Duration

	subscriptionReads combine.Lookups[string, *webhooks.Subscription]
	streamReads       combine.Lookups[string, []*webhooks.Consumer]

	ops        chan *op
	closing    chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// Open opens the database at path, creating it if needed, and brings its
// schema up to date. It refuses a database written by a newer version of
// this package.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{busyTimeout: DefaultBusyTimeout, synchronous: SyncFull, changePoll: DefaultChangePollInterval}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlitestore: invalid database path %q", path)
	}
	// SQLite would create the file world-readable; the secrets in it are
	// not. Its -wal and -shm files copy these permissions.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}

	wdb, err := sql.Open("sqlite", dsn(path, o, false))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	// One connection writes: the writer goroutine serializes this
	// process's writes, and the write lock those of other processes.
	wdb.SetMaxOpenConns(1)
	conn, err := wdb.Conn(context.Background())
	if err != nil {
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	rdb, err := sql.Open("sqlite", dsn(path, o, true))
	if err != nil {
		_ = conn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	rdb.SetMaxOpenConns(maxReaders)
	rdb.SetMaxIdleConns(maxReaders)

	s := &Store{
		w:          &wtx{db: wdb, conn: conn, stmts: make(map[string]*sql.Stmt)},
		r:          &readers{db: rdb, stmts: make(map[string]*sql.Stmt)},
		changePoll: o.changePoll,
		ops:        make(chan *op),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	if o.key != nil {
		if s.sealer, err = seal.New(o.key); err != nil {
			_ = s.closeDBs()
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
	}
	if err := s.migrate(context.Background()); err != nil {
		_ = s.closeDBs()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// Close stops the writer, after the writes already accepted, and closes
// the database. Writes after Close return ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		<-s.writerDone
		s.closeErr = s.closeDBs()
	})
	return s.closeErr
}

func (s *Store) closeDBs() error {
	return errors.Join(s.r.close(), s.w.close())
}

// dsn is the data source name of the database at path, for the writer or
// for readers.
func dsn(path string, o options, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+string(o.synchronous)+")")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Time bounds of a Unix nanosecond timestamp.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos encodes t as UTC Unix nanoseconds, NULL when zero.
func nanos(t time.Time) (sql.NullInt64, error) {
	if t.IsZero() {
		return sql.NullInt64{}, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return sql.NullInt64{}, fmt.Errorf("sqlitestore: time %v is outside the storable range", t)
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}, nil
}

// fromNanos decodes what nanos encoded, in UTC.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
