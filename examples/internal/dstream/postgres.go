package dstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/streamhooks/webhooks"
)

// In PostgreSQL each stream is a row of dstream_streams, and each append
// adds rows to dstream_chunks: the bytes as given, or one row per JSON
// message, each at the byte position where it starts. A stream's id comes
// from a sequence, so it never names two streams and serves as the ETag's
// generation. An append locks its stream's row, so appends through
// different Servers take turns and never reuse a position.
const (
	pgSchema = `
CREATE TABLE IF NOT EXISTS dstream_streams (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	path         text NOT NULL UNIQUE,
	content_type text NOT NULL,
	tail         bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS dstream_chunks (
	stream_id bigint NOT NULL REFERENCES dstream_streams (id) ON DELETE CASCADE,
	pos       bigint NOT NULL,
	data      bytea NOT NULL,
	PRIMARY KEY (stream_id, pos)
);
CREATE TABLE IF NOT EXISTS dstream_waits (
	stream_id bigint NOT NULL REFERENCES dstream_streams (id) ON DELETE CASCADE,
	server    text NOT NULL,
	until     timestamptz NOT NULL,
	PRIMARY KEY (stream_id, server)
);`

	// pgChannel is where each append to a stream that a Server waits on,
	// and each delete, is announced, with the stream's path as the
	// payload, to the long-polls of every Server.
	pgChannel = "dstream_changes"

	// pgWaitFor is how long a Server stays registered in dstream_waits as
	// waiting on a stream, at least, after a long-poll on it begins.
	pgWaitFor = 5 * time.Minute

	// pgMaxPathBytes bounds stream paths well below what a btree index
	// entry and a notification payload may hold.
	pgMaxPathBytes = 1024

	// pgRecheck is how often a long-poll reads its stream again, in case
	// a notification was lost with a broken listening connection.
	pgRecheck = time.Second

	// pgMigrationLock is the first key of the advisory lock that lets only
	// one Server create the tables at a time.
	pgMigrationLock = 0x64737472 // "dstr"
)

// OpenPostgres returns a Server configured by opts that keeps its streams
// in the database pool connects to, creating its tables (named dstream_*)
// if needed. Servers opened on one database serve the same streams: each
// change is committed before it is answered or reported to this Server's
// Observer, and a long-poll on one Server wakes when an append through
// another commits, by LISTEN/NOTIFY on a connection of its own, and else
// within about a second. Only appends to streams that some Server
// long-polls are announced: a notification wakes every listening
// connection on the database, whatever its channel.
//
// The caller owns pool and closes it after Close. Stream paths are limited
// to 1024 bytes of valid UTF-8 without NUL, as the database stores text.
func OpenPostgres(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Server, error) {
	s := New(opts)
	if err := pgMigrate(ctx, pool); err != nil {
		return nil, fmt.Errorf("dstream: creating tables: %w", err)
	}
	conn, err := pgListen(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("dstream: listening: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	p := &pgStorage{
		pool: pool, cancel: cancel, clock: s.clock, server: uuid.NewString(),
		waitFor: max(pgWaitFor, 2*s.timeout), waiting: make(map[string]time.Time),
	}
	p.done.Add(1)
	go p.listen(lctx, conn, s)
	s.store = p
	s.recheck = pgRecheck
	return s, nil
}

func pgMigrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))", pgMigrationLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgSchema)
		return err
	})
}

// pgListen opens a connection of its own, outside the pool, and listens on
// pgChannel.
func pgListen(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgChannel); err != nil {
		return nil, errors.Join(err, conn.Close(ctx))
	}
	return conn, nil
}

// pgStorage keeps streams in PostgreSQL. It reads every answer from the
// database, so Servers sharing it need no coherence between them.
type pgStorage struct {
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	done   sync.WaitGroup

	clock   clock.Clock
	server  string        // this Server's name in dstream_waits
	waitFor time.Duration // how long a registration in dstream_waits lasts

	mu sync.Mutex
	// waiting holds, by path, when this Server's registration as waiting
	// on a stream ends, as its clock tells; at least that late.
	waiting map[string]time.Time
	sweepAt int // len(waiting) at which expired entries are dropped
}

// listen wakes s's long-polls for each notification until ctx ends. When
// the connection breaks it connects again, a second later on failure, and
// wakes every long-poll, as notifications may have been lost meanwhile.
func (p *pgStorage) listen(ctx context.Context, conn *pgx.Conn, s *Server) {
	defer p.done.Done()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			s.waiters.wake(n.Payload)
			continue
		}
		_ = conn.Close(context.Background()) // broken, or closing
		for {
			if ctx.Err() != nil {
				return
			}
			s.log.LogAttrs(ctx, slog.LevelWarn, "dstream: listening for changes failed; reconnecting", slog.Any("error", err))
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(time.Second):
			}
			if conn, err = pgListen(ctx, p.pool); err == nil {
				break
			}
		}
		s.waiters.wakeAll()
	}
}

