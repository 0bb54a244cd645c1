package webhooks_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// Fault-injecting webhook receivers. Each fault must end in the retry,
// timeout or GC the spec asks for, give back its delivery slot, and never
// leave a consumer WAKING or LIVE without a deadline that moves it on.

// faultServer is a raw TCP webhook endpoint on loopback. Each connection is
// handed to serve, which can hang, cut or garble a response in ways an
// http.Handler cannot.
type faultServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newFaultServer(t *testing.T, serve func(c net.Conn)) *faultServer {
	t.Helper()
	return newFaultServerOn(t, "127.0.0.1", serve)
}

// newFaultServerOn is newFaultServer listening on the loopback address addr.
func newFaultServerOn(t *testing.T, addr string, serve func(c net.Conn)) *faultServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	require.NoError(t, err)
	s := &faultServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *faultServer) url() string { return "http://" + s.ln.Addr().String() + "/hook" }

// faultReadRequest reads one HTTP request from c and decodes its
// notification.
func faultReadRequest(c net.Conn) (receiver.Notification, error) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return receiver.Notification{}, err
	}
	var n receiver.Notification
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return n, err
	}
	return n, json.Unmarshal(body, &n)
}

// faultReset closes c with an RST instead of a FIN.
func faultReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// faultSubscribe creates subscription id on pattern to webhook.
func (h *harness) faultSubscribe(id, pattern, webhook string) {
	h.t.Helper()
	rec := h.do(http.MethodPut, pattern+"?subscription="+id, subBody(webhook, ""))
	require.Equal(h.t, http.StatusCreated, rec.Code, rec.Body.String())
}

// faultRequireSettled waits until every delivery slot is free, then checks
// consumer id is in a state the engine can leave: WAKING and LIVE always
// have a deadline, IDLE has none and nothing in flight.
func (h *harness) faultRequireSettled(id string) *webhooks.Consumer {
	h.t.Helper()
	require.True(h.t, h.waitProgress(func() bool { return webhooks.FaultSlotsInUse(h.engine) == 0 }), "a delivery slot was never given back")
	c := h.consumer(id)
	switch c.State {
	case webhooks.StateIdle:
		require.True(h.t, c.Deadline.IsZero(), "IDLE with a deadline: %+v", c)
		require.False(h.t, c.InFlight, "IDLE in flight: %+v", c)
	default:
		require.False(h.t, c.Deadline.IsZero(), "%s without a deadline: %+v", c.State, c)
	}
	return c
}

// faultRequireNoDelivery fails if the receiver got a delivery.
func (h *harness) faultRequireNoDelivery() {
	h.t.Helper()
	select {
	case d := <-h.recv.deliveries:
		h.t.Fatalf("unexpected delivery: epoch %d attempt of %s", d.n.Epoch, d.n.WakeID)
	default:
	}
}

func faultConstBackoff(d time.Duration) webhooks.Option {
	return webhooks.WithBackoff(func(int) time.Duration { return d })
}

// An answer slower than the request but within the WAKING timeout is a
// plain success.
func TestFaultSlowAnswerWithinWakingTimeoutGoesLive(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour))
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	h.wake("s1", "/agents/*", agentA)
	h.clock.Add(webhooks.DefaultWakingTimeout - time.Millisecond)
	require.Equal(t, webhooks.StateWaking, h.consumer(agentAID).State)
	close(hold)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures)
	require.Equal(t, h.clock.Now().Add(webhooks.DefaultLivenessTimeout), c.Deadline)
	h.faultRequireSettled(agentAID)
	h.faultRequireNoDelivery()
}

// The WAKING timeout counts a failure, but the POST stays open until the
// request timeout: a 2xx that comes in between still proves receipt, ends
// the failure run and cancels the retry.
func TestFaultSlowAnswerAfterWakingTimeoutStillGoesLive(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour))
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	h.clock.Add(webhooks.DefaultWakingTimeout)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Equal(t, webhooks.StateWaking, c.State)
	require.Equal(t, h.clock.Now().Add(time.Hour), c.Deadline)

	h.clock.Add(webhooks.DefaultRequestTimeout - webhooks.DefaultWakingTimeout - time.Second)
	require.NoError(t, d.ctx.Err(), "the POST is open until the request timeout")
	close(hold)
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures)
	require.True(t, c.FailingSince.IsZero())
	require.Equal(t, h.clock.Now().Add(webhooks.DefaultLivenessTimeout), c.Deadline, "the retry is cancelled")
	h.faultRequireSettled(agentAID)
	h.faultRequireNoDelivery()
}

