package main

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/receiver"
)

const pushStreams = 6

// streamStart is a stream's first offset on the example server.
const streamStart = "0000000000000000_0000000000000000"

// pushWorld is a crash world whose subscription pushes events to a
// receiver that deduplicates by Webhook-Id, and checks what it is sent:
// every event exactly once, in order; a retry with the same events; no
// batch after its ack; one batch of a stream in flight at a time.
type pushWorld struct {
	*crashWorld
	recv     *httptest.Server
	secret   string
	verifier *receiver.Verifier
	// onBatch, when set, is closed by the next batch to arrive, which
	// then waits for the kill; handleFirst says whether it is handled
	// before that.
	onBatch     atomic.Pointer[chan struct{}]
	handleFirst atomic.Bool

	mu       sync.Mutex
	rng      *rand.Rand
	seen     map[string][]json.RawMessage // delivery id → its events
	cursor   map[string]string            // stream → offset after the events handled
	handled  map[string][]int             // stream → events handled, in order
	inFlight map[string]string            // stream → delivery id of the POST in progress
	durable  map[string]string            // stream → the cursor the Store held at the last check
	appended map[string][]int             // stream → events whose append was acknowledged
	retries  int                          // POSTs of a delivery id already handled
	errs     []string
}

func newPushWorld(w *crashWorld, seed uint64) *pushWorld {
	pw := &pushWorld{
		crashWorld: w,
		rng:        rand.New(rand.NewPCG(seed, seed)),
		seen:       map[string][]json.RawMessage{},
		cursor:     map[string]string{},
		handled:    map[string][]int{},
		inFlight:   map[string]string{},
		durable:    map[string]string{},
		appended:   map[string][]int{},
	}
	pw.recv = httptest.NewServer(http.HandlerFunc(pw.receive))
	w.t.Cleanup(pw.recv.Close)
	return pw
}

func (pw *pushWorld) failf(format string, args ...any) {
	pw.errs = append(pw.errs, fmt.Sprintf(format, args...))
}

// offsetBefore reports whether offset a is before b; "-1" is before all.
func offsetBefore(a, b string) bool {
	switch {
	case a == b:
		return false
	case a == webhooks.OffsetNone:
		return true
	case b == webhooks.OffsetNone:
		return false
	}
	return a < b
}

func (pw *pushWorld) receive(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var p receiver.EventsPayload
	pw.mu.Lock()
	if err := pw.verifier.Verify(r.Context(), r.Header, body); err != nil {
		pw.failf("signature: %v", err)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		pw.failf("body %q: %v", body, err)
	}
	if other, busy := pw.inFlight[p.Stream]; busy && other != p.DeliveryID {
		pw.failf("%s: batch %s sent while %s was in flight", p.Stream, p.DeliveryID, other)
	}
	pw.inFlight[p.Stream] = p.DeliveryID
	if offsetBefore(p.FirstOffset, pw.durable[p.Stream]) {
		pw.failf("%s: batch %s from %s sent after the Store acked to %s", p.Stream, p.DeliveryID, p.FirstOffset, pw.durable[p.Stream])
	}
	fail := pw.rng.IntN(10) == 0
	pw.mu.Unlock()
	defer func() {
		pw.mu.Lock()
		if pw.inFlight[p.Stream] == p.DeliveryID {
			delete(pw.inFlight, p.Stream)
		}
		pw.mu.Unlock()
	}()

	if fire(&pw.onBatch) {
		if pw.handleFirst.Load() {
			pw.handle(&p)
		}
		<-r.Context().Done() // killed before the response is written
		return
	}
	if fail {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	pw.handle(&p)
	rw.WriteHeader(http.StatusNoContent)
}

// handle handles a batch once per delivery id.
func (pw *pushWorld) handle(p *receiver.EventsPayload) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if first, ok := pw.seen[p.DeliveryID]; ok {
		pw.retries++
		if !slices.EqualFunc(first, p.Events, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			pw.failf("%s: delivery %s sent again with other events", p.Stream, p.DeliveryID)
		}
		return
	}
	want := pw.cursor[p.Stream]
	if want == "" && p.FirstOffset == streamStart {
		want = streamStart // the engine moved past the empty stream without a POST
	}
	if want == "" {
		want = webhooks.OffsetNone
	}
	if p.FirstOffset != want {
		pw.failf("%s: new batch %s starts at %s, not at %s where the last ended", p.Stream, p.DeliveryID, p.FirstOffset, want)
		return
	}
	pw.seen[p.DeliveryID] = p.Events
	for _, e := range p.Events {
		var ev struct{ N int }
		if err := json.Unmarshal(e, &ev); err != nil {
			pw.failf("%s: event %s: %v", p.Stream, e, err)
		}
		pw.handled[p.Stream] = append(pw.handled[p.Stream], ev.N)
	}
	pw.cursor[p.Stream] = p.Offset
}