func (p *pgStorage) close() {
	p.cancel()
	p.done.Wait()
}

// transient is true: a database error here means the database did not
// answer, or refused for now.
func (p *pgStorage) transient(error) bool { return true }

// storable reports whether the database can hold path.
func storable(path string) bool {
	return len(path) <= pgMaxPathBytes && utf8.ValidString(path) && !strings.ContainsRune(path, 0)
}

func (p *pgStorage) checkPath(path string) *httpError {
	switch {
	case len(path) > pgMaxPathBytes:
		return &httpError{http.StatusRequestURITooLong, "stream path too long for database storage"}
	case !storable(path):
		return &httpError{http.StatusBadRequest, "stream path must be UTF-8 without NUL for database storage"}
	}
	return nil
}

// pgMeta builds a stream's meta from its row.
func pgMeta(id int64, contentType string, tail int64) (streamMeta, error) {
	st, err := newStream(contentType)
	if err != nil {
		return streamMeta{}, fmt.Errorf("stored content type: %w", err)
	}
	return streamMeta{gen: uint64(id), contentType: contentType, mediaType: st.mediaType, json: st.json, tail: int(tail)}, nil
}

// insertChunks stores chunks, the first at position start, and sets the
// stream's tail past them; announce names the path to notify if a Server
// waits on the stream. The stream's row is locked, so a registration in
// dstream_waits either committed before this statement began, and it
// notifies, or begins after the append commits, and the long-poll's read
// that follows it sees the append.
const insertChunks = `
WITH chunks AS (
	INSERT INTO dstream_chunks (stream_id, pos, data)
	SELECT $1, pos, data FROM unnest($2::bigint[], $3::bytea[]) AS c (pos, data)
), moved AS (
	UPDATE dstream_streams SET tail = $4 WHERE id = $1
)
SELECT pg_notify('` + pgChannel + `', $5)
WHERE $5::text <> '' AND EXISTS (SELECT 1 FROM dstream_waits WHERE stream_id = $1 AND until > now())`

// registerWait registers server $2 as waiting on the stream at path $1
// for $3 milliseconds, and drops the expired registrations of other
// Servers on it. It locks the stream's row, so that it waits for an append
// in progress to commit (see insertChunks).
const registerWait = `
WITH s AS (
	SELECT id FROM dstream_streams WHERE path = $1 FOR SHARE
), expired AS (
	DELETE FROM dstream_waits w USING s WHERE w.stream_id = s.id AND w.server <> $2 AND w.until <= now()
)
INSERT INTO dstream_waits (stream_id, server, until)
SELECT id, $2, now() + $3 * interval '1 millisecond' FROM s
ON CONFLICT (stream_id, server) DO UPDATE SET until = excluded.until`

// watch registers this Server as waiting on path, unless it is for longer
// than a long-poll may wait. Two long-polls at once may both register.
func (p *pgStorage) watch(ctx context.Context, path string) error {
	if !storable(path) {
		return nil
	}
	now := p.clock.Now()
	p.mu.Lock()
	until, ok := p.waiting[path]
	p.mu.Unlock()
	if ok && until.Sub(now) >= p.waitFor/2 {
		return nil
	}
	if _, err := p.pool.Exec(ctx, registerWait, path, p.server, p.waitFor.Milliseconds()); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting[path] = now.Add(p.waitFor)
	if len(p.waiting) >= p.sweepAt {
		for path, until := range p.waiting {
			if !until.After(now) {
				delete(p.waiting, path)
			}
		}
		p.sweepAt = max(64, 2*len(p.waiting))
	}
	return nil
}

// writeChunks runs insertChunks for chunks appended at tail, returning the
// new tail.
func writeChunks(ctx context.Context, tx pgx.Tx, id int64, tail int, chunks [][]byte, announce string) (int, error) {
	pos := make([]int64, len(chunks))
	for i, c := range chunks {
		pos[i] = int64(tail)
		tail += len(c)
	}
	_, err := tx.Exec(ctx, insertChunks, id, pos, chunks, int64(tail), announce)
	return tail, err
}

