package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/internal/openapitest"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on an asynchronous signal. Tests never wait on a
// timer: time moves only when a test advances the mock clock. The bound only
// ends a test that has failed, so it is generous: on a busy 2-core machine
// under -race, six failing deliveries and their Store writes took over 5 s.
const waitFor = 30 * time.Second

// testStart is where every mock clock starts.
var testStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// offset formats a byte position the way the example server does.
func offset(n int) string { return fmt.Sprintf("%016d_%016d", 0, n) }

// fakeSource is a StreamSource whose streams are byte counters, or, once
// given events, JSON streams whose offsets count their events, or byte
// streams whose offsets count their bytes. It reads their events
// (webhooks.EventReader); a counter reads as a byte stream of 'x'.
type fakeSource struct {
	mu      sync.Mutex
	streams map[string]int
	events  map[string][][]byte // a JSON stream's events
	bytes   map[string][]byte   // a byte stream's bytes
	reads   int                 // ReadEvents calls
	// eventOffsets makes ReadEvents give a JSON stream's events' offsets.
	eventOffsets bool
}

func newFakeSource() *fakeSource {
	return &fakeSource{streams: map[string]int{}, events: map[string][][]byte{}, bytes: map[string][]byte{}}
}

func (s *fakeSource) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return webhooks.StreamInfo{Path: path, Tail: offset(n), Empty: n == 0}, nil
}

func (s *fakeSource) MatchStreams(_ context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []webhooks.StreamInfo
	for path, n := range s.streams {
		if p.Match(path) {
			out = append(out, webhooks.StreamInfo{Path: path, Tail: offset(n), Empty: n == 0})
		}
	}
	return out, nil
}

func (s *fakeSource) set(path string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[path] = n
}

func (s *fakeSource) grow(path string, by int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[path] += by
	return offset(s.streams[path])
}

func (s *fakeSource) remove(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams, path)
	delete(s.events, path)
	delete(s.bytes, path)
}

// delivery is one webhook POST as the receiver saw it.
type delivery struct {
	header http.Header
	body   []byte
	n      receiver.Notification
	ctx    context.Context // the request's context; done when the engine gives up
}

// reply is how the receiver answers one delivery.
type reply struct {
	status int
	body   string
	hold   chan struct{} // if set, the answer waits until it is closed
	header http.Header   // added to the answer
}

// endpoint is a webhook endpoint on loopback. Each delivery is sent on
// deliveries; the answer is taken from replies, or 200 "" if none is queued.
type endpoint struct {
	srv        *httptest.Server
	deliveries chan delivery
	mu         sync.Mutex
	replies    []reply
}

func newReceiver(t testing.TB) *endpoint {
	r := &endpoint{deliveries: make(chan delivery, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var n receiver.Notification
		_ = json.Unmarshal(body, &n)
		r.mu.Lock()
		rep := reply{status: http.StatusOK}
		if len(r.replies) > 0 {
			rep, r.replies = r.replies[0], r.replies[1:]
		}
		r.mu.Unlock()
		select {
		case r.deliveries <- delivery{header: req.Header.Clone(), body: body, n: n, ctx: req.Context()}:
		case <-req.Context().Done():
			return
		}
		if rep.hold != nil {
			select {
			case <-rep.hold:
			case <-req.Context().Done():
				return
			}
		}
		for k, v := range rep.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// queue sets the answers to the next deliveries, in order.
func (r *endpoint) queue(replies ...reply) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies = append(r.replies, replies...)
}

func (r *endpoint) url() string { return r.srv.URL + "/hook" }

// harness is an engine on a mock clock, a store (memory unless the test
// passes one), a fake source and one webhook receiver.
type harness struct {
	t       testing.TB
	clock   *mockclock.Clock
	store   webhooks.Store
	source  *fakeSource
	recv    *endpoint
	engine  *webhooks.Engine
	handler http.Handler
	// wrap, if set, gives the engine another view of source.
	wrap func(*fakeSource) webhooks.StreamSource
	// beforeStart, if set, is called with each engine before it starts,
	// to turn on the signals a test waits on.
	beforeStart func(e *webhooks.Engine)
	// dsSignals adds the __ds scheduler's and attempts' signals to
	// progressed (reserved_test.go).
	dsSignals bool
	// progressed receives a token after the engines' consumer writes and
	// ended deliveries; engines on one Store share it (see signals).
	progressed chan struct{}
}

// signals returns the channel h's engines signal after their consumer
// writes and ended deliveries, making it on first use. A harness for a
// second engine on the same Store takes the first one's, so that a wait on
// either sees both.
func (h *harness) signals() chan struct{} {
	if h.progressed == nil {
		h.progressed = make(chan struct{}, 1)
	}
	return h.progressed
}

const callbackBase = "http://streams.test"

// testPollInterval is the harness engines' poll interval. Tests move the
// mock clock by up to days, and the mock fires every poll timer on the way
// at a millisecond of real time each: an hourly poll keeps that short.
// TestSchedulerPollsTheStore checks the default.
const testPollInterval = time.Hour

func newMockClock() *mockclock.Clock {
	c := mockclock.New()
	c.Set(testStart)
	return c
}

func newHarness(t testing.TB, opts ...webhooks.Option) *harness {
	t.Helper()
	return newHarnessStore(t, memstore.New(), opts...)
}

// newHarnessStore is newHarness over store, which the caller closes.
func newHarnessStore(t testing.TB, store webhooks.Store, opts ...webhooks.Option) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		clock:  newMockClock(),
		store:  store,
		source: newFakeSource(),
		recv:   newReceiver(t),
	}
	h.startEngine(opts...)
	return h
}