// subscribe creates the push subscription through the server at base.
func (pw *pushWorld) subscribe(base string) {
	pw.t.Helper()
	body := fmt.Sprintf(`{"webhook":%q,"delivery":"events","batch":{"max_size":3,"max_wait_ms":0},"timeout_ms":1000,"retry":{"max_attempts":0}}`, pw.recv.URL)
	secret := pw.createSubscription(base, "push", "/push/*", body)
	pw.mu.Lock()
	pw.secret = secret
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithTolerance(time.Minute))
	if err != nil {
		pw.t.Fatal(err)
	}
	pw.verifier = v
	pw.mu.Unlock()
}

// writeContinuously appends numbered events to random streams through
// random servers until stop is called, recording the acknowledged ones;
// stop returns once the last append has ended.
func (pw *pushWorld) writeContinuously() (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	pw.workers.Add(1)
	go func() {
		defer pw.workers.Done()
		defer close(exited)
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			path := fmt.Sprintf("/push/s%d", 1+n%pushStreams)
			resp, err := pw.client.Post(pw.base()+path, "application/json", strings.NewReader(`[{"n":`+strconv.Itoa(n)+`}]`))
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				pw.mu.Lock()
				pw.appended[path] = append(pw.appended[path], n)
				pw.mu.Unlock()
			}
		}
	}()
	stop = sync.OnceFunc(func() {
		close(done)
		<-exited
	})
	pw.t.Cleanup(stop)
	return stop
}

// checkDurable reads the Store and checks that no cursor moved back, and
// none moved past what the receiver handled; later batches must start at
// or after it.
func (pw *pushWorld) checkDurable() {
	pw.t.Helper()
	store, closeStore := pw.openStore()
	defer closeStore()
	ctx := context.Background()
	subs, err := store.ListSubscriptions(ctx)
	require.NoError(pw.t, err)
	require.Len(pw.t, subs, 1, "the subscription was lost")
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for i := 1; i <= pushStreams; i++ {
		path := fmt.Sprintf("/push/s%d", i)
		c, err := store.GetConsumer(ctx, webhooks.ConsumerID("push", path))
		require.NoError(pw.t, err, path)
		at := c.Streams[0].Offset
		require.False(pw.t, offsetBefore(at, pw.durable[path]), "%s: the cursor moved back from %s to %s", path, pw.durable[path], at)
		handled := pw.cursor[path]
		if handled == "" {
			// Nothing handled yet; the engine may have moved past the
			// empty stream without a POST.
			handled = webhooks.OffsetNone
			if at == streamStart {
				handled = streamStart
			}
		}
		require.False(pw.t, offsetBefore(handled, at), "%s: the cursor %s is past what the receiver handled, %s", path, at, handled)
		pw.durable[path] = at
	}
}

