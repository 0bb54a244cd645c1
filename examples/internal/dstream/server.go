// Package dstream is a compact in-memory Durable Streams server for examples
// and end-to-end tests of the webhook engine. Opened on a directory, it also
// keeps its streams on disk, so they survive a crash and restart. Opened on
// a PostgreSQL database, it keeps them there instead, and several Servers,
// in one process or many, serve the same streams.
//
// It serves the core HTTP protocol (create, append, catch-up and long-poll
// reads, HEAD, DELETE) for JSON and byte streams, implements
// webhooks.StreamSource, and reports stream changes to an Observer.
//
// Not supported, and rejected with 400 rather than silently ignored: SSE
// reads, stream TTL and expiry, closing streams, Stream-Seq and idempotent
// producer headers.
package dstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks"
)

// Defaults used when the corresponding Options field is zero.
const (
	DefaultLongPollTimeout       = 30 * time.Second
	DefaultMaxBodyBytes    int64 = 8 << 20
)

// Observer is told about stream changes, typically the webhook engine.
//
// Calls happen after the server has released its locks, so an observer may
// call back into the Server (Stream, MatchStreams) synchronously. The HTTP
// response is written only after the observer returns. Calls caused by
// concurrent requests may overlap or arrive in any order, so treat them as
// hints and read the current state back through Stream.
//
// A PUT that creates a stream with a non-empty initial body calls only
// StreamCreated: creation means "the stream may now hold data". A PUT for an
// existing stream calls nothing. Errors are logged and never fail the
// request that caused the change.
type Observer interface {
	StreamCreated(ctx context.Context, path string) error
	StreamAppended(ctx context.Context, path string) error
	StreamDeleted(ctx context.Context, path string) error
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// Clock drives long-poll timeouts, Stream-Cursor values and, with
	// OpenPostgres, the long-polls' re-reads and the listener's reconnects;
	// defaults to the wall clock. Tests inject a mock.
	Clock clock.Clock
	// LongPollTimeout is how long a long-poll waits for data before answering
	// 204; defaults to DefaultLongPollTimeout.
	LongPollTimeout time.Duration
	// MaxBodyBytes bounds PUT and POST bodies (413 above it); defaults to
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives observer errors; defaults to slog.Default().
	Logger *slog.Logger
	// Observer, if set, is notified of changes. It can also be set later with
	// SetObserver, which is what a host does when the observer is built from
	// the Server.
	Observer Observer
}

// Server is a Durable Streams server holding its streams in memory and,
// when made by Open, on disk, or, when made by OpenPostgres, in a database
// it shares with other Servers. It is an http.Handler and a
// webhooks.StreamSource. Use New, Open or OpenPostgres to create one.
type Server struct {
	clock    clock.Clock
	timeout  time.Duration
	maxBody  int64
	log      *slog.Logger
	observer atomic.Pointer[observerRef]

	closed    chan struct{}
	closeOnce sync.Once

	store      storage
	storageLog *logSampler // samples the logs of storage failures
	waiters    waiters
	// recheck, if positive, is how often a long-poll reads its stream again
	// in case a wake-up from another Server was lost.
	recheck time.Duration

	// testHookWaiting, when set by tests, runs when a long-poll starts
	// waiting, so a test can append strictly after the wait began.
	testHookWaiting func()
}

// observerRef wraps an Observer for atomic.Pointer.
type observerRef struct{ o Observer }