// newHarnessWrapped is newHarness with an engine that sees its source
// through wrap.
func newHarnessWrapped(t testing.TB, wrap func(*fakeSource) webhooks.StreamSource, opts ...webhooks.Option) *harness {
	t.Helper()
	h := &harness{t: t, clock: newMockClock(), store: memstore.New(), source: newFakeSource(), recv: newReceiver(t), wrap: wrap}
	h.startEngine(opts...)
	return h
}

// startEngine starts a new engine over h's store and source, stopped when
// the test ends, and makes it h's engine.
func (h *harness) startEngine(opts ...webhooks.Option) {
	h.t.Helper()
	base := []webhooks.Option{
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithPollInterval(testPollInterval),
	}
	var source webhooks.StreamSource = h.source
	if h.wrap != nil {
		source = h.wrap(h.source)
	}
	e, err := webhooks.New(h.store, source, append(base, opts...)...)
	require.NoError(h.t, err)
	webhooks.SignalProgress(e, h.signals())
	if h.beforeStart != nil {
		h.beforeStart(e)
	}
	if h.dsSignals {
		webhooks.SignalDSProgress(e, h.signals())
	}
	h.engine = e
	h.handler = apiHandler(h.t, e)
	startForTest(h.t, e)
}

// apiHandler is e's handler behind a check of every exchange against the
// OpenAPI document: a response it does not allow, or a route it lacks,
// fails t.
func apiHandler(t testing.TB, e *webhooks.Engine) http.Handler {
	t.Helper()
	return openapitest.Handler(t, e.Handler(http.NotFoundHandler()))
}

// startForTest starts e and stops it when the test ends.
func startForTest(t testing.TB, e *webhooks.Engine) {
	t.Helper()
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, e.Stop(ctx))
	})
}

// do sends a request through the engine's combined handler.
func (h *harness) do(method, target, body string, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(method, target, bytes.NewBufferString(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	return rec
}

// subscribe creates subscription id on pattern to the receiver and returns
// its secret.
func (h *harness) subscribe(id, pattern string) string {
	h.t.Helper()
	rec := h.do(http.MethodPut, pattern+"?subscription="+id, fmt.Sprintf(`{"webhook":%q}`, h.recv.url()))
	require.Equal(h.t, http.StatusCreated, rec.Code, rec.Body.String())
	var out struct {
		Secret string `json:"webhook_secret"`
	}
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out))
	return out.Secret
}

// create makes a stream with n bytes and tells the engine.
func (h *harness) create(path string, n int) {
	h.t.Helper()
	h.source.set(path, n)
	require.NoError(h.t, h.engine.StreamCreated(context.Background(), path))
}

// appendTo grows a stream by n bytes, tells the engine and returns the tail.
func (h *harness) appendTo(path string, n int) string {
	h.t.Helper()
	tail := h.source.grow(path, n)
	require.NoError(h.t, h.engine.StreamAppended(context.Background(), path))
	return tail
}