// waitCaughtUp waits until the receiver has handled every stream to its
// tail, then checks every event was handled once, in order.
func (pw *pushWorld) waitCaughtUp() {
	pw.t.Helper()
	tails := map[string]string{}
	for i := 1; i <= pushStreams; i++ {
		path := fmt.Sprintf("/push/s%d", i)
		tail, err := pw.tail(path)
		require.NoError(pw.t, err)
		tails[path] = tail
	}
	caughtUp := func() bool {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		for path, tail := range tails {
			// A stream the writer never reached has nothing to push.
			if len(pw.appended[path]) > 0 && pw.cursor[path] != tail {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !caughtUp() {
		if time.Now().After(deadline) {
			pw.dump(tails)
			pw.t.Fatal("the receiver never caught up with every stream")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	require.Empty(pw.t, pw.errs)
	for path, got := range pw.handled {
		require.True(pw.t, slices.IsSorted(got) && len(slices.Compact(slices.Clone(got))) == len(got),
			"%s: events handled out of order or twice: %v", path, got)
		for _, n := range pw.appended[path] {
			_, found := slices.BinarySearch(got, n)
			require.True(pw.t, found, "%s: event %d was acknowledged to the writer and never handled", path, n)
		}
	}
	pw.t.Logf("%d events handled; %d retries of handled batches deduplicated", func() int {
		n := 0
		for _, h := range pw.handled {
			n += len(h)
		}
		return n
	}(), pw.retries)
}

// dump logs the consumers as stored, and what the receiver handled, for a
// test that failed to catch up.
func (pw *pushWorld) dump(tails map[string]string) {
	store, closeStore := pw.openStore()
	defer closeStore()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for path, tail := range tails {
		c, err := store.GetConsumer(context.Background(), webhooks.ConsumerID("push", path))
		pw.t.Logf("%s: tail %s, handled to %s, stored %+v (%v)", path, tail, pw.cursor[path], c, err)
	}
}

// TestPushCrashRecovery kills the example server on a data directory with
// SIGKILL again and again while events are appended and pushed: at random
// moments, and mid-batch, before or after the receiver handled it. Nothing
// is lost, order is kept, and a batch the Store acked is never sent again.
func TestPushCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a server process many times")
	}
	pw := newPushWorld(newCrashWorld(t), *crashSeed)
	pw.start()
	pw.subscribe(pw.base())
	for i := 1; i <= pushStreams; i++ {
		pw.createStream(fmt.Sprintf("/push/s%d", i))
	}
	stop := pw.writeContinuously()
	for kill := range *crashKills {
		pw.killAt(kill)
		pw.kill()
		pw.checkDurable()
		pw.start()
	}
	stop()
	pw.waitCaughtUp()
}

// TestPushTwoInstancesCrash runs two servers on one PostgreSQL database
// and kills one of them again and again: the other and the restarted one
// share the streams, still one batch of a stream at a time.
func TestPushTwoInstancesCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills server processes many times")
	}
	pw := newPushWorld(newWorld(t, 2, pgtest.SchemaDSN(t)), *crashSeed)
	pw.start()
	pw.subscribe(pw.procs[0].base)
	for i := 1; i <= pushStreams; i++ {
		pw.createStreamOn(pw.procs[0].base, fmt.Sprintf("/push/s%d", i))
	}
	stop := pw.writeContinuously()
	for kill := range *crashKills {
		pw.killAt(kill)
		pw.killProc(kill % 2)
		pw.checkDurable()
		pw.start()
	}
	stop()
	pw.waitCaughtUp()
}

// killAt waits for the moment of kill number kill: a random one, or a
// batch in flight, handled by the receiver or not.
func (pw *pushWorld) killAt(kill int) {
	switch kill % 3 {
	case 0:
		pw.mu.Lock()
		d := time.Duration(50+pw.rng.IntN(400)) * time.Millisecond
		pw.mu.Unlock()
		time.Sleep(d)
	default:
		pw.handleFirst.Store(kill%3 == 2)
		pw.killOn(&pw.onBatch, "mid-batch")
	}
}
