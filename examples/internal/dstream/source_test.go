package dstream

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks"
)

var (
	_ webhooks.StreamSource    = (*Server)(nil)
	_ webhooks.OffsetValidator = (*Server)(nil)
	_ webhooks.EventReader     = (*Server)(nil)
)

// fakeObserver records each call together with what Stream reports at that
// moment, calling back synchronously as the engine does.
type fakeObserver struct {
	s   *Server
	err error

	mu     sync.Mutex
	events []string
}

func (o *fakeObserver) record(ctx context.Context, kind, path string) error {
	state := "missing"
	if info, err := o.s.Stream(ctx, path); err == nil {
		state = info.Tail
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, kind+" "+path+" "+state)
	return o.err
}

func (o *fakeObserver) StreamCreated(ctx context.Context, path string) error {
	return o.record(ctx, "created", path)
}

func (o *fakeObserver) StreamAppended(ctx context.Context, path string) error {
	return o.record(ctx, "appended", path)
}

func (o *fakeObserver) StreamDeleted(ctx context.Context, path string) error {
	return o.record(ctx, "deleted", path)
}

func (o *fakeObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.events
	o.events = nil
	return e
}

func TestObserver(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		obs := &fakeObserver{s: s}
		s.SetObserver(obs) // after New, as a host wiring up its engine does
		f := serve(t, s)

		f.mustCreate(t, "/a", "text/plain", "abc")
		f.send(t, http.MethodPut, "/a", "text/plain", "")       // exists: no call
		f.send(t, http.MethodPut, "/a", "application/json", "") // conflict: no call
		f.send(t, http.MethodPost, "/a", "text/plain", "")      // rejected: no call
		f.send(t, http.MethodPost, "/nope", "text/plain", "x")  // missing: no call
		f.send(t, http.MethodGet, "/a?offset=-1", "", "")       // reads: no call
		f.mustAppend(t, "/a", "text/plain", "de")
		f.mustCreate(t, "/b", "application/json", "")
		f.mustAppend(t, "/b", "application/json", `[1,2]`)
		require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/a", "", "").code)
		f.send(t, http.MethodDelete, "/a", "", "") // missing: no call

		// Each call ran after the change was visible and the locks were released
		// (Stream would deadlock otherwise), and before the response.
		require.Equal(t, []string{
			"created /a " + off(3), // a create with a body is only "created"
			"appended /a " + off(5),
			"created /b " + off(0),
			"appended /b " + off(2), // two messages of one byte each
			"deleted /a missing",
		}, obs.take())

		s.SetObserver(nil)
		f.mustAppend(t, "/b", "application/json", `3`)
		require.Empty(t, obs.take())
	})
}

// TestCreateAndAppendInProcess checks Create and Append, the calls a host
// in the same process makes instead of PUT and POST: they change the
// stream as those do, tell the Observer, and wake long-polls.
func TestCreateAndAppendInProcess(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{MaxBodyBytes: 16})
		obs := &fakeObserver{s: s}
		s.SetObserver(obs)
		waiting := watchWaiting(s)
		f := serve(t, s)
		ctx := context.Background()

		require.NoError(t, s.Create(ctx, "/j", "application/json"))
		require.NoError(t, s.Create(ctx, "/j", "application/json; charset=utf-8"), "exists with the same media type")
		require.Error(t, s.Create(ctx, "/j", "text/plain"), "exists with another media type")
		require.Error(t, s.Create(ctx, "/x", "not a media type"))

		polled := f.longPoll(t, waiting, "/j?offset="+off(0))
		require.NoError(t, s.Append(ctx, "/j", []byte(`{"n": 1}`)))
		got := receive(t, polled, "the long-poll's reply")
		require.NoError(t, got.err)
		require.Equal(t, `[{"n":1}]`, got.body)

		require.Error(t, s.Append(ctx, "/j", []byte(`{"n":`)), "not JSON")
		require.Error(t, s.Append(ctx, "/j", []byte(`"0123456789abcdef"`)), "over MaxBodyBytes")
		require.Error(t, s.Append(ctx, "/missing", []byte(`1`)))
		require.Equal(t, []string{"created /j " + off(0), "appended /j " + off(7)}, obs.take())
	})
}

