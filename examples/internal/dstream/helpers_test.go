package dstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamhooks/webhooks/internal/pgtest"
)

// TestMain fails the package if any test leaves a goroutine behind, such as a
// long-poll handler that never returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is a Server behind an httptest server on 127.0.0.1.
type fixture struct {
	s  *Server
	ts *httptest.Server
}

// serve starts s; configure s (test hooks) before calling it, so the
// handler goroutines see the configuration without a data race.
func serve(t *testing.T, s *Server) *fixture {
	t.Helper()
	return serveWith(t, s, s)
}

// serveWith is serve with h, which wraps s, as the HTTP handler.
func serveWith(t *testing.T, s *Server, h http.Handler) *fixture {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		s.Close() // ends pending long-polls so ts.Close does not wait for them
		ts.Close()
	})
	return &fixture{s: s, ts: ts}
}

func (f *fixture) url(pathAndQuery string) string { return f.ts.URL + pathAndQuery }

type reply struct {
	code   int
	header http.Header
	body   string
}

// roundTrip sends one request; header holds name/value pairs. It reports
// errors instead of failing the test, so it can run off the test goroutine.
func (f *fixture) roundTrip(ctx context.Context, method, url, contentType, body string, header ...string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func (f *fixture) send(t *testing.T, method, pathAndQuery, contentType, body string, header ...string) reply {
	t.Helper()
	r, err := f.roundTrip(context.Background(), method, f.url(pathAndQuery), contentType, body, header...)
	require.NoError(t, err)
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), "%s %s", method, pathAndQuery)
	return r
}

// mustCreate creates a stream and returns its Stream-Next-Offset.
func (f *fixture) mustCreate(t *testing.T, path, contentType, body string) string {
	t.Helper()
	r := f.send(t, http.MethodPut, path, contentType, body)
	require.Equal(t, http.StatusCreated, r.code, r.body)
	return r.header.Get("Stream-Next-Offset")
}

// mustAppend appends to a stream and returns its new Stream-Next-Offset.
func (f *fixture) mustAppend(t *testing.T, path, contentType, body string) string {
	t.Helper()
	r := f.send(t, http.MethodPost, path, contentType, body)
	require.Equal(t, http.StatusNoContent, r.code, r.body)
	return r.header.Get("Stream-Next-Offset")
}

func off(pos int) string { return formatOffset(pos) }

// watchWaiting sets a testHookWaiting on s that reports on the channel
// each long-poll that starts waiting.
func watchWaiting(s *Server) <-chan struct{} {
	ch := make(chan struct{}, 16)
	s.testHookWaiting = func() {
		select {
		case ch <- struct{}{}:
		default: // no test waits for that many; never block a handler
		}
	}
	return ch
}

// longPoll sends a long-poll GET of pathAndQuery, which must have a query,
// in the background, and returns its reply once it waits, as waiting
// (watchWaiting) reports.
func (f *fixture) longPoll(t *testing.T, waiting <-chan struct{}, pathAndQuery string) <-chan result {
	t.Helper()
	got := f.goSend(boundedCtx(t), http.MethodGet, pathAndQuery+"&live=long-poll")
	receive(t, waiting, "the long-poll to wait")
	return got
}

// receive waits a bounded time for a value, so a broken server fails the
// test instead of hanging it.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

type result struct {
	reply
	err error
}

// goSend sends a request in the background.
func (f *fixture) goSend(ctx context.Context, method, pathAndQuery string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := f.roundTrip(ctx, method, f.url(pathAndQuery), "", "")
		ch <- result{r, err}
	}()
	return ch
}

// eachMode runs test once per storage, with open making a Server with
// empty storage of its own: in memory, and in a PostgreSQL schema.
func eachMode(t *testing.T, test func(t *testing.T, open func(Options) *Server)) {
	t.Run("memory", func(t *testing.T) { test(t, New) })
	t.Run("postgres", func(t *testing.T) {
		pgtest.DSN(t) // skips here, not in a subtest that opens a Server
		test(t, func(opts Options) *Server { return newDatabase(t).open(t)(opts) })
	})
}
