package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// failedMsg is the message of the line logged for a failed attempt.
const failedMsg = "webhooks: delivery attempt failed"

// logCapture collects a JSON slog handler's lines.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func newLogCapture() (*logCapture, *slog.Logger) {
	l := &logCapture{}
	return l, slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the lines logged so far with message msg.
func (l *logCapture) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(l.buf.Bytes()))
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// failHarness is a harness whose engine logs to a capture and reports
// metrics and spans.
type failHarness struct {
	*harness
	logs   *logCapture
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

// newFailHarness returns a failHarness. Unless webhook is empty, its store
// holds subscription s1 on /agents/* to webhook, stored directly: the
// subscription API would refuse some webhooks up front.
func newFailHarness(t *testing.T, webhook string, opts ...webhooks.Option) *failHarness {
	t.Helper()
	store := memstore.New()
	if webhook != "" {
		require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
			ID: "s1", Pattern: "/agents/*", Webhook: webhook, Secret: "whsec_x",
		}))
	}
	logs, logger := newLogCapture()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
	base := []webhooks.Option{webhooks.WithLogger(logger), webhooks.WithMeterProvider(mp),
		webhooks.WithTracerProvider(tp), faultConstBackoff(time.Hour)}
	h := newHarnessStore(t, store, append(base, opts...)...)
	return &failHarness{harness: h, logs: logs, reader: reader, spans: spans}
}

// failures returns the failure counter's points by error class.
func (fh *failHarness) failures(t *testing.T) map[string]int64 {
	t.Helper()
	th := &telHarness{harness: fh.harness, reader: fh.reader}
	m := th.telCollect()
	if _, ok := m["webhooks.delivery.failures"]; !ok {
		return map[string]int64{}
	}
	return telInt64Points(t, m["webhooks.delivery.failures"], "error_class")
}

// Every kind of failed attempt is logged once at Warn, with its
// subscription, consumer, attempt, class, status or error, and the retry
// time; and counted by class.
func TestFailedAttemptsAreLoggedAndCounted(t *testing.T) {
	statusServer := func(t *testing.T, status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/hook"
	}
	for _, tc := range []struct {
		name   string
		class  string
		status int    // for an HTTP answer
		detail string // in the error, for no answer
		// setup returns the webhook URL and engine options; run, if set,
		// makes the attempt fail once it is under way.
		setup func(t *testing.T) (url string, opts []webhooks.Option, run func(h *harness))
	}{
		{name: "500", class: "status_5xx", status: 500, setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			return statusServer(t, 500), nil, nil
		}},
		{name: "404", class: "status_4xx", status: 404, setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			return statusServer(t, 404), nil, nil
		}},
		{name: "302", class: "status_3xx", status: 302, setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			return statusServer(t, 302), nil, nil
		}},
		{name: "request timeout", class: "timeout", detail: "webhook request timed out", setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			arrived := make(chan struct{}, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the engine hang up
				arrived <- struct{}{}
				<-r.Context().Done()
			}))
			t.Cleanup(srv.Close)
			return srv.URL + "/hook", []webhooks.Option{webhooks.WithTimeouts(time.Hour, 0, 30*time.Second)}, func(h *harness) {
				receive(t, arrived)
				h.clock.Add(30 * time.Second)
			}
		}},
		{name: "connection refused", class: "connect", detail: "connection refused", setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			require.NoError(t, ln.Close())
			return "http://" + ln.Addr().String() + "/hook", nil, nil
		}},
		{name: "connection reset", class: "body", detail: "reset", setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			srv := newFaultServer(t, func(c net.Conn) {
				_, _ = faultReadRequest(c)
				faultReset(c)
			})
			return srv.url(), nil, nil
		}},
		{name: "SSRF refused at dial", class: "ssrf_blocked", detail: "127.0.0.1 is loopback", setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			port, conns, _ := faultCountingServer(t, "127.0.0.1")
			t.Cleanup(func() { require.Zero(t, conns.Load()) })
			return "http://127.0.0.1:" + port + "/hook", []webhooks.Option{webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{})}, nil
		}},
		{name: "untrusted certificate", class: "tls", detail: "certificate", setup: func(t *testing.T) (string, []webhooks.Option, func(*harness)) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.StartTLS()
			t.Cleanup(srv.Close)
			return srv.URL + "/hook", nil, nil
		}},
		{name: "name does not resolve", class: "dns", detail: "lookup hooks.example", setup: func(*testing.T) (string, []webhooks.Option, func(*harness)) {
			d := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
				return nil, errors.New("no DNS server in this test")
			}}}
			return "https://hooks.example/hook", []webhooks.Option{webhooks.WithHTTPTransport(&http.Transport{DialContext: d.DialContext})}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, opts, run := tc.setup(t)
			fh := newFailHarness(t, url, opts...)
			fh.create(agentA, 10)
			if run != nil {
				run(fh.harness)
			}
			c := fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
			fh.faultRequireSettled(agentAID)

			lines := fh.logs.lines(t, failedMsg)
			require.Len(t, lines, 1)
			line := lines[0]
			require.Equal(t, "WARN", line["level"])
			require.Equal(t, "s1", line["subscription_id"])
			require.Equal(t, agentAID, line["consumer_id"])
			require.Equal(t, 1.0, line["attempt"])
			require.Equal(t, tc.class, line["error_class"])
			require.Equal(t, c.Deadline.Format(time.RFC3339Nano), line["next_retry"])
			require.Equal(t, fh.clock.Now().Add(time.Hour), c.Deadline)
			require.NotContains(t, line, "suppressed")
			if tc.status != 0 {
				require.Equal(t, float64(tc.status), line["status"])
				require.NotContains(t, line, "error")
			} else {
				require.NotContains(t, line, "status")
				require.Contains(t, line["error"], tc.detail)
				require.NotContains(t, line["error"], url, "the URL is left out")
			}

			require.Equal(t, map[string]int64{tc.class: 1}, fh.failures(t))
			var classes []string
			for _, s := range fh.spans.Ended() {
				if s.Name() == "webhooks.deliver" {
					classes = append(classes, telAttrs(s)["webhooks.error_class"].AsString())
				}
			}
			require.Equal(t, []string{tc.class}, classes)
		})
	}
}

