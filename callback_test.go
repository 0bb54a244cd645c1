package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// live wakes consumer s1:/agents/a with 10 bytes pending and waits until a
// 2xx made it LIVE.
func (h *harness) live() delivery {
	h.t.Helper()
	d := h.wake("s1", "/agents/*", agentA)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	return d
}

func TestClaimMovesWakingToLiveAndIsIdempotent(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: 200, hold: hold}) // no 2xx until the test ends
	d := h.wake("s1", "/agents/*", agentA)
	require.Equal(t, webhooks.StateWaking, h.consumer(agentAID).State)

	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.True(t, r.body.OK)
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateLive, c.State)
	require.Equal(t, h.clock.Now().Add(webhooks.DefaultLivenessTimeout), c.Deadline)
	require.False(t, c.InFlight, "a claim ends the WAKING timeout")

	// S3: claiming again succeeds; another wake_id is refused.
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: "w_forged"})
	requireError(t, r, http.StatusConflict, receiver.CodeAlreadyClaimed)
}

func TestClaimAfterTwoXXIsIdempotent(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), WakeID: d.n.WakeID})
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

func TestCallbackWithoutWakeIDClaims(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	defer close(hold)
	h.recv.queue(reply{status: 200, hold: hold})
	d := h.wake("s1", "/agents/*", agentA)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, webhooks.StateLive, h.consumer(agentAID).State)
}

func TestStaleAndFutureEpochsAreRejected(t *testing.T) {
	h := newHarness(t)
	first := h.live()
	// Finish epoch 1 with work pending: epoch 2 begins (L3).
	r := h.callback(agentAID, first.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(4)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	second := h.nextDelivery()
	require.Equal(t, int64(2), second.n.Epoch)
	require.Equal(t, streamOffsets(agentA, offset(4)), second.n.Streams)

	// S6: the zombie's old token, still validly signed, gets STALE_EPOCH,
	// not 401, so that it knows to stop.
	r = h.callback(agentAID, first.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10))})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	require.Contains(t, r.body.Error.Message, "current epoch is 2")
	// A current token with a stale or future epoch in the body.
	r = h.callback(agentAID, second.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	r = h.callback(agentAID, second.n.Token, receiver.CallbackRequest{Epoch: epoch(3)})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	// Nothing the zombie sent was applied.
	require.Equal(t, streamOffsets(agentA, offset(4)), h.consumer(agentAID).Streams)

	// Even once its token has expired, the zombie learns it is stale, and
	// gets no fresh token. Epoch 2 acks everything first, so the clock can
	// run without new wakes.
	r = h.callback(agentAID, second.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Acks: streamOffsets(agentA, offset(10))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	h.clock.Add(2 * webhooks.DefaultTokenTTL)
	require.Equal(t, int64(2), h.waitConsumer(agentAID, h.settled).Epoch)
	r = h.callback(agentAID, first.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	require.Empty(t, r.body.Token)
}

func TestAcksMoveForwardOnly(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	ackTo := func(o string) callbackResult {
		return h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, o)})
	}
	r := ackTo(offset(6))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, streamOffsets(agentA, offset(6)), r.body.Streams)
	// S4: an older ack is accepted (a retry) and changes nothing.
	r = ackTo(offset(2))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, streamOffsets(agentA, offset(6)), r.body.Streams)
	r = ackTo(webhooks.OffsetNone)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, streamOffsets(agentA, offset(6)), r.body.Streams)
	// The tail itself is fine; beyond it, or not an offset, is refused.
	r = ackTo(offset(10))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	requireError(t, ackTo(offset(11)), http.StatusConflict, receiver.CodeInvalidOffset)
	requireError(t, ackTo("zzz"), http.StatusConflict, receiver.CodeInvalidOffset)
	require.Equal(t, streamOffsets(agentA, offset(10)), h.consumer(agentAID).Streams)
}

