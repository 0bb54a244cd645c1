package dstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// database is a schema of a test's own, dropped when the test ends, so that
// tests sharing the cluster do not see each other's streams.
type database struct {
	dsn, schema string
}

func newDatabase(t *testing.T) *database {
	t.Helper()
	return &database{dsn: pgtest.DSN(t), schema: pgtest.Schema(t)}
}

// open returns a function that opens Servers on the schema, each on a small
// pool of its own, as separate processes would. They close when the test
// ends.
func (db *database) open(t *testing.T) func(Options) *Server {
	return func(opts Options) *Server {
		t.Helper()
		cfg, err := pgxpool.ParseConfig(db.dsn)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
		cfg.ConnConfig.RuntimeParams["application_name"] = db.schema // to find the listeners
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := OpenPostgres(context.Background(), pool, opts)
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
}

// TestPostgresServersShareStreams changes streams through one Server and
// reads them through another on the same database.
func TestPostgresServersShareStreams(t *testing.T) {
	db := newDatabase(t)
	a, b := serve(t, db.open(t)(Options{})), serve(t, db.open(t)(Options{}))
	ctx := context.Background()

	a.mustCreate(t, "/agents/x", "application/json", `{"n":1}`)
	tail := a.mustAppend(t, "/agents/x", "application/json", `[{"n":2},{"n":3}]`)
	a.mustCreate(t, "/agents/y", "text/plain", "abc")

	r := b.send(t, http.MethodGet, "/agents/x?offset="+off(7), "", "")
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, `[{"n":2},{"n":3}]`, r.body)
	require.Equal(t, tail, r.header.Get("Stream-Next-Offset"))
	r = b.send(t, http.MethodHead, "/agents/y", "", "")
	require.Equal(t, off(3), r.header.Get("Stream-Next-Offset"))
	r = b.send(t, http.MethodPut, "/agents/y", "text/plain", "abc")
	require.Equal(t, http.StatusOK, r.code, "the stream exists for every Server")

	info, err := b.s.Stream(ctx, "/agents/x")
	require.NoError(t, err)
	require.Equal(t, tail, info.Tail)
	p, err := webhooks.ParsePattern("/agents/*")
	require.NoError(t, err)
	got, err := b.s.MatchStreams(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []webhooks.StreamInfo{{Path: "/agents/x", Tail: tail}, {Path: "/agents/y", Tail: off(3)}}, got)
	a.mustCreate(t, "/agents", "text/plain", "")
	a.mustCreate(t, "/agentsmith", "text/plain", "")
	p, err = webhooks.ParsePattern("/agents/**") // matches /agents itself too
	require.NoError(t, err)
	got, err = b.s.MatchStreams(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []webhooks.StreamInfo{
		{Path: "/agents", Tail: off(0), Empty: true}, {Path: "/agents/x", Tail: tail}, {Path: "/agents/y", Tail: off(3)},
	}, got)

	// An ETag names the same content through either Server.
	etag := a.send(t, http.MethodGet, "/agents/y", "", "").header.Get("ETag")
	require.Equal(t, http.StatusNotModified, b.send(t, http.MethodGet, "/agents/y", "", "", "If-None-Match", etag).code)

	b.mustAppend(t, "/agents/y", "text/plain", "d")
	require.Equal(t, "abcd", a.send(t, http.MethodGet, "/agents/y", "", "").body)
	require.Equal(t, http.StatusNoContent, b.send(t, http.MethodDelete, "/agents/x", "", "").code)
	require.Equal(t, http.StatusNotFound, a.send(t, http.MethodGet, "/agents/x", "", "").code)
	_, err = a.s.Stream(ctx, "/agents/x")
	require.ErrorIs(t, err, webhooks.ErrStreamNotFound)
}

// TestPostgresLongPollWakesOnOtherServersAppend waits on one Server for an
// append through another. The waiting Server's clock is a mock that never
// moves, so only the notification can wake it.
func TestPostgresLongPollWakesOnOtherServersAppend(t *testing.T) {
	db := newDatabase(t)
	sa := db.open(t)(Options{Clock: mockclock.New()})
	waiting := watchWaiting(sa)
	a, b := serve(t, sa), serve(t, db.open(t)(Options{}))
	tail := a.mustCreate(t, "/j", "application/json", `{"n":0}`)

	got := a.longPoll(t, waiting, "/j?offset="+tail)
	next := b.mustAppend(t, "/j", "application/json", `{"n":1}`)

	r := receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, `[{"n":1}]`, r.body)
	require.Equal(t, next, r.header.Get("Stream-Next-Offset"))

	// A delete through another Server ends the long-poll too.
	got = a.longPoll(t, waiting, "/j?offset="+next)
	require.Equal(t, http.StatusNoContent, b.send(t, http.MethodDelete, "/j", "", "").code)
	r = receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusNotFound, r.code)
}

