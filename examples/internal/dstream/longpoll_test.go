package dstream

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// boundedCtx bounds a request that must not wait for the long-poll timeout.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLongPollAnswersAtOnceWhenDataExists(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{})) // 30s timeout: waiting would fail the bounded request
		f.mustCreate(t, "/s", "text/plain", "abc")

		r, err := f.roundTrip(boundedCtx(t), http.MethodGet, f.url("/s?offset=-1&live=long-poll"), "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, "abc", r.body)
		require.Equal(t, off(3), r.header.Get("Stream-Next-Offset"))
		require.Equal(t, "true", r.header.Get("Stream-Up-To-Date"))
		require.NotEmpty(t, r.header.Get("Stream-Cursor"))
	})
}

func TestLongPollWakesOnAppend(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		for _, offset := range []string{off(7), "now"} {
			t.Run(offset, func(t *testing.T) {
				s := open(Options{})
				waiting := watchWaiting(s)
				f := serve(t, s)
				f.mustCreate(t, "/j", "application/json", `{"n":0}`)

				got := f.longPoll(t, waiting, "/j?offset="+offset)
				tail := f.mustAppend(t, "/j", "application/json", `[{"n":1},{"n":2}]`)

				r := receive(t, got, "the long-poll reply")
				require.NoError(t, r.err)
				require.Equal(t, http.StatusOK, r.code)
				require.Equal(t, `[{"n":1},{"n":2}]`, r.body)
				require.Equal(t, tail, r.header.Get("Stream-Next-Offset"))
				require.Equal(t, "true", r.header.Get("Stream-Up-To-Date"))
				require.NotEmpty(t, r.header.Get("Stream-Cursor"))
				require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
			})
		}
	})
}

func TestLongPollTimeout(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		mock := mockclock.New()
		mock.Set(cursorEpoch.Add(100*cursorInterval + time.Second))
		s := open(Options{Clock: mock, LongPollTimeout: 5 * time.Second})
		waiting := watchWaiting(s)
		f := serve(t, s)
		tail := f.mustCreate(t, "/s", "text/plain", "abc")

		got := f.longPoll(t, waiting, "/s?offset="+tail)
		mock.Add(5 * time.Second)

		r := receive(t, got, "the long-poll reply")
		require.NoError(t, r.err)
		require.Equal(t, http.StatusNoContent, r.code)
		require.Empty(t, r.body)
		require.Equal(t, tail, r.header.Get("Stream-Next-Offset"))
		require.Equal(t, "true", r.header.Get("Stream-Up-To-Date"))
		require.Equal(t, "100", r.header.Get("Stream-Cursor"))
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	})
}

// TestLongPollTimeoutWallClock drives a real long-poll with a tiny timeout,
// covering the default clock.
func TestLongPollTimeoutWallClock(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{LongPollTimeout: 20 * time.Millisecond}))
		f.mustCreate(t, "/j", "application/json", "")

		r, err := f.roundTrip(boundedCtx(t), http.MethodGet, f.url("/j?offset=-1&live=long-poll"), "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, r.code)
		require.Equal(t, off(0), r.header.Get("Stream-Next-Offset"))
		require.NotEmpty(t, r.header.Get("Stream-Cursor"))
	})
}

func TestLongPollStreamDeleted(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		waiting := watchWaiting(s)
		f := serve(t, s)
		f.mustCreate(t, "/s", "text/plain", "")

		got := f.longPoll(t, waiting, "/s?offset=-1")
		require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/s", "", "").code)
		// A new stream at the same path is not what the long-poll was reading.
		f.mustCreate(t, "/s", "text/plain", "new")

		r := receive(t, got, "the long-poll reply")
		require.NoError(t, r.err)
		require.Equal(t, http.StatusNotFound, r.code)
	})
}

func TestLongPollEndsWhenClientLeaves(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		waiting := watchWaiting(s)
		returned := make(chan struct{})
		f := serveWith(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.ServeHTTP(w, r)
			if r.URL.Query().Has("live") {
				close(returned)
			}
		}))
		f.mustCreate(t, "/s", "text/plain", "")

		ctx, cancel := context.WithCancel(context.Background())
		got := f.goSend(ctx, http.MethodGet, "/s?offset=-1&live=long-poll")
		receive(t, waiting, "the long-poll to wait")
		cancel()

		receive(t, returned, "the handler to return") // the server has 30s left on its timeout
		require.ErrorIs(t, receive(t, got, "the client to give up").err, context.Canceled)
	})
}

func TestCloseEndsLongPolls(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		waiting := watchWaiting(s)
		f := serve(t, s)
		tail := f.mustCreate(t, "/s", "text/plain", "abc")

		got := f.longPoll(t, waiting, "/s?offset="+tail)
		s.Close()

		r := receive(t, got, "the long-poll reply")
		require.NoError(t, r.err)
		require.Equal(t, http.StatusNoContent, r.code)
		require.Equal(t, tail, r.header.Get("Stream-Next-Offset"))

		// Later long-polls answer at once; other requests still work.
		r2, err := f.roundTrip(boundedCtx(t), http.MethodGet, f.url("/s?offset=now&live=long-poll"), "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, r2.code)
		f.mustAppend(t, "/s", "text/plain", "d")
		s.Close() // idempotent
	})
}

func TestCursor(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		mock := mockclock.New()
		mock.Set(cursorEpoch.Add(100*cursorInterval + time.Second))
		s := open(Options{Clock: mock})

		for echoed, want := range map[string]string{
			"":    "100",
			"99":  "100", // behind: the current interval
			"100": "101", // not behind: must move forward
			"250": "251",
			"x":   "100", // not ours: treated as absent
		} {
			require.Equal(t, want, s.nextCursor(echoed), "echoed %q", echoed)
		}
		mock.Add(cursorInterval)
		require.Equal(t, "101", s.nextCursor(""))

		f := serve(t, s)
		f.mustCreate(t, "/s", "text/plain", "abc")
		r := f.send(t, http.MethodGet, "/s?offset=-1&live=long-poll&cursor=101", "", "")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, "102", r.header.Get("Stream-Cursor"))
	})
}
