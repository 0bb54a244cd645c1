package soak

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/agent"
	"github.com/streamhooks/webhooks/receiver"
)

// kind is how a consumer's webhook endpoint behaves. Each kind has its own
// subscription, stream prefix and receiving server.
type kind int

const (
	// kindHealthy claims, reads, acks and says done within the webhook
	// request (examples/internal/agent).
	kindHealthy kind = iota
	// kindDone answers {"done":true} at once, so the engine acks up to the
	// tails at the wake.
	kindDone
	// kindSlow outlives the request timeout on the first attempt of every
	// wake, and on retries answers after a delay, then acts as kindHealthy.
	kindSlow
	// kindFail5xx answers 503.
	kindFail5xx
	// kindReset resets the connection without answering.
	kindReset
	// kindHang never answers; the engine's request timeout ends it.
	kindHang
	numKinds
)

var kindNames = [numKinds]string{"healthy", "done", "slow", "fail5xx", "reset", "hang"}

func (k kind) String() string { return kindNames[k] }

// failing reports whether no delivery to the kind ever succeeds.
func (k kind) failing() bool { return k >= kindFail5xx }

// subscriptionID is the kind's subscription.
func (k kind) subscriptionID() string { return "soak-" + k.String() }

// streamPath is the path of the kind's i-th stream.
func (k kind) streamPath(i int) string { return "/soak/" + k.String() + "/s" + strconv.Itoa(i) }

// kindOfConsumer returns the kind whose subscription owns a consumer.
func kindOfConsumer(id string) (kind, bool) {
	sub, _, _ := strings.Cut(id, ":")
	for k := range numKinds {
		if sub == k.subscriptionID() {
			return k, true
		}
	}
	return 0, false
}

// hangLimit bounds how long a hanging or slow endpoint waits for the engine
// to give up, so that an engine that never cancels shows up as failed
// invariants instead of a stuck run.
const hangLimit = time.Minute

// endpoints are the webhook receivers of every kind, and what they saw.
type endpoints struct {
	slowDelay time.Duration
	acks      *ackLedger
	requests  [numKinds]atomic.Int64
	// agentFailures counts wakes the agent abandoned, by kind; a slow
	// endpoint whose retry also outlives the request timeout is one.
	agentFailures [numKinds]atomic.Int64

	mu           sync.Mutex
	slowAttempts map[string]int // wake_id → deliveries seen
}

// handler returns the webhook handler of kind k. secret is its
// subscription's, streamServer the base URL consumers read from, and hc the
// client of their callbacks and reads.
func (e *endpoints) handler(k kind, secret, streamServer string, hc *http.Client) (http.Handler, error) {
	healthy, err := agent.New(agent.Config{
		Secret:       secret,
		StreamServer: streamServer,
		HTTPClient:   hc,
		Logger:       slog.New(slog.DiscardHandler),
		OnStep: func(s agent.Step) {
			switch s.Kind {
			case agent.StepAcked:
				e.acks.record(s.Notification.ConsumerID, s.Stream, s.Offset)
			case agent.StepFailed:
				e.agentFailures[k].Add(1)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	verifier, err := receiver.NewVerifier(receiver.WithSecret(secret))
	if err != nil {
		return nil, err
	}
	var h http.HandlerFunc
	switch k {
	case kindHealthy:
		h = healthy.ServeHTTP
	case kindDone:
		h = func(w http.ResponseWriter, r *http.Request) { answerDone(w, r, verifier) }
	case kindSlow:
		h = func(w http.ResponseWriter, r *http.Request) { e.slow(w, r, healthy) }
	case kindFail5xx:
		h = func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			http.Error(w, "soak: failing on purpose", http.StatusServiceUnavailable)
		}
	case kindReset:
		h = reset
	case kindHang:
		h = func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if !waitOrDone(r, hangLimit) {
				http.Error(w, "soak: the engine never gave up", http.StatusServiceUnavailable)
			}
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests[k].Add(1)
		h(w, r)
	}), nil
}

// answerDone verifies the notification and finishes the wake synchronously.
func answerDone(w http.ResponseWriter, r *http.Request, v *receiver.Verifier) {
	if _, err := v.ParseNotification(r); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(receiver.DoneResponse{Done: true})
}

// slow lets the first delivery of each wake outlive the engine's request
// timeout, and hands later ones to the agent after slowDelay.
func (e *endpoints) slow(w http.ResponseWriter, r *http.Request, next http.Handler) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var n struct {
		WakeID string `json:"wake_id"`
	}
	_ = json.Unmarshal(body, &n)
	e.mu.Lock()
	e.slowAttempts[n.WakeID]++
	attempt := e.slowAttempts[n.WakeID]
	e.mu.Unlock()
	if attempt == 1 {
		if !waitOrDone(r, hangLimit) {
			http.Error(w, "soak: the engine never gave up", http.StatusServiceUnavailable)
		}
		return
	}
	if waitOrDone(r, e.slowDelay) {
		return // the engine gave up
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	next.ServeHTTP(w, r)
}

// reset reads the request and resets the connection without an answer.
func reset(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "soak: cannot hijack", http.StatusInternalServerError)
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // close with RST, not FIN
	}
	_ = conn.Close()
}

// waitOrDone waits for d to pass or the request to end, and reports whether
// the request ended first.
func waitOrDone(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		return true
	case <-t.C:
		return false
	}
}