// TestPostgresAnnouncesOnlyWaitedStreams checks that an append is
// announced only while a Server waits on its stream: a notification wakes
// every listening connection on the database, whatever its channel.
func TestPostgresAnnouncesOnlyWaitedStreams(t *testing.T) {
	db := newDatabase(t)
	sa := db.open(t)(Options{Clock: mockclock.New()})
	waiting := watchWaiting(sa)
	a, b := serve(t, sa), serve(t, db.open(t)(Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listener, err := pgx.Connect(ctx, db.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+pgChannel)
	require.NoError(t, err)

	const unwaited, expired, waited = "/announce-unwaited", "/announce-expired", "/announce-waited"
	for _, path := range []string{unwaited, expired, waited} {
		b.mustCreate(t, path, "text/plain", "a")
	}
	// A registration that has run out, as one of a Server that died.
	pgtest.Exec(t, `INSERT INTO `+db.schema+`.dstream_waits (stream_id, server, until)
		SELECT id, 'gone', now() - interval '1 second' FROM `+db.schema+`.dstream_streams WHERE path = '`+expired+`'`)
	got := a.longPoll(t, waiting, waited+"?offset="+off(1))
	for _, path := range []string{unwaited, expired, waited} {
		b.mustAppend(t, path, "text/plain", "b")
	}
	// Notifications come in commit order, other tests' among them.
	for {
		n, err := listener.WaitForNotification(ctx)
		require.NoError(t, err, "no notification of the append to %s", waited)
		require.NotContains(t, []string{unwaited, expired}, n.Payload, "an append nobody waits on was announced")
		if n.Payload == waited {
			break
		}
	}
	r := receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "b", r.body)
}

// TestPostgresReadLoadsOnlyWhatTheLimitUses checks that an event read
// loads no more chunks than its limit can use, however long the backlog.
func TestPostgresReadLoadsOnlyWhatTheLimitUses(t *testing.T) {
	s := newDatabase(t).open(t)(Options{})
	f := serve(t, s)
	ctx := context.Background()
	f.mustCreate(t, "/many", "application/json", "")
	var tail string
	for i := range 10 {
		tail = f.mustAppend(t, "/many", "application/json", fmt.Sprintf(`{"i":%d}`, i))
	}
	v, ok, err := s.store.read(ctx, "/many", 0, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, v.starts, 3, "chunks loaded")
	require.Equal(t, tail, formatOffset(v.tail), "the tail is the stream's")

	b, err := s.ReadEvents(ctx, "/many", "-1", webhooks.ReadLimit{MaxEvents: 2})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(`{"i":0}`), []byte(`{"i":1}`)}, b.Events)
	require.Equal(t, off(14), b.Next)
	require.False(t, b.UpToDate)
	b, err = s.ReadEvents(ctx, "/many", off(63), webhooks.ReadLimit{MaxEvents: 5})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(`{"i":9}`)}, b.Events, "the last, read through the tail")
	require.Equal(t, tail, b.Next)
	require.True(t, b.UpToDate)

	// A byte stream's event ends where the chunks loaded end.
	f.mustCreate(t, "/bytes", "text/plain", "ab")
	f.mustAppend(t, "/bytes", "text/plain", "cd")
	f.mustAppend(t, "/bytes", "text/plain", "ef")
	b, err = s.ReadEvents(ctx, "/bytes", off(1), webhooks.ReadLimit{MaxEvents: 1})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("bcd")}, b.Events)
	require.Equal(t, off(4), b.Next)
	require.False(t, b.UpToDate)
}

// TestPostgresLongPollRechecks appends behind the Server's back, without a
// notification, as when one is lost: the long-poll finds the data when it
// reads again a recheck interval later.
func TestPostgresLongPollRechecks(t *testing.T) {
	db := newDatabase(t)
	mock := mockclock.New()
	s := db.open(t)(Options{Clock: mock})
	waiting := watchWaiting(s)
	f := serve(t, s)
	tail := f.mustCreate(t, "/s", "text/plain", "abc")

	got := f.longPoll(t, waiting, "/s?offset="+tail)
	pgtest.Exec(t, `WITH c AS (INSERT INTO `+db.schema+`.dstream_chunks (stream_id, pos, data)
		SELECT id, 3, 'de'::bytea FROM `+db.schema+`.dstream_streams WHERE path = '/s')
		UPDATE `+db.schema+`.dstream_streams SET tail = 5 WHERE path = '/s'`)
	select {
	case r := <-got:
		t.Fatalf("the long-poll answered %d before the recheck", r.code)
	default:
	}
	mock.Add(pgRecheck)

	r := receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "de", r.body)
	require.Equal(t, off(5), r.header.Get("Stream-Next-Offset"))
}