// An ack of a stream the consumer does not hold, as one it has just
// unsubscribed from, is accepted and ignored, as the reference servers do:
// it moves no cursor and adds no stream, whatever its offset.
func TestAckOfAStreamNotHeldIsIgnored(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	h.create("/tools/a", 10)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{"/tools/a"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = h.callback(agentAID, r.body.Token, receiver.CallbackRequest{Epoch: epoch(1), Unsubscribe: []string{"/tools/a"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	for _, o := range []string{offset(5), offset(99), "zzz", webhooks.OffsetNone} {
		r = h.callback(agentAID, r.body.Token, receiver.CallbackRequest{
			Epoch: epoch(1), Acks: streamOffsets("/tools/a", o, "/never/held", o, agentA, offset(3)),
		})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, streamOffsets(agentA, offset(3)), r.body.Streams)
	}
	require.Equal(t, streamOffsets(agentA, offset(3)), h.consumer(agentAID).Streams)
}

func TestSubscribeStartsAtTailAndMayBeLazy(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	h.source.set("/tools/a", 50)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{"/tools/a", "/later/a"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.ElementsMatch(t, streamOffsets(agentA, webhooks.OffsetNone, "/tools/a", offset(50), "/later/a", webhooks.OffsetNone), r.body.Streams)
	// Subscribing again is idempotent and keeps the offset.
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{"/tools/a"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Len(t, r.body.Streams, 3)

	// Done with everything acked: IDLE. Then the lazily subscribed stream
	// appears with data, and wakes the consumer through it.
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, webhooks.StateIdle, h.consumer(agentAID).State)
	h.create("/later/a", 3)
	next := h.nextDelivery()
	require.Equal(t, agentAID, next.n.ConsumerID)
	require.Equal(t, []string{"/later/a"}, next.n.TriggeredBy)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	// And through the secondary stream too.
	r = h.callback(agentAID, next.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Acks: streamOffsets("/later/a", offset(3)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	h.appendTo("/tools/a", 1)
	require.Equal(t, []string{"/tools/a"}, h.nextDelivery().n.TriggeredBy)
}

func TestUnsubscribeIncludingPrimaryAndAll(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{"/tools/a"}, Unsubscribe: []string{agentA}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, streamOffsets("/tools/a", webhooks.OffsetNone), r.body.Streams)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Unsubscribe: []string{"/tools/a", "/never/subscribed"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.NotNil(t, r.body.Streams)
	require.Empty(t, r.body.Streams)
	require.NotEmpty(t, r.body.Token, "S5")
	h.waitGone(agentAID)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)
}

func TestDoneWithoutPendingGoesIdle(t *testing.T) { // L2
	h := newHarness(t)
	d := h.live()
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateIdle, c.State)
	require.Equal(t, int64(1), c.Epoch)
	require.True(t, c.Deadline.IsZero(), "no re-wake is scheduled")
	// A retried done is idempotent.
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, webhooks.StateIdle, h.consumer(agentAID).State)
}

func TestDoneWithPendingRewakes(t *testing.T) { // L3
	h := newHarness(t)
	d := h.live()
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	next := h.nextDelivery()
	require.Equal(t, int64(2), next.n.Epoch)
	require.NotEqual(t, d.n.WakeID, next.n.WakeID)
}

func TestAnyCallbackResetsLiveness(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	for i := 0; i < 3; i++ {
		h.clock.Add(webhooks.DefaultLivenessTimeout - time.Second)
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	c := h.consumer(agentAID)
	require.Equal(t, webhooks.StateLive, c.State)
	require.Equal(t, h.clock.Now().Add(webhooks.DefaultLivenessTimeout), c.Deadline)
}

func TestCallbackIsAtomic(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	before := h.consumer(agentAID)
	// A valid subscribe, ack and done with one bad ack: nothing is applied.
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{
		Epoch:     epoch(1),
		Subscribe: []string{"/tools/a"},
		Acks:      streamOffsets(agentA, offset(5), agentA, offset(99)),
		Done:      true,
	})
	requireError(t, r, http.StatusConflict, receiver.CodeInvalidOffset)
	require.Equal(t, before, h.consumer(agentAID))
}

func TestMalformedCallbacksAreRejected(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	for name, body := range map[string]string{
		"not JSON":       `epoch=1`,
		"empty":          ``,
		"missing epoch":  `{"acks":[]}`,
		"null epoch":     `{"epoch":null}`,
		"unknown field":  `{"epoch":1,"extra":true}`,
		"trailing data":  `{"epoch":1}{}`,
		"wrong type":     `{"epoch":"1"}`,
		"relative path":  `{"epoch":1,"subscribe":["tools"]}`,
		"empty offset":   `{"epoch":1,"acks":[{"path":"/agents/a","offset":""}]}`,
		"too many":       `{"epoch":1,"subscribe":[` + strings.Repeat(`"/x",`, webhooks.MaxCallbackListLength) + `"/y"]}`,
		"oversized body": `{"epoch":1,"wake_id":"` + strings.Repeat("x", webhooks.MaxCallbackBodyBytes) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			requireError(t, h.rawCallback(agentAID, d.n.Token, body), http.StatusBadRequest, receiver.CodeInvalidRequest)
		})
	}
	rec := h.do(http.MethodGet, "/callback/"+agentAID, "", "Authorization", "Bearer "+d.n.Token)
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	require.Equal(t, http.MethodPost, rec.Header().Get("Allow"))
}

func TestStreamLimitPerConsumer(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	var paths []string
	for i := 1; i < webhooks.MaxStreamsPerConsumer; i++ { // the primary is one
		paths = append(paths, fmt.Sprintf("/s/%d", i))
	}
	for len(paths) > 0 {
		n := min(len(paths), webhooks.MaxCallbackListLength)
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: paths[:n]})
		require.Equal(t, http.StatusOK, r.status, "%.300s", r.raw)
		paths = paths[n:]
	}
	require.Len(t, h.consumer(agentAID).Streams, webhooks.MaxStreamsPerConsumer)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{"/one/more"}})
	requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
}