// New returns an in-memory Server configured by opts.
func New(opts Options) *Server {
	s := &Server{
		clock:   opts.Clock,
		timeout: opts.LongPollTimeout,
		maxBody: opts.MaxBodyBytes,
		log:     opts.Logger,
		closed:  make(chan struct{}),
		store:   &memStorage{streams: make(map[string]*stream)},
	}
	if s.clock == nil {
		s.clock = clock.New()
	}
	s.storageLog = &logSampler{clock: s.clock, interval: storageLogInterval}
	if s.timeout <= 0 {
		s.timeout = DefaultLongPollTimeout
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.SetObserver(opts.Observer)
	return s
}

// Open returns a Server configured by opts that keeps its streams in dir,
// which it creates if needed, and loads the streams already there. Each
// create, append and delete is written and fsynced before it is answered or
// reported to the Observer, so what a client or the Observer was told
// survives a crash; offsets stay the same across restarts. A torn record at
// the end of a file, as a crash mid-write leaves, is cut off when loading.
// Loading tells the Observer nothing.
//
// The Server owns dir: only one may use it at a time. Stream paths are
// limited to 154 bytes, as each names a file.
func Open(dir string, opts Options) (*Server, error) {
	s := New(opts)
	if s.maxBody > math.MaxUint32-2 { // a JSON record may be the body plus "[]"
		return nil, errors.New("dstream: MaxBodyBytes is too large for on-disk streams")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d := &disk{dir: dir}
	epoch, err := d.nextEpoch()
	if err != nil {
		return nil, err
	}
	streams, err := d.load(s.log)
	if err != nil {
		return nil, err
	}
	m := &memStorage{disk: d, streams: make(map[string]*stream), gen: epoch << 32}
	for _, l := range streams {
		m.gen++
		l.st.gen = m.gen
		m.streams[l.path] = l.st
	}
	s.store = m
	return s, nil
}

// SetObserver replaces the observer; nil removes it. It is safe to call while
// requests are being served, so a host can build its engine from the Server
// and then register the engine.
func (s *Server) SetObserver(o Observer) {
	if o == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&observerRef{o: o})
}

// Close ends pending long-polls (they answer 204) and makes later long-polls
// answer at once, so an http.Server or httptest.Server can shut down without
// waiting for long-poll timeouts. Call it just before that shutdown: clients
// that keep polling get immediate 204s from then on. Other requests keep
// working. A Server made by OpenPostgres also stops listening for changes
// made through other Servers; Close returns once it has.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.store.close()
	})
}

// notify calls one Observer method with locks released. The context loses
// its cancellation because the change happened whether or not the client
// is still there.
func (s *Server) notify(ctx context.Context, event, path string, call func(Observer, context.Context, string) error) {
	ref := s.observer.Load()
	if ref == nil {
		return
	}
	if err := call(ref.o, context.WithoutCancel(ctx), path); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "dstream: observer failed",
			slog.String("event", event), slog.String("path", path), slog.Any("error", err))
	}
}

// ErrContentTypeConflict is wrapped by Create's error for a stream that
// exists with another media type.
var ErrContentTypeConflict = errors.New("dstream: a stream exists with another Content-Type")

// Create creates an empty stream at path with contentType, as a PUT
// without a body does, and tells the Observer. A stream already at path is
// left as it is if it has the same media type, and is an error wrapping
// ErrContentTypeConflict otherwise.
func (s *Server) Create(ctx context.Context, path, contentType string) error {
	if e := s.checkPath(path); e != nil {
		return e
	}
	st, err := newStream(contentType)
	if err != nil {
		return fmt.Errorf("dstream: invalid Content-Type %q: %w", contentType, err)
	}
	old, created, err := s.store.create(ctx, path, st)
	switch {
	case err != nil:
		return err
	case !created && old.mediaType != st.mediaType:
		return fmt.Errorf("%w: stream %s exists with Content-Type %s", ErrContentTypeConflict, path, old.contentType)
	case created:
		s.notify(ctx, "created", path, Observer.StreamCreated)
	}
	return nil
}

// Append appends body to the stream at path, as a POST without a
// Content-Type does, and tells the Observer: to a JSON stream, body is a
// JSON value, or an array of values, each a message. Once it returns, the
// change is as durable as the Server keeps any.
func (s *Server) Append(ctx context.Context, path string, body []byte) error {
	if int64(len(body)) > s.maxBody {
		return &httpError{http.StatusRequestEntityTooLarge, "body too large"}
	}
	_, err := s.appendBody(ctx, path, "", body)
	return err
}

// appendBody appends body of media type mt, "" for the stream's own, to the
// stream at path, wakes its long-polls and tells the Observer.
func (s *Server) appendBody(ctx context.Context, path, mt string, body []byte) (tail int, err error) {
	if tail, err = s.store.append(ctx, path, mt, body); err != nil {
		return 0, err
	}
	s.waiters.wake(path)
	s.notify(ctx, "appended", path, Observer.StreamAppended)
	return tail, nil
}

// checkPath refuses a new stream's path: one that no subscription pattern
// could name (see webhooks.ValidateStreamPath), since a client that
// normalises "/a/../b" would read another stream, or one the storage cannot
// hold. The path is the decoded one, so "%2e%2e" is a ".." segment and
// "%2F" a '/'.
func (s *Server) checkPath(path string) *httpError {
	if len(path) > webhooks.MaxStreamPathLength {
		// The status of a target too long, in every storage.
		return &httpError{http.StatusRequestURITooLong, fmt.Sprintf("stream path is longer than %d bytes", webhooks.MaxStreamPathLength)}
	}
	var ve *webhooks.ValidationError
	if errors.As(webhooks.ValidateStreamPath(path), &ve) {
		return &httpError{http.StatusBadRequest, ve.Reason}
	}
	return s.store.checkPath(path)
}