// With a request timeout shorter than the WAKING timeout, the request
// timeout is what fails the attempt, on the engine's clock.
func TestFaultAnswerAfterRequestTimeoutIsAFailure(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second), webhooks.WithTimeouts(time.Minute, 0, 30*time.Second))
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	first := h.wake("s1", "/agents/*", agentA)
	h.clock.Add(30*time.Second - time.Millisecond)
	require.True(t, h.consumer(agentAID).InFlight)
	require.NoError(t, first.ctx.Err())

	h.clock.Add(time.Millisecond)
	receive(t, first.ctx.Done())
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Equal(t, h.clock.Now().Add(time.Second), c.Deadline)
	h.faultRequireSettled(agentAID)

	h.clock.Add(time.Second)
	second := h.nextDelivery()
	require.Equal(t, first.n.WakeID, second.n.WakeID)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	h.faultRequireSettled(agentAID)
}

// With the default timeouts an attempt that never answers times out twice:
// the WAKING timeout counts the failure, and the request timeout that ends
// the POST later must not count it again.
func TestFaultHungAttemptFailsOnce(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour))
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusOK, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	h.clock.Add(webhooks.DefaultWakingTimeout)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	h.clock.Add(webhooks.DefaultRequestTimeout - webhooks.DefaultWakingTimeout)
	receive(t, d.ctx.Done())
	c := h.faultRequireSettled(agentAID)
	require.Equal(t, 1, c.Failures)
	require.Equal(t, 1, c.Attempt)
	require.Equal(t, webhooks.StateWaking, c.State)
	require.Equal(t, c.FailingSince.Add(time.Hour), c.Deadline)
}

// A receiver that accepts the connection and reads the request but never
// answers is cut off at the request timeout, and the retry goes out.
func TestFaultHangingConnection(t *testing.T) {
	h := newHarness(t, faultConstBackoff(5*time.Second), webhooks.WithTimeouts(time.Hour, 0, 30*time.Second))
	got := make(chan receiver.Notification, 2)
	closed := make(chan struct{}, 2)
	srv := newFaultServer(t, func(c net.Conn) {
		n, err := faultReadRequest(c)
		if err != nil {
			return
		}
		got <- n
		_, _ = c.Read(make([]byte, 1)) // until the engine hangs up
		closed <- struct{}{}
	})
	h.faultSubscribe("s1", "/agents/*", srv.url())
	h.create(agentA, 10)
	first := <-got

	h.clock.Add(30*time.Second - time.Millisecond)
	require.Len(t, closed, 0, "the connection was closed before the request timeout")
	require.True(t, h.consumer(agentAID).InFlight)
	h.clock.Add(time.Millisecond)
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("the engine did not hang up at the request timeout")
	}
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	require.Equal(t, h.clock.Now().Add(5*time.Second), c.Deadline)
	h.faultRequireSettled(agentAID)

	h.clock.Add(5 * time.Second)
	second := <-got
	require.Equal(t, first.WakeID, second.WakeID)
	require.Equal(t, 2, h.consumer(agentAID).Attempt)
}