func TestTokenRules(t *testing.T) {
	h := newHarness(t)
	d := h.live()

	t.Run("every success carries a token", func(t *testing.T) { // S5
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, d.n.Token, r.body.Token, "a token far from expiry is returned as is")
	})
	t.Run("missing or malformed", func(t *testing.T) {
		requireError(t, h.callback(agentAID, "", receiver.CallbackRequest{Epoch: epoch(1)}), http.StatusUnauthorized, receiver.CodeTokenInvalid)
		requireError(t, h.callback(agentAID, "not.a.jwt", receiver.CallbackRequest{Epoch: epoch(1)}), http.StatusUnauthorized, receiver.CodeTokenInvalid)
		tampered := d.n.Token[:len(d.n.Token)-2] + "AA"
		if tampered == d.n.Token {
			tampered = d.n.Token[:len(d.n.Token)-2] + "BB"
		}
		r := h.callback(agentAID, tampered, receiver.CallbackRequest{Epoch: epoch(1)})
		requireError(t, r, http.StatusUnauthorized, receiver.CodeTokenInvalid)
		require.Empty(t, r.body.Token)
	})
	t.Run("token of another consumer", func(t *testing.T) {
		h.create("/agents/b", 0)
		h.appendTo("/agents/b", 1)
		other := h.nextDelivery()
		r := h.callback(agentAID, other.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
		requireError(t, r, http.StatusUnauthorized, receiver.CodeTokenInvalid)
	})
	t.Run("renewed near expiry", func(t *testing.T) {
		keepAlive := func() callbackResult {
			r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
			require.Equal(t, http.StatusOK, r.status, r.raw)
			return r
		}
		step := webhooks.DefaultLivenessTimeout - time.Second
		for h.clock.Now().Add(step).Before(testStart.Add(webhooks.DefaultTokenTTL * 3 / 4)) {
			h.clock.Add(step)
			require.Equal(t, d.n.Token, keepAlive().body.Token)
		}
		h.clock.Add(step) // now within the last quarter of the TTL
		fresh := keepAlive().body.Token
		require.NotEqual(t, d.n.Token, fresh)
		r := h.callback(agentAID, fresh, receiver.CallbackRequest{Epoch: epoch(1)})
		require.Equal(t, http.StatusOK, r.status, r.raw)
	})
	t.Run("expired carries a new token", func(t *testing.T) {
		// Ack everything, so the liveness timeout ends the cycle without a
		// new wake while the clock runs past the token's expiry.
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10))})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		h.clock.Add(webhooks.DefaultTokenTTL)
		r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
		requireError(t, r, http.StatusUnauthorized, receiver.CodeTokenExpired)
		require.NotEmpty(t, r.body.Token)
		retry := h.callback(agentAID, r.body.Token, receiver.CallbackRequest{Epoch: epoch(1)})
		require.Equal(t, http.StatusOK, retry.status, retry.raw)
	})
}