// nextDelivery waits for the receiver's next webhook POST.
func (h *harness) nextDelivery() delivery {
	h.t.Helper()
	select {
	case d := <-h.recv.deliveries:
		return d
	case <-time.After(waitFor):
		h.t.Fatal("no webhook delivery arrived")
		return delivery{}
	}
}

// consumer reads a consumer from the store, failing if it is missing.
func (h *harness) consumer(id string) *webhooks.Consumer {
	h.t.Helper()
	c, err := h.store.GetConsumer(context.Background(), id)
	require.NoError(h.t, err)
	return c
}

// waitConsumer waits until the stored consumer satisfies cond, looking
// again after each consumer write of h's engines.
func (h *harness) waitConsumer(id string, cond func(c *webhooks.Consumer) bool) *webhooks.Consumer {
	h.t.Helper()
	var last *webhooks.Consumer
	ok := h.waitProgress(func() bool {
		c, err := h.store.GetConsumer(context.Background(), id)
		if err != nil {
			return false
		}
		last = c
		return cond(c)
	})
	if !ok {
		h.t.Fatalf("consumer %s never reached the expected state; last: %+v", id, last)
	}
	return last
}

// waitGone waits until the consumer is removed.
func (h *harness) waitGone(id string) {
	h.t.Helper()
	ok := h.waitProgress(func() bool {
		_, err := h.store.GetConsumer(context.Background(), id)
		return err != nil
	})
	if !ok {
		h.t.Fatalf("consumer %s was not removed", id)
	}
}

// waitDead waits until consumer id is a dead letter.
func (h *harness) waitDead(id string) *webhooks.Consumer {
	h.t.Helper()
	return h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateFailed })
}

// waitProgress checks done now and after each consumer write and ended
// delivery of h's engines, until it holds or waitFor passes, and reports
// whether it held.
func (h *harness) waitProgress(done func() bool) bool {
	timeout := time.After(waitFor)
	for !done() {
		select {
		case <-h.signals():
		case <-timeout:
			return false
		}
	}
	return true
}

// settled reports a consumer that no pending engine work will change: not
// in flight, and with its next deadline in the future or unset.
func (h *harness) settled(c *webhooks.Consumer) bool {
	return !c.InFlight && (c.Deadline.IsZero() || c.Deadline.After(h.clock.Now()))
}

// callbackResult is a decoded callback response.
type callbackResult struct {
	status int
	body   receiver.CallbackResponse
	raw    string
}

// callback POSTs body to consumer id's callback URL with token.
func (h *harness) callback(id, token string, body any) callbackResult {
	h.t.Helper()
	data, err := json.Marshal(body)
	require.NoError(h.t, err)
	return h.rawCallback(id, token, string(data))
}

func (h *harness) rawCallback(id, token, body string) callbackResult {
	h.t.Helper()
	rec := h.do(http.MethodPost, "/callback/"+id, body, "Authorization", "Bearer "+token, "Content-Type", "application/json")
	var out receiver.CallbackResponse
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return callbackResult{status: rec.Code, body: out, raw: rec.Body.String()}
}

// requireError checks a callback failed with status and code.
func requireError(t *testing.T, r callbackResult, status int, code receiver.ErrorCode) {
	t.Helper()
	require.Equal(t, status, r.status, r.raw)
	require.False(t, r.body.OK, r.raw)
	require.NotNil(t, r.body.Error, r.raw)
	require.Equal(t, code, r.body.Error.Code, r.raw)
	require.NotEmpty(t, r.body.Error.Message, r.raw)
}

func epoch(n int64) *int64 { return &n }

// wake drives consumer id through its first wake: subscription sub on
// pattern, stream path created with 10 bytes, webhook answered 200 unless
// replies say otherwise. It returns the delivery.
func (h *harness) wake(sub, pattern, path string) delivery {
	h.t.Helper()
	h.subscribe(sub, pattern)
	h.create(path, 10)
	return h.nextDelivery()
}

func streamOffsets(pairs ...string) []webhooks.StreamOffset {
	var out []webhooks.StreamOffset
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, webhooks.StreamOffset{Path: pairs[i], Offset: pairs[i+1]})
	}
	return out
}

func sortedPaths(s []webhooks.StreamOffset) []string {
	var out []string
	for _, o := range s {
		out = append(out, o.Path)
	}
	slices.Sort(out)
	return out
}