func (p *pgStorage) create(ctx context.Context, path string, st *stream) (streamMeta, bool, error) {
	for {
		var (
			existing streamMeta
			found    bool
			created  bool
		)
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO dstream_streams (path, content_type, tail) VALUES ($1, $2, 0)
				ON CONFLICT (path) DO NOTHING RETURNING id`, path, st.contentType).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				existing, found, err = pgStat(ctx, tx, path)
				return err
			}
			if err != nil {
				return err
			}
			created = true
			if chunks := st.chunks(); len(chunks) > 0 {
				_, err = writeChunks(ctx, tx, id, 0, chunks, "")
			}
			return err
		})
		// A stream in the way that is gone by the time it is read was
		// deleted meanwhile: try again.
		if err != nil || created || found {
			return existing, created, err
		}
	}
}

func (p *pgStorage) append(ctx context.Context, path, mediaType string, body []byte) (int, error) {
	if !storable(path) {
		return 0, errNotFound
	}
	var tail int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var (
			id, rowTail int64
			ct          string
		)
		err := tx.QueryRow(ctx, "SELECT id, content_type, tail FROM dstream_streams WHERE path = $1 FOR UPDATE", path).
			Scan(&id, &ct, &rowTail)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		m, err := pgMeta(id, ct, rowTail)
		if err != nil {
			return err
		}
		chunks, e := prepareAppend(m, mediaType, body)
		if e != nil {
			return e
		}
		tail, err = writeChunks(ctx, tx, id, m.tail, chunks, path)
		return err
	})
	return tail, err
}

// readChunks returns a stream's row with the chunks from the one holding
// position $2 on, at most $3 of them unless $3 is NULL; one statement, so
// they agree with the tail.
const readChunks = `
SELECT s.id, s.content_type, s.tail, c.pos, c.data
FROM dstream_streams s
LEFT JOIN LATERAL (
	SELECT pos, data FROM dstream_chunks
	WHERE stream_id = s.id AND pos >= (
		SELECT coalesce(max(pos), 0) FROM dstream_chunks WHERE stream_id = s.id AND pos <= $2)
	ORDER BY pos
	LIMIT $3
) c ON true
WHERE s.path = $1
ORDER BY c.pos`

func (p *pgStorage) read(ctx context.Context, path string, from, chunks int) (snapshot, bool, error) {
	if !storable(path) {
		return snapshot{}, false, nil
	}
	var limit *int64
	if chunks > 0 {
		n := int64(chunks)
		limit = &n
	}
	rows, err := p.pool.Query(ctx, readChunks, path, int64(from), limit)
	if err != nil {
		return snapshot{}, false, err
	}
	var (
		v     snapshot
		found bool
		id    int64
		ct    string
		tail  int64
		pos   *int64
		data  []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &ct, &tail, &pos, &data}, func() error {
		if !found {
			found = true
			m, err := pgMeta(id, ct, tail)
			if err != nil {
				return err
			}
			v.streamMeta = m
			v.base = m.tail
			if pos != nil {
				v.base = int(*pos)
			}
		}
		if pos != nil {
			v.starts = append(v.starts, int(*pos))
			v.data = append(v.data, data...)
		}
		return nil
	})
	if err != nil || !found {
		return snapshot{}, false, err
	}
	if !v.json {
		v.starts = nil
	}
	return v, true, nil
}

// pgStat reads a stream's row through q, a pool or a transaction.
func pgStat(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, path string) (streamMeta, bool, error) {
	var (
		id, tail int64
		ct       string
	)
	err := q.QueryRow(ctx, "SELECT id, content_type, tail FROM dstream_streams WHERE path = $1", path).Scan(&id, &ct, &tail)
	if errors.Is(err, pgx.ErrNoRows) {
		return streamMeta{}, false, nil
	}
	if err != nil {
		return streamMeta{}, false, err
	}
	m, err := pgMeta(id, ct, tail)
	return m, err == nil, err
}

func (p *pgStorage) stat(ctx context.Context, path string) (streamMeta, bool, error) {
	if !storable(path) {
		return streamMeta{}, false, nil
	}
	return pgStat(ctx, p.pool, path)
}

// match reads the streams under the pattern's literal prefix and matches
// each.
func (p *pgStorage) match(ctx context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	rows, err := p.pool.Query(ctx, "SELECT path, tail FROM dstream_streams WHERE starts_with(path, $1)", literalPrefix(pattern))
	if err != nil {
		return nil, err
	}
	var (
		out  []webhooks.StreamInfo
		path string
		tail int64
	)
	_, err = pgx.ForEachRow(rows, []any{&path, &tail}, func() error {
		if pattern.Match(path) {
			out = append(out, streamInfo(path, int(tail)))
		}
		return nil
	})
	return out, err
}

// literalPrefix returns what every path the pattern matches starts with:
// its segments before the first wildcard.
func literalPrefix(pattern *webhooks.Pattern) string {
	s := pattern.String()
	if !strings.HasPrefix(s, "/") {
		return ""
	}
	var lit []string
	for _, seg := range strings.Split(s[1:], "/") {
		if seg == "*" || seg == "**" {
			break
		}
		lit = append(lit, seg)
	}
	return "/" + strings.Join(lit, "/")
}

func (p *pgStorage) remove(ctx context.Context, path string) (bool, error) {
	if !storable(path) {
		return false, nil
	}
	tag, err := p.pool.Exec(ctx, `WITH gone AS (DELETE FROM dstream_streams WHERE path = $1 RETURNING path)
		SELECT pg_notify('`+pgChannel+`', path) FROM gone`, path)
	return tag.RowsAffected() == 1, err
}