// A successful attempt logs no failure and counts none.
func TestSuccessfulAttemptIsNotAFailure(t *testing.T) {
	fh := newFailHarness(t, "")
	fh.recv.srv.Config.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	fh.subscribe("s2", "/tools/*")
	fh.create("/tools/x", 10)
	fh.waitConsumer(webhooks.ConsumerID("s2", "/tools/x"), func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	fh.faultRequireSettled(webhooks.ConsumerID("s2", "/tools/x"))
	require.Empty(t, fh.logs.lines(t, failedMsg))
	require.Empty(t, fh.failures(t))
}

// A storm of failures of one subscription logs at most the bound; the next
// line it may log says how many were left out. Another subscription failing
// meanwhile still gets its own lines. Every failure is counted.
func TestFailureStormLogIsBounded(t *testing.T) {
	const storm, others = 1000, 5
	fh := newFailHarness(t, "")
	fh.recv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	fh.subscribe("storm", "/agents/*")
	fh.subscribe("other", "/tools/*")
	for i := range storm {
		fh.create(fmt.Sprintf("/agents/%d", i), 1)
		if i%(storm/others) == 0 {
			fh.create(fmt.Sprintf("/tools/%d", i), 1)
		}
	}
	require.True(t, fh.waitProgress(func() bool { return fh.failures(t)["status_5xx"] == storm+others }))
	require.True(t, fh.waitProgress(func() bool { return webhooks.FaultSlotsInUse(fh.engine) == 0 }), "a delivery never ended")

	bySub := func() map[string][]map[string]any {
		out := map[string][]map[string]any{}
		for _, l := range fh.logs.lines(t, failedMsg) {
			out[l["subscription_id"].(string)] = append(out[l["subscription_id"].(string)], l)
		}
		return out
	}
	lines := bySub()
	require.Len(t, lines["storm"], webhooks.FailureLogBurst)
	require.Len(t, lines["other"], others)
	for _, l := range append(lines["storm"], lines["other"]...) {
		require.NotContains(t, l, "suppressed")
	}

	fh.clock.Add(webhooks.FailureLogEvery)
	fh.create("/agents/last", 1)
	require.True(t, fh.waitProgress(func() bool { return fh.failures(t)["status_5xx"] == storm+others+1 }))
	id := webhooks.ConsumerID("storm", "/agents/last")
	fh.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.Failures == 1 })
	fh.faultRequireSettled(id)
	lines = bySub()
	require.Len(t, lines["storm"], webhooks.FailureLogBurst+1)
	last := lines["storm"][webhooks.FailureLogBurst]
	require.Equal(t, id, last["consumer_id"])
	require.Equal(t, float64(storm-webhooks.FailureLogBurst), last["suppressed"])
	require.Len(t, lines["other"], others)
	require.True(t, strings.HasPrefix(last["next_retry"].(string), "2026-"))
}

// An attempt that hangs past the WAKING timeout is logged once, when the
// timeout fails it, with the retry it scheduled; its POST ending later at
// the request timeout adds no second line.
func TestHungAttemptIsLoggedAtItsWakingTimeout(t *testing.T) {
	fh := newFailHarness(t, "")
	hold := make(chan struct{})
	defer close(hold)
	fh.recv.queue(reply{status: http.StatusOK, hold: hold})
	d := fh.wake("s1", "/agents/*", agentA)
	fh.clock.Add(webhooks.DefaultWakingTimeout)
	c := fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	// Logged after the write, before the scheduler parks again.
	require.True(t, fh.waitProgress(func() bool { return len(fh.logs.lines(t, failedMsg)) == 1 }))
	line := fh.logs.lines(t, failedMsg)[0]
	require.Equal(t, "timeout", line["error_class"])
	require.Equal(t, "no 2xx within the attempt's timeout", line["error"])
	require.Equal(t, 1.0, line["attempt"])
	require.Equal(t, c.Deadline.Format(time.RFC3339Nano), line["next_retry"])

	fh.clock.Add(webhooks.DefaultRequestTimeout - webhooks.DefaultWakingTimeout)
	receive(t, d.ctx.Done())
	fh.faultRequireSettled(agentAID)
	require.Len(t, fh.logs.lines(t, failedMsg), 1)
	require.Equal(t, map[string]int64{"timeout": 1}, fh.failures(t))
}

