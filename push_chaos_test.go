package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// chaosReceiver is a receiver that deduplicates by Webhook-Id, answering
// each POST in one of several ways, and checks what the engine sends.
type chaosReceiver struct {
	t      *testing.T
	secret string
	rng    func() int // 0..99

	mu        sync.Mutex
	seen      map[string][]json.RawMessage // delivery id → its events, once handled
	cursor    map[string]string            // stream → offset after the events handled
	handled   map[string][]string          // stream → events handled, in order
	inFlight  map[string]string            // stream → delivery id of a POST in progress
	succeeded map[string]bool              // delivery ids answered 2xx
	errs      []string
	responses map[string]int
}

func (r *chaosReceiver) fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *chaosReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var p receiver.EventsPayload
	r.mu.Lock()
	if err := verifySignature(r.secret, req.Header, body, time.Now(), time.Minute); err != nil {
		r.fail("bad signature: %v", err)
	}
	if err := json.Unmarshal(body, &p); err != nil || p.DeliveryID != req.Header.Get(receiver.IDHeader) {
		r.fail("bad body %s: %v", body, err)
	}
	// A POST of a batch already answered 2xx was sent before that answer:
	// the engine abandoned it at its timeout, before this server, slow on
	// a busy machine, began to handle it. It was not sent beside a later
	// batch, though it arrives beside one.
	late := r.succeeded[p.DeliveryID]
	if other, busy := r.inFlight[p.Stream]; busy && other != p.DeliveryID && !late {
		r.fail("%s: batch %s sent while %s was in flight", p.Stream, p.DeliveryID, other)
	}
	if !late {
		r.inFlight[p.Stream] = p.DeliveryID
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.inFlight[p.Stream] == p.DeliveryID {
			delete(r.inFlight, p.Stream)
		}
		r.mu.Unlock()
	}()

	roll := r.rng()
	handle := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if first, ok := r.seen[p.DeliveryID]; ok {
			if !slices.EqualFunc(first, p.Events, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
				r.fail("%s: delivery %s sent again with other events", p.Stream, p.DeliveryID)
			}
			return
		}
		if want := r.cursorOf(p.Stream); p.FirstOffset != want {
			r.fail("%s: new batch %s starts at %s, not at %s", p.Stream, p.DeliveryID, p.FirstOffset, want)
			return
		}
		r.seen[p.DeliveryID] = p.Events
		for _, e := range p.Events {
			r.handled[p.Stream] = append(r.handled[p.Stream], string(e))
		}
		r.cursor[p.Stream] = p.Offset
	}
	respond := func(kind string, status int) {
		r.mu.Lock()
		r.responses[kind]++
		if status < 300 {
			r.succeeded[p.DeliveryID] = true
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}
	drop := func(kind string) {
		r.mu.Lock()
		r.responses[kind]++
		r.mu.Unlock()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	switch {
	case roll < 55:
		handle()
		respond("2xx", http.StatusNoContent)
	case roll < 65:
		respond("5xx", http.StatusServiceUnavailable)
	case roll < 72:
		handle()
		respond("handled, then 5xx", http.StatusInternalServerError)
	case roll < 80:
		drop("dropped")
	case roll < 88:
		handle()
		drop("handled, then dropped")
	case roll < 92:
		r.mu.Lock()
		r.responses["timeout"]++
		r.mu.Unlock()
		<-req.Context().Done()
	default:
		handle()
		r.mu.Lock()
		r.responses["handled, then timeout"]++
		r.mu.Unlock()
		<-req.Context().Done()
	}
}

// cursorOf is the offset the next new batch of stream must start at.
func (r *chaosReceiver) cursorOf(stream string) string {
	if c, ok := r.cursor[stream]; ok {
		return c
	}
	return webhooks.OffsetNone
}

// TestPushExactlyOnceInOrder appends concurrently to many streams while
// the receiver answers with a mix of 2xx, 5xx, timeouts and dropped
// connections, sometimes after handling the batch. Deduplicating by
// Webhook-Id, it must handle every event of every stream exactly once, in
// order; a new batch must start where the last handled one ended, and a
// retry must carry the same events.
func TestPushExactlyOnceInOrder(t *testing.T) {
	const (
		streams = 16
		events  = 60
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	recv := &chaosReceiver{
		t:         t,
		rng:       func() int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(100) },
		seen:      map[string][]json.RawMessage{},
		cursor:    map[string]string{},
		handled:   map[string][]string{},
		inFlight:  map[string]string{},
		succeeded: map[string]bool{},
		responses: map[string]int{},
	}
	srv := httptest.NewServer(recv)
	defer srv.Close()

	source := newFakeSource()
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithClock(clock.New()),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithBackoff(func(int) time.Duration { return 2 * time.Millisecond }),
	)
	require.NoError(t, err)
	progressed := make(chan struct{}, 1)
	webhooks.SignalProgress(e, progressed)
	startForTest(t, e)
	rec := httptest.NewRecorder()
	apiHandler(t, e).ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/s/*?subscription=s1",
		bytes.NewBufferString(fmt.Sprintf(`{"webhook":%q,"delivery":"events","batch":{"max_size":7,"max_wait_ms":0},"timeout_ms":100,"retry":{"max_attempts":0}}`, srv.URL))))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &created))
	recv.mu.Lock()
	recv.secret = created.Secret
	recv.mu.Unlock()

	ctx := context.Background()
	want := map[string][]string{}
	var wg sync.WaitGroup
	for s := range streams {
		path := fmt.Sprintf("/s/%d", s)
		for n := range events {
			want[path] = append(want[path], fmt.Sprintf(`{"n":%d}`, n))
		}
	}
	for path, all := range want {
		wg.Go(func() {
			for n := 0; n < events; {
				k := min(1+n%3, events-n) // appends of 1 to 3 events
				batch := all[n : n+k]
				_, existed := source.Stream(ctx, path)
				source.appendEvents(path, batch...)
				if existed != nil {
					require.NoError(t, e.StreamCreated(ctx, path))
				} else {
					require.NoError(t, e.StreamAppended(ctx, path))
				}
				n += k
			}
		})
	}
	wg.Wait()

	tails := map[string]string{}
	for path := range want {
		info, err := source.Stream(ctx, path)
		require.NoError(t, err)
		tails[path] = info.Tail
	}
	caughtUp := func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for path, tail := range tails {
			if recv.cursor[path] != tail {
				return false
			}
		}
		return true
	}
	// Every handled batch ends an attempt, which signals.
	timeout := time.After(60 * time.Second)
	for !caughtUp() {
		select {
		case <-progressed:
		case <-timeout:
			t.Fatal("not every stream was handled to its tail")
		}
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.Empty(t, recv.errs)
	require.Equal(t, want, recv.handled, "every event exactly once, in order")
	t.Logf("responses: %v", recv.responses)
	for _, kind := range []string{"2xx", "5xx", "dropped", "handled, then dropped", "timeout", "handled, then timeout"} {
		require.Positive(t, recv.responses[kind], "the receiver answered %q at least once", kind)
	}
}