func TestCallbackIDIsReadFromTheRawPath(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	// Over a real server, so net/http decodes the path as it would in
	// production; the callback URL is used exactly as delivered.
	srv := httptest.NewServer(h.handler)
	defer srv.Close()
	url := srv.URL + strings.TrimPrefix(d.n.Callback, callbackBase)
	require.Contains(t, url, "%2Fagents%2Fa")
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(`{"epoch":1}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+d.n.Token)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out receiver.CallbackResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.True(t, out.OK)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
}

func TestGoneAfterSubscriptionDelete(t *testing.T) { // S7
	h := newHarness(t)
	d := h.live()
	rec := h.do(http.MethodDelete, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, rec.Code)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1)})
	requireError(t, r, http.StatusGone, receiver.CodeConsumerGone)
}

func TestErrorShape(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(7)})
	var shape map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.raw), &shape))
	require.Equal(t, false, shape["ok"])
	errObj, ok := shape["error"].(map[string]any)
	require.True(t, ok, r.raw)
	require.Equal(t, "STALE_EPOCH", errObj["code"])
	require.IsType(t, "", errObj["message"])
	require.Len(t, errObj, 2)
}

func TestConcurrentCallbacksAreSerialPerConsumer(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	const n = 10
	subscribe := make([]string, n)
	for i := range subscribe {
		subscribe[i] = fmt.Sprintf("/side/%d", i)
		h.source.set(subscribe[i], 0)
	}
	// Each goroutine subscribes to one more stream and acks the primary; a
	// lost update would drop a subscription or leave a lower offset.
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{
				Epoch: epoch(1), Subscribe: subscribe[i : i+1], Acks: streamOffsets(agentA, offset(i+1)),
			})
			if r.status != http.StatusOK {
				errs <- fmt.Errorf("status %d: %s", r.status, r.raw)
				return
			}
			errs <- nil
		}()
	}
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
	}
	c := h.consumer(agentAID)
	require.Len(t, c.Streams, n+1)
	require.Equal(t, streamOffsets(agentA, offset(n)), c.Streams[:1])
}

// BenchmarkCallbackAck measures one ack callback on a LIVE consumer through
// the engine's handler: token check, decode, one UpdateConsumer and the
// response, over the memory store and over SQLite, whose commit waits for
// fsync. The parallel variant sends concurrent callbacks from many
// consumers, as real traffic does, which SQLite commits in groups.
func BenchmarkCallbackAck(b *testing.B) {
	for _, store := range []struct {
		name string
		open func(b *testing.B) webhooks.Store
	}{
		{"memory", func(*testing.B) webhooks.Store { return memstore.New() }},
		{"sqlite", func(b *testing.B) webhooks.Store {
			s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "hooks.db"))
			require.NoError(b, err)
			b.Cleanup(func() { require.NoError(b, s.Close()) })
			return s
		}},
	} {
		b.Run("store="+store.name, func(b *testing.B) {
			h := newHarnessStore(b, store.open(b))
			acks := benchLiveConsumers(h, 64)
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					acks[i%len(acks)].send(b, h)
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(16) // concurrent requests, not cores
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					a := acks[int(next.Add(1))%len(acks)]
					for pb.Next() {
						a.send(b, h)
					}
				})
			})
		})
	}
}

// benchAck is a ready ack callback of one LIVE consumer.
type benchAck struct {
	target, token string
	body          []byte
}

func (a benchAck) send(b *testing.B, h *harness) {
	req := httptest.NewRequest(http.MethodPost, a.target, bytes.NewReader(a.body))
	req.Header.Set("Authorization", "Bearer "+a.token)
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Error(rec.Body.String())
	}
}

// benchLiveConsumers makes n consumers LIVE and returns an ack for each.
func benchLiveConsumers(h *harness, n int) []benchAck {
	h.t.Helper()
	h.subscribe("s1", "/agents/*")
	for i := range n {
		path := fmt.Sprintf("/agents/bench%d", i)
		h.create(path, 0)
		h.appendTo(path, 10)
	}
	acks := make([]benchAck, n)
	for i := range acks {
		d := h.nextDelivery()
		body, err := json.Marshal(receiver.CallbackRequest{Epoch: epoch(d.n.Epoch), Acks: streamOffsets(d.n.PrimaryStream, offset(5))})
		require.NoError(h.t, err)
		acks[i] = benchAck{target: "/callback/" + d.n.ConsumerID, token: d.n.Token, body: body}
		h.waitConsumer(d.n.ConsumerID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	}
	return acks
}

// A consumer removed and spawned again under the same ID starts its epochs
// afresh; a worker of the earlier one still holding a token of the same
// epoch is fenced off, not let in.
func TestCallbackTokenOfEarlierIncarnationIsStale(t *testing.T) {
	h := newHarness(t)
	old := h.wake("s1", "/agents/*", "/agents/t1")
	id := old.n.ConsumerID

	h.source.remove("/agents/t1")
	require.NoError(t, h.engine.StreamDeleted(context.Background(), "/agents/t1"))
	h.waitGone(id)
	h.create("/agents/t1", 1)
	fresh := h.nextDelivery()
	require.Equal(t, id, fresh.n.ConsumerID)
	require.Equal(t, old.n.Epoch, fresh.n.Epoch, "the new consumer counts its epochs from the start")
	require.NotEqual(t, old.n.WakeID, fresh.n.WakeID)
	before := h.waitConsumer(id, func(c *webhooks.Consumer) bool { return h.settled(c) })

	r := h.callback(id, old.n.Token, receiver.CallbackRequest{
		Epoch: epoch(old.n.Epoch), Acks: streamOffsets("/agents/t1", offset(1)), Done: true,
	})
	requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
	require.Equal(t, before, h.consumer(id), "a refused callback changes nothing")

	r = h.callback(id, fresh.n.Token, receiver.CallbackRequest{Epoch: epoch(fresh.n.Epoch)})
	require.Equal(t, http.StatusOK, r.status, r.raw)
}