// TestPostgresConcurrentAppendsAcrossServers appends to one stream through
// two Servers at once: every append gets its own offset, each writer's
// offsets increase, and a read returns every message once, in an order
// that agrees with the offsets.
func TestPostgresConcurrentAppendsAcrossServers(t *testing.T) {
	db := newDatabase(t)
	servers := []*fixture{serve(t, db.open(t)(Options{})), serve(t, db.open(t)(Options{}))}
	servers[0].mustCreate(t, "/j", "application/json", "")

	const writers, perWriter = 4, 25
	offsets := make([][]string, writers)
	var wg sync.WaitGroup
	for w := range writers {
		f := servers[w%2]
		wg.Go(func() {
			for i := range perWriter {
				body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				r, err := f.roundTrip(context.Background(), http.MethodPost, f.url("/j"), "application/json", body)
				if assert.NoError(t, err) && assert.Equal(t, http.StatusNoContent, r.code) {
					offsets[w] = append(offsets[w], r.header.Get("Stream-Next-Offset"))
				}
			}
		})
	}
	wg.Wait()

	seen := map[string]bool{}
	for w := range writers {
		require.Len(t, offsets[w], perWriter)
		require.IsIncreasing(t, offsets[w], "writer %d", w)
		for _, o := range offsets[w] {
			require.False(t, seen[o], "offset %s issued twice", o)
			seen[o] = true
		}
	}

	// The stream holds every message once, each writer's in order, and
	// each ends at the offset its append answered.
	var items []struct{ W, I int }
	body := servers[1].send(t, http.MethodGet, "/j", "", "").body
	require.NoError(t, json.Unmarshal([]byte(body), &items))
	require.Len(t, items, writers*perWriter)
	next, pos := make([]int, writers), 0
	for _, it := range items {
		require.Equal(t, next[it.W], it.I, "writer %d's messages out of order", it.W)
		pos += len(fmt.Sprintf(`{"w":%d,"i":%d}`, it.W, it.I))
		require.Equal(t, off(pos), offsets[it.W][it.I], "offset of writer %d's message %d", it.W, it.I)
		next[it.W]++
	}
}

// TestPostgresPaths checks the paths the database cannot hold: they are
// refused on creation and found nowhere, never a 500.
func TestPostgresPaths(t *testing.T) {
	f := serve(t, newDatabase(t).open(t)(Options{}))

	long := "/" + strings.Repeat("a", pgMaxPathBytes)
	require.Equal(t, http.StatusRequestURITooLong, f.send(t, http.MethodPut, long, "text/plain", "").code)
	f.mustCreate(t, long[:pgMaxPathBytes], "text/plain", "x")
	for _, path := range []string{"/a%00b", "/%ff"} {
		require.Equal(t, http.StatusBadRequest, f.send(t, http.MethodPut, path, "text/plain", "").code, path)
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete} {
			require.Equal(t, http.StatusNotFound, f.send(t, method, path, "text/plain", "x").code, "%s %s", method, path)
		}
	}
}

// TestPostgresListenerReconnects kills a Server's listening connection: it
// connects again, wakes its long-polls, as notifications may have been
// lost, and hears later ones. The recheck is off, so only these wake them.
func TestPostgresListenerReconnects(t *testing.T) {
	db := newDatabase(t)
	quiet := Options{Logger: slog.New(slog.DiscardHandler)}
	sa := db.open(t)(quiet)
	sa.recheck = 0
	waiting := watchWaiting(sa)
	a, b := serve(t, sa), serve(t, db.open(t)(quiet))
	tail := a.mustCreate(t, "/s", "text/plain", "abc")

	got := a.longPoll(t, waiting, "/s?offset="+tail)
	pgtest.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = '`+db.schema+`' AND query = 'LISTEN `+pgChannel+`'`)
	// An append no notification announces, as one made while nobody listens.
	pgtest.Exec(t, `WITH c AS (INSERT INTO `+db.schema+`.dstream_chunks (stream_id, pos, data)
		SELECT id, 3, 'de'::bytea FROM `+db.schema+`.dstream_streams WHERE path = '/s')
		UPDATE `+db.schema+`.dstream_streams SET tail = 5 WHERE path = '/s'`)
	r := receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "de", r.body)

	got = a.longPoll(t, waiting, "/s?offset="+off(5))
	b.mustAppend(t, "/s", "text/plain", "f")
	r = receive(t, got, "the long-poll reply")
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "f", r.body)
}

// TestPostgresUnreachableIs503 closes a Server's pool under it: every
// request that needs the database is answered 503 with Retry-After, so a
// client retries, and the error text stays in the log.
func TestPostgresUnreachableIs503(t *testing.T) {
	db := newDatabase(t)
	cfg, err := pgxpool.ParseConfig(db.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	s, err := OpenPostgres(context.Background(), pool, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	f := serve(t, s)
	f.mustCreate(t, "/a", "text/plain", "abc")

	pool.Close()
	for _, r := range []reply{
		f.send(t, http.MethodPut, "/b", "text/plain", "x"),
		f.send(t, http.MethodPost, "/a", "text/plain", "d"),
		f.send(t, http.MethodGet, "/a", "", ""),
		f.send(t, http.MethodGet, "/a?offset=-1&live=long-poll", "", ""),
		f.send(t, http.MethodHead, "/a", "", ""),
		f.send(t, http.MethodDelete, "/a", "", ""),
	} {
		require.Equal(t, http.StatusServiceUnavailable, r.code)
		require.Equal(t, "1", r.header.Get("Retry-After"))
	}
}