// The late failure of an attempt that the WAKING timeout already failed,
// and a retry replaced, is not logged or counted again.
func TestLateFailureOfTimedOutAttemptIsNotLoggedAgain(t *testing.T) {
	fh := newFailHarness(t, "", faultConstBackoff(time.Second))
	late, current := make(chan struct{}), make(chan struct{})
	defer close(current)
	fh.recv.queue(reply{status: http.StatusInternalServerError, hold: late}, reply{status: http.StatusOK, hold: current})
	fh.wake("s1", "/agents/*", agentA)
	fh.clock.Add(webhooks.DefaultWakingTimeout)
	c := fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	fh.clock.Set(c.Deadline)
	fh.nextDelivery()
	fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight && c.Attempt == 2 })

	close(late)
	// Only the retry is still in flight once the late POST is done with.
	require.True(t, fh.waitProgress(func() bool { return webhooks.FaultSlotsInUse(fh.engine) == 1 }), "a delivery never ended")
	lines := fh.logs.lines(t, failedMsg)
	require.Len(t, lines, 1)
	require.Equal(t, "timeout", lines[0]["error_class"])
	require.Equal(t, 1.0, lines[0]["attempt"])
	require.Equal(t, map[string]int64{"timeout": 1}, fh.failures(t))
}

// gatedStore holds the scheduler's DueConsumers calls while its gate is
// shut, so that a delivery outcome can be recorded first.
type gatedStore struct {
	webhooks.Store
	mu   sync.Mutex
	gate chan struct{} // nil when open
}

func (s *gatedStore) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gatedStore) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *gatedStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.DueConsumers(ctx, now, limit)
}

// A failure that ends the failure run makes the consumer a dead letter:
// the attempt's line says so, and the dead letter is logged at Warn as
// when the scheduler finds it.
func TestFailureThatEndsTheRunIsLoggedAsADeadLetter(t *testing.T) {
	store := &gatedStore{Store: memstore.New()}
	logs, logger := newLogCapture()
	h := newHarnessStore(t, store, webhooks.WithLogger(logger), faultConstBackoff(10*time.Second),
		webhooks.WithFailureGCAfter(time.Minute), webhooks.WithTimeouts(time.Hour, 0, time.Hour))
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusInternalServerError, hold: hold})
	h.wake("s1", "/agents/*", agentA)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	h.clock.Set(c.Deadline)
	h.nextDelivery()
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight })
	require.Equal(t, c.FailingSince.Add(time.Minute), c.Deadline)

	// The GC time passes while the scheduler is held: the second 500 is
	// what ends the run.
	store.shut()
	h.clock.Set(c.Deadline)
	close(hold)
	h.waitDead(agentAID)
	store.open()
	h.faultRequireNoDelivery()
	require.True(t, h.waitProgress(func() bool { return len(logs.lines(t, failedMsg)) == 2 }))
	last := logs.lines(t, failedMsg)[1]
	require.Equal(t, 2.0, last["attempt"])
	require.Equal(t, true, last["dead_letter"])
	require.NotContains(t, last, "next_retry")
	removals := logs.lines(t, webhooks.DeadLetterMsg)
	require.Len(t, removals, 1)
	require.Equal(t, "INFO", removals[0]["level"], "the failure line, sampled, is the warning")
	require.Equal(t, agentAID, removals[0]["consumer_id"])
	require.Equal(t, c.FailingSince.Format(time.RFC3339Nano), removals[0]["failing_since"])
}

// When the scheduler dead-letters a consumer whose last attempt still
// hangs, that is logged; that attempt's failure, arriving afterwards,
// changes nothing and adds no failure line.
func TestSchedulerDeadLetterIsLogged(t *testing.T) {
	fh := newFailHarness(t, "", faultConstBackoff(50*time.Second), webhooks.WithFailureGCAfter(time.Minute))
	hold := make(chan struct{})
	fh.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusInternalServerError, hold: hold})
	fh.wake("s1", "/agents/*", agentA)
	c := fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	fh.clock.Set(c.Deadline)
	fh.nextDelivery()
	fh.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight })
	fh.clock.Set(c.FailingSince.Add(time.Minute))
	fh.waitDead(agentAID)
	removals := fh.logs.lines(t, webhooks.DeadLetterMsg)
	require.Len(t, removals, 1)
	require.Equal(t, agentAID, removals[0]["consumer_id"])

	close(hold)
	require.True(t, fh.waitProgress(func() bool { return webhooks.FaultSlotsInUse(fh.engine) == 0 }), "a delivery never ended")
	lines := fh.logs.lines(t, failedMsg)
	require.Len(t, lines, 1)
	require.Equal(t, 1.0, lines[0]["attempt"])
}