// Responses that break before a status line arrives, and a refused
// connection, are failed deliveries: retried on the backoff schedule.
func TestFaultBrokenResponsesAreFailures(t *testing.T) {
	answer := func(raw string) func(net.Conn) {
		return func(c net.Conn) {
			if _, err := faultReadRequest(c); err == nil {
				_, _ = io.WriteString(c, raw)
			}
		}
	}
	for name, serve := range map[string]func(net.Conn){
		"close without answer": func(c net.Conn) { _, _ = faultReadRequest(c) },
		"reset without answer": func(c net.Conn) {
			_, _ = faultReadRequest(c)
			faultReset(c)
		},
		"reset before reading": faultReset,
		"garbage status line":  answer("SPDY/9 banana\r\n\r\n"),
		"headers cut short":    answer("HTTP/1.1 200 OK\r\nContent-Ty"),
		"interim answer only":  answer("HTTP/1.1 100 Continue\r\n\r\n"),
		"status 0":             answer("HTTP/1.1 000 Zero\r\nContent-Length: 0\r\n\r\n"),
		"status 199":           answer("HTTP/1.1 199 Odd\r\nContent-Length: 0\r\n\r\n"),
		"status 300":           answer("HTTP/1.1 300 Multiple Choices\r\nContent-Length: 0\r\n\r\n"),
		"status 429":           answer("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n"),
		"refused":              nil,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, faultConstBackoff(time.Hour))
			var url string
			if serve == nil {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				url = "http://" + ln.Addr().String() + "/hook"
				require.NoError(t, ln.Close())
			} else {
				url = newFaultServer(t, serve).url()
			}
			h.faultSubscribe("s1", "/agents/*", url)
			h.create(agentA, 10)
			c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
			require.Equal(t, webhooks.StateWaking, c.State)
			require.Equal(t, h.clock.Now().Add(time.Hour), c.Deadline)
			require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset)
			h.faultRequireSettled(agentAID)
		})
	}
}

// A 2xx whose body is cut short proves receipt, so the consumer is LIVE;
// but the engine never saw the whole body, so a "done" in the part that
// arrived must not finish the wake and auto-ack events the consumer may not
// have handled.
func TestFaultBodyCutShortAfterTwoXX(t *testing.T) {
	const done = `{"done":true}`
	for name, serve := range map[string]func(net.Conn){
		"content-length not met": func(c net.Conn) {
			if _, err := faultReadRequest(c); err == nil {
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n%s", done)
			}
		},
		"chunked without last chunk": func(c net.Conn) {
			if _, err := faultReadRequest(c); err == nil {
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(done), done)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, faultConstBackoff(time.Hour))
			h.faultSubscribe("s1", "/agents/*", newFaultServer(t, serve).url())
			h.create(agentA, 10)
			c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State != webhooks.StateWaking })
			require.Equal(t, webhooks.StateLive, c.State)
			require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "a cut body must not auto-ack")
			h.faultRequireSettled(agentAID)
		})
	}
}

// An RST right after a partial 2xx may reach the engine before the status
// line does; either way nothing is auto-acked.
func TestFaultResetMidBody(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour))
	srv := newFaultServer(t, func(c net.Conn) {
		if _, err := faultReadRequest(c); err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"done\":true}")
			faultReset(c)
		}
	})
	h.faultSubscribe("s1", "/agents/*", srv.url())
	h.create(agentA, 10)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool {
		return c.State == webhooks.StateLive || c.Failures == 1 && !c.InFlight
	})
	require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset)
	h.faultRequireSettled(agentAID)
}

// A receiver that streams an endless body is cut off after
// MaxWebhookResponseBytes: the engine hangs up, and the 2xx still counts.
func TestFaultEndlessResponseBody(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Hour))
	const bound = 64 << 20 // a loop that never ends is a failure of the engine
	var sent atomic.Int64
	hungUp := make(chan error, 1)
	srv := newFaultServer(t, func(c net.Conn) {
		if _, err := faultReadRequest(c); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for sent.Load() < bound {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				hungUp <- err
				return
			}
		}
		hungUp <- nil
	})
	h.faultSubscribe("s1", "/agents/*", srv.url())
	h.create(agentA, 10)
	select {
	case err := <-hungUp:
		require.Error(t, err, "the engine read %d bytes without hanging up", sent.Load())
	case <-time.After(waitFor):
		t.Fatal("the endless body was never cut off")
	}
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	h.faultRequireSettled(agentAID)
}