// syncBuffer is a bytes.Buffer safe for a logger on the handler goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestObserverErrorsAreLoggedNotReturned(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		var logs syncBuffer
		s := open(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		obs := &fakeObserver{s: s, err: errors.New("engine unavailable")}
		s.SetObserver(obs)
		f := serve(t, s)

		f.mustCreate(t, "/a", "text/plain", "")
		f.mustAppend(t, "/a", "text/plain", "x")
		require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/a", "", "").code)

		require.Len(t, obs.take(), 3)
		out := logs.String()
		for _, event := range []string{"event=created", "event=appended", "event=deleted"} {
			require.Contains(t, out, event)
		}
		require.Contains(t, out, "engine unavailable")
		require.Contains(t, out, "path=/a")
	})
}

func TestObserverOption(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		obs := &fakeObserver{}
		s := open(Options{Observer: obs})
		obs.s = s
		f := serve(t, s)

		f.mustCreate(t, "/a", "text/plain", "")
		require.Equal(t, []string{"created /a " + off(0)}, obs.take())
	})
}

func TestStreamSource(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		f := serve(t, s)
		ctx := context.Background()

		_, err := s.Stream(ctx, "/agents/a")
		require.ErrorIs(t, err, webhooks.ErrStreamNotFound)

		f.mustCreate(t, "/agents/b", "application/json", "")
		f.mustCreate(t, "/agents/a", "text/plain", "")
		tail := f.mustAppend(t, "/agents/a", "text/plain", "hello")
		f.mustCreate(t, "/agents/a/sub", "text/plain", "x")
		f.mustCreate(t, "/other/c", "text/plain", "x")

		info, err := s.Stream(ctx, "/agents/a")
		require.NoError(t, err)
		require.Equal(t, webhooks.StreamInfo{Path: "/agents/a", Tail: tail}, info)

		info, err = s.Stream(ctx, "/agents/b")
		require.NoError(t, err)
		require.Equal(t, webhooks.StreamInfo{Path: "/agents/b", Tail: off(0), Empty: true}, info)

		p, err := webhooks.ParsePattern("/agents/*")
		require.NoError(t, err)
		got, err := s.MatchStreams(ctx, p)
		require.NoError(t, err)
		require.Equal(t, []webhooks.StreamInfo{
			{Path: "/agents/a", Tail: tail},
			{Path: "/agents/b", Tail: off(0), Empty: true},
		}, got)

		p, err = webhooks.ParsePattern("/none/*")
		require.NoError(t, err)
		got, err = s.MatchStreams(ctx, p)
		require.NoError(t, err)
		require.Empty(t, got)

		f.send(t, http.MethodDelete, "/agents/b", "", "")
		_, err = s.Stream(ctx, "/agents/b")
		require.ErrorIs(t, err, webhooks.ErrStreamNotFound)
	})
}