// The response body limit is inclusive: a {"done":true} body of exactly
// MaxWebhookResponseBytes finishes the wake; one byte more and the engine
// ignores the body, keeping only the 2xx.
func TestFaultResponseBodyLimitBoundary(t *testing.T) {
	for _, tc := range []struct {
		size  int
		state webhooks.ConsumerState
	}{
		{webhooks.MaxWebhookResponseBytes, webhooks.StateIdle},
		{webhooks.MaxWebhookResponseBytes + 1, webhooks.StateLive},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			h := newHarness(t)
			body := `{"done":true}`
			body += strings.Repeat(" ", tc.size-len(body))
			h.recv.queue(reply{status: http.StatusOK, body: body})
			h.wake("s1", "/agents/*", agentA)
			c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == tc.state })
			if tc.state == webhooks.StateIdle {
				require.Equal(t, offset(10), c.Streams[0].Offset)
			} else {
				require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset)
			}
			h.faultRequireSettled(agentAID)
		})
	}
}

// A receiver may send its 2xx status at once and hold the body open while
// it works. The status proves receipt: the consumer is LIVE before the
// WAKING timeout, so no retry wakes it twice; the body's "done" then ends
// the wake.
func TestFaultEarlyStatusThenSlowBody(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	hold := make(chan struct{})
	got := make(chan struct{}, 4)
	h.recv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-hold:
			_, _ = io.WriteString(w, `{"done":true}`)
		case <-r.Context().Done():
		}
	})
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	receive(t, got)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	require.Zero(t, c.Failures)

	h.clock.Add(webhooks.DefaultWakingTimeout + time.Second)
	c = h.consumer(agentAID)
	require.Equal(t, webhooks.StateLive, c.State)
	require.Zero(t, c.Failures)
	require.Len(t, got, 0, "a consumer that answered 2xx was woken again")

	close(hold)
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, offset(10), c.Streams[0].Offset)
	require.Equal(t, int64(1), c.Epoch)
	h.faultRequireSettled(agentAID)
}

// No redirect is followed, whatever its status or target: each is a failed
// delivery, and the target, private or not, gets nothing.
func TestFaultRedirectsAreFailures(t *testing.T) {
	var hits atomic.Int32
	target := newReceiver(t)
	target.srv.Config.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, location := range []string{
			target.url(),
			"http://10.0.0.1/hook",
			"http://169.254.169.254/latest/meta-data/",
			"http://[fd00:ec2::254]/",
			"file:///etc/passwd",
		} {
			t.Run(fmt.Sprintf("%d to %s", status, location), func(t *testing.T) {
				h := newHarness(t, faultConstBackoff(time.Hour))
				var asked atomic.Int32
				h.recv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					asked.Add(1)
					http.Redirect(w, r, location, status)
				})
				h.subscribe("s1", "/agents/*")
				h.create(agentA, 10)
				c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
				require.Equal(t, webhooks.StateWaking, c.State)
				require.Equal(t, int32(1), asked.Load())
				h.faultRequireSettled(agentAID)
			})
		}
	}
	require.Zero(t, hits.Load(), "a redirect was followed")
}

// faultBackoffBounds is the wait the spec gives before retry n: for
// retries 1-10 min(2^n × 100ms, 30s) plus up to 1s of jitter, later 60s
// plus up to 5s.
func faultBackoffBounds(n int) (lo, hi time.Duration) {
	if n > 10 {
		return 60 * time.Second, 65 * time.Second
	}
	lo = min(time.Duration(1<<n)*100*time.Millisecond, 30*time.Second)
	return lo, lo + time.Second
}

// A storm of 5xx answers: every retry waits as the spec's schedule says,
// the retries go on until the failure run has lasted WithFailureGCAfter,
// and then the consumer is a dead letter: its callbacks get CONSUMER_GONE,
// and an append to a stream it subscribed to does not wake it.
func TestFaultServerErrorStormEndsInGC(t *testing.T) {
	const gcAfter = 10 * time.Minute
	h := newHarness(t, webhooks.WithFailureGCAfter(gcAfter))
	d := h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	h.create("/tools/x", 0)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{
		Epoch: epoch(1), Subscribe: []string{"/tools/x"}, Acks: streamOffsets(agentA, offset(10)), Done: true,
	})
	require.Equal(t, http.StatusOK, r.status, r.raw)

	statuses := []int{500, 502, 503, 504}
	for i := range 64 {
		h.recv.queue(reply{status: statuses[i%len(statuses)]})
	}
	h.appendTo(agentA, 1)
	first := h.nextDelivery()
	require.Equal(t, int64(2), first.n.Epoch)
	var c *webhooks.Consumer
	for n := 1; ; n++ {
		c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == n && !c.InFlight })
		require.Equal(t, webhooks.StateWaking, c.State)
		gcAt := c.FailingSince.Add(gcAfter)
		if c.Deadline.Equal(gcAt) {
			break // the last retry is capped at the GC time
		}
		lo, hi := faultBackoffBounds(n)
		wait := c.Deadline.Sub(h.clock.Now())
		require.True(t, wait >= lo && wait < hi, "retry %d waits %v, want [%v, %v)", n, wait, lo, hi)
		require.Less(t, n, 40, "the retries never reached the GC time")
		h.clock.Set(c.Deadline)
		d := h.nextDelivery()
		require.Equal(t, first.n.WakeID, d.n.WakeID)
	}
	require.Greater(t, c.Failures, 10, "the storm outlasted the exponential part of the schedule")
	h.clock.Set(c.Deadline)
	h.waitDead(agentAID)
	require.Equal(t, 0, webhooks.FaultSlotsInUse(h.engine))
	r = h.callback(agentAID, first.n.Token, receiver.CallbackRequest{Epoch: epoch(2)})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)
	h.appendTo("/tools/x", 1)
	h.waitIdle()
	h.faultRequireNoDelivery()
}

// The GC dead-letters a consumer even while its last attempt hangs; the
// hung POST still ends at the request timeout and gives its slot back.
func TestFaultGCWhileAttemptHangs(t *testing.T) {
	h := newHarness(t, faultConstBackoff(50*time.Second), webhooks.WithFailureGCAfter(time.Minute))
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusOK, hold: hold})
	h.wake("s1", "/agents/*", agentA)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	since := c.FailingSince
	h.clock.Set(c.Deadline)
	hung := h.nextDelivery()
	c = h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight })
	require.Equal(t, since.Add(time.Minute), c.Deadline, "the WAKING timeout is capped at the GC time")

	h.clock.Set(since.Add(time.Minute))
	h.waitDead(agentAID)
	require.NoError(t, hung.ctx.Err())
	require.Equal(t, 1, webhooks.FaultSlotsInUse(h.engine))
	h.clock.Add(webhooks.DefaultRequestTimeout)
	receive(t, hung.ctx.Done())
	require.True(t, h.waitProgress(func() bool { return webhooks.FaultSlotsInUse(h.engine) == 0 }), "a delivery never ended")
	require.Equal(t, webhooks.StateFailed, h.consumer(agentAID).State, "the late outcome revived the consumer")
}

// A synchronous done that comes after the consumer acked past the wake's
// tails by callback auto-acks only up to those tails: it never moves an
// offset back.
func TestFaultLateDoneNeverMovesAcksBack(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	tail := h.appendTo(agentA, 7)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, tail)})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	close(hold)
	c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
	require.Equal(t, streamOffsets(agentA, tail), c.Streams)
	require.Equal(t, int64(1), c.Epoch, "nothing was pending, so no new wake")
	h.faultRequireSettled(agentAID)
	h.faultRequireNoDelivery()
}

// A failure that comes from an attempt already timed out and retried must
// not count against, or end, the attempt now in flight.
func TestFaultLateFailureOfSupersededAttempt(t *testing.T) {
	h := newHarness(t, faultConstBackoff(time.Second))
	late, current := make(chan struct{}), make(chan struct{})
	defer close(current)
	h.recv.queue(reply{status: http.StatusInternalServerError, hold: late}, reply{status: http.StatusOK, hold: current})
	h.wake("s1", "/agents/*", agentA)
	h.clock.Add(webhooks.DefaultWakingTimeout)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.Failures == 1 && !c.InFlight })
	h.clock.Add(time.Second)
	h.nextDelivery()
	before := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.InFlight && c.Attempt == 2 })

	close(late)
	require.True(t, h.waitProgress(func() bool { return webhooks.FaultSlotsInUse(h.engine) == 1 }), "the first attempt's outcome was never applied")
	require.Equal(t, before, h.consumer(agentAID))
}