// TestReadEvents reads a JSON stream's messages and a byte stream's bytes
// within limits, in every storage mode.
func TestReadEvents(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		f := serve(t, s)
		ctx := context.Background()
		read := func(path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, []string) {
			t.Helper()
			b, err := s.ReadEvents(ctx, path, from, limit)
			require.NoError(t, err)
			var events []string
			for _, e := range b.Events {
				events = append(events, string(e))
			}
			return b, events
		}

		f.mustCreate(t, "/j", "application/json", "")
		b, events := read("/j", "-1", webhooks.ReadLimit{})
		require.Empty(t, events)
		require.Equal(t, webhooks.EventBatch{JSON: true, Next: off(0), UpToDate: true}, b, "an empty stream")
		f.mustAppend(t, "/j", "application/json", `[{"n":1},{"n":2}]`)
		const third = `{"n":3,"pad":"xxxxxxxxxx"}`
		tail := f.mustAppend(t, "/j", "application/json", third)

		b, events = read("/j", "-1", webhooks.ReadLimit{})
		require.Equal(t, []string{`{"n":1}`, `{"n":2}`, third}, events)
		require.Equal(t, tail, b.Next)
		require.True(t, b.UpToDate)

		b, events = read("/j", "-1", webhooks.ReadLimit{MaxEvents: 2})
		require.Equal(t, []string{`{"n":1}`, `{"n":2}`}, events, "at most MaxEvents")
		require.Equal(t, off(14), b.Next)
		require.False(t, b.UpToDate)
		b, events = read("/j", b.Next, webhooks.ReadLimit{MaxEvents: 2})
		require.Equal(t, []string{third}, events, "on from Next")
		require.Equal(t, tail, b.Next)
		require.True(t, b.UpToDate)

		b, events = read("/j", "-1", webhooks.ReadLimit{MaxBytes: 13})
		require.Equal(t, []string{`{"n":1}`}, events, "at most MaxBytes in all")
		require.Equal(t, off(7), b.Next)
		_, events = read("/j", "-1", webhooks.ReadLimit{MaxBytes: 14})
		require.Equal(t, []string{`{"n":1}`, `{"n":2}`}, events, "MaxBytes is inclusive")
		_, events = read("/j", off(14), webhooks.ReadLimit{MaxBytes: 1})
		require.Equal(t, []string{third}, events, "the first event, whatever its size")

		b, events = read("/j", tail, webhooks.ReadLimit{})
		require.Empty(t, events)
		require.Equal(t, tail, b.Next)
		require.True(t, b.UpToDate)

		b, events = read("/j", "-1", webhooks.ReadLimit{Until: off(14)})
		require.Equal(t, []string{`{"n":1}`, `{"n":2}`}, events, "nothing at or past Until")
		require.Equal(t, off(14), b.Next)
		require.False(t, b.UpToDate)
		_, events = read("/j", "-1", webhooks.ReadLimit{Until: off(14), MaxEvents: 1})
		require.Equal(t, []string{`{"n":1}`}, events, "Until and a limit: the nearer")
		b, events = read("/j", off(14), webhooks.ReadLimit{Until: off(14)})
		require.Empty(t, events, "from Until")
		require.Equal(t, off(14), b.Next)
		_, err := s.ReadEvents(ctx, "/j", "-1", webhooks.ReadLimit{Until: "now"})
		require.Error(t, err, "Until names a position")

		for _, from := range []string{off(3), "now", "x", off(1000)} {
			_, err := s.ReadEvents(ctx, "/j", from, webhooks.ReadLimit{})
			require.Error(t, err, from)
		}
		_, err = s.ReadEvents(ctx, "/missing", "-1", webhooks.ReadLimit{})
		require.ErrorIs(t, err, webhooks.ErrStreamNotFound)

		f.mustCreate(t, "/b", "text/plain", "hello")
		tail = f.mustAppend(t, "/b", "text/plain", " world")
		b, events = read("/b", "-1", webhooks.ReadLimit{MaxBytes: 4, MaxEvents: 1})
		require.Equal(t, []string{"hell"}, events, "a byte stream's bytes, cut at MaxBytes")
		require.False(t, b.JSON)
		require.Equal(t, off(4), b.Next)
		require.False(t, b.UpToDate)
		b, events = read("/b", b.Next, webhooks.ReadLimit{})
		require.Equal(t, []string{"o world"}, events, "across appends: a byte stream has no boundaries")
		require.Equal(t, tail, b.Next)
		require.True(t, b.UpToDate)
		b, events = read("/b", tail, webhooks.ReadLimit{})
		require.Empty(t, events, "no event at the tail")
		require.Equal(t, tail, b.Next)
		b, events = read("/b", off(1), webhooks.ReadLimit{Until: off(5)})
		require.Equal(t, []string{"ello"}, events, "a byte stream's bytes, up to Until")
		require.Equal(t, off(5), b.Next)
	})
}

// TestValidOffset checks that the engine is told to accept exactly the
// offsets this server issues: a reader could not resume from any other.
func TestValidOffset(t *testing.T) {
	s := New(Options{})
	for _, o := range []string{off(0), off(16), "0000000000000000_9999999999999999"} {
		require.True(t, s.ValidOffset(o), o)
	}
	for _, o := range []string{
		"0000000000000000_00000000000000!!",
		"0000000000000001_0000000000000000", // another read sequence
		"0000000000000000-0000000000000000",
		"000000000000000_00000000000000000",
		"0000000000000000_000000000000000",
		"0000000000000000_0000000000000000_",
		"-1", "now", "",
	} {
		require.False(t, s.ValidOffset(o), o)
	}
}
