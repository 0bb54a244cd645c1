package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// Tests of the reserved __ds API (upstream protocol sections 6 and 7). The
// harness's engine serves it at the stream root "", so at /__ds/.

// appendingSource is the harness's fake source with the StreamAppender
// capability: an appended wake event grows the stream by one, is kept,
// and is told to the engine, as a host's append is.
type appendingSource struct {
	*fakeSource
	notify func(ctx context.Context, path string) error

	mu     sync.Mutex
	events map[string][][]byte
}

func (s *appendingSource) Append(ctx context.Context, path string, event []byte) error {
	if _, err := s.Stream(ctx, path); err != nil {
		return err
	}
	s.mu.Lock()
	s.events[path] = append(s.events[path], append([]byte(nil), event...))
	s.mu.Unlock()
	s.grow(path, 1)
	return s.notify(ctx, path)
}

// wakeEvents are the wake events appended to path so far.
func (s *appendingSource) wakeEvents(path string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, e := range s.events[path] {
		var m map[string]any
		if err := json.Unmarshal(e, &m); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// newDSHarness is a harness whose source can append wake events.
func newDSHarness(t *testing.T, opts ...webhooks.Option) (*harness, *appendingSource) {
	t.Helper()
	return newDSHarnessStore(t, memstore.New(), opts...)
}

// newDSHarnessStore is newDSHarness over store, which the caller closes.
func newDSHarnessStore(t *testing.T, store webhooks.Store, opts ...webhooks.Option) (*harness, *appendingSource) {
	t.Helper()
	var src *appendingSource
	h := &harness{t: t, clock: newMockClock(), store: store, source: newFakeSource(), recv: newReceiver(t), dsSignals: true}
	h.wrap = func(f *fakeSource) webhooks.StreamSource {
		src = &appendingSource{fakeSource: f, events: map[string][][]byte{},
			notify: func(ctx context.Context, path string) error { return h.engine.StreamAppended(ctx, path) }}
		return src
	}
	h.startEngine(opts...)
	return h, src
}

// dsReply is a decoded answer of the reserved API.
type dsReply struct {
	status int
	raw    string
	body   map[string]any
}

// errorCode is the reply's error.code, or "".
func (r dsReply) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// ds sends a request to the reserved API, with a bearer token if given.
func (h *harness) ds(method, path string, body any, token string) dsReply {
	h.t.Helper()
	var data string
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(h.t, err)
		data = string(b)
	}
	hdr := []string{"Content-Type", "application/json"}
	if token != "" {
		hdr = append(hdr, "Authorization", "Bearer "+token)
	}
	rec := h.do(method, "/__ds/"+path, data, hdr...)
	out := dsReply{status: rec.Code, raw: rec.Body.String()}
	if rec.Body.Len() > 0 {
		require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out.body), out.raw)
	}
	return out
}

// dsPut creates a __ds subscription, requiring 201.
func (h *harness) dsPut(id string, cfg map[string]any) dsReply {
	h.t.Helper()
	r := h.ds(http.MethodPut, "subscriptions/"+id, cfg, "")
	require.Equal(h.t, http.StatusCreated, r.status, r.raw)
	return r
}

// dsAcked is the acked offset of the link of path in subscription id, or
// "" if it has none.
func (h *harness) dsAcked(id, path string) string {
	h.t.Helper()
	r := h.ds(http.MethodGet, "subscriptions/"+id, nil, "")
	require.Equal(h.t, http.StatusOK, r.status, r.raw)
	for _, s := range r.body["streams"].([]any) {
		l := s.(map[string]any)
		if l["path"] == path {
			return l["acked_offset"].(string)
		}
	}
	return ""
}

// dsWake is a webhook wake as a receiver decodes it.
type dsWake struct {
	SubscriptionID string `json:"subscription_id"`
	WakeID         string `json:"wake_id"`
	Generation     int64  `json:"generation"`
	Streams        []struct {
		Path        string `json:"path"`
		LinkType    string `json:"link_type"`
		AckedOffset string `json:"acked_offset"`
		TailOffset  string `json:"tail_offset"`
		HasPending  bool   `json:"has_pending"`
	} `json:"streams"`
	CallbackURL   string `json:"callback_url"`
	CallbackToken string `json:"callback_token"`
}

// nextDSWake waits for the receiver's next POST and decodes it as a wake.
func (h *harness) nextDSWake() (dsWake, delivery) {
	h.t.Helper()
	d := h.nextDelivery()
	var w dsWake
	require.NoError(h.t, json.Unmarshal(d.body, &w), string(d.body))
	require.NotEmpty(h.t, w.WakeID, string(d.body))
	return w, d
}

func ackBody(w dsWake, done bool, pairs ...string) map[string]any {
	acks := []map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		acks = append(acks, map[string]string{"stream": pairs[i], "offset": pairs[i+1]})
	}
	return map[string]any{"wake_id": w.WakeID, "generation": w.Generation, "acks": acks, "done": done}
}

func webhookSub(h *harness, pattern string) map[string]any {
	return map[string]any{"type": "webhook", "pattern": pattern, "webhook": map[string]string{"url": h.recv.url()}, "lease_ttl_ms": 1000}
}

// Section 6.2: PUT creates (201), re-confirms an identical configuration
// (200) and refuses another one (409); the response carries the signing
// metadata and never a secret; the stream paths are root-relative.
func TestDSCreateReconfirmConflict(t *testing.T) {
	h, _ := newDSHarness(t)
	h.source.set("/events/old", 4)
	r := h.dsPut("s1", webhookSub(h, "events/*"))
	require.NotContains(t, r.raw, "secret")
	require.Equal(t, "s1", r.body["id"])
	require.Equal(t, "s1", r.body["subscription_id"])
	require.Equal(t, "active", r.body["status"])
	signing := r.body["webhook"].(map[string]any)["signing"].(map[string]any)
	require.Equal(t, "ed25519", signing["alg"])
	require.True(t, strings.HasPrefix(signing["kid"].(string), "ds_"), signing["kid"])
	require.Equal(t, callbackBase+"/__ds/jwks.json", signing["jwks_url"])
	// Eager backfill at the tail: an existing stream is linked, nothing
	// of its history pending.
	require.Equal(t, offset(4), h.dsAcked("s1", "events/old"))

	again := h.ds(http.MethodPut, "subscriptions/s1", webhookSub(h, "events/*"), "")
	require.Equal(t, http.StatusOK, again.status, again.raw)
	other := webhookSub(h, "events/*")
	other["description"] = "changed"
	conflict := h.ds(http.MethodPut, "subscriptions/s1", other, "")
	require.Equal(t, http.StatusConflict, conflict.status, conflict.raw)

	for _, bad := range []map[string]any{
		{"type": "webhook", "webhook": map[string]string{"url": h.recv.url()}},                                             // no pattern nor streams
		{"type": "nope", "pattern": "events/*"},                                                                            // unknown type
		{"type": "pull-wake", "pattern": "events/*"},                                                                       // no wake stream
		{"type": "webhook", "pattern": "events/*", "webhook": map[string]string{"url": h.recv.url()}, "lease_ttl_ms": 999}, // lease below 1 s
		{"type": "webhook", "streams": []string{"/abs"}, "webhook": map[string]string{"url": h.recv.url()}},                // not root-relative
		{"type": "webhook", "streams": []string{"__ds/x"}, "webhook": map[string]string{"url": h.recv.url()}},              // reserved
	} {
		r := h.ds(http.MethodPut, "subscriptions/bad", bad, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", bad, r.raw)
		require.Equal(t, "INVALID_REQUEST", r.errorCode(), r.raw)
	}
}

// Sections 6.2 and 12.8: a webhook URL on a private network, or plain
// http off loopback, is refused at creation with WEBHOOK_URL_REJECTED, and
// nothing ever dials it.
func TestDSRejectsUnsafeWebhookURLs(t *testing.T) {
	dialed := make(chan string, 10)
	h, _ := newDSHarness(t, webhooks.WithHTTPTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		dialed <- r.URL.String()
		return nil, fmt.Errorf("no network in this test")
	})))
	for _, u := range []string{"http://10.0.0.1/hook", "https://10.0.0.1/hook", "http://example.com/hook", "https://169.254.169.254/latest"} {
		r := h.ds(http.MethodPut, "subscriptions/unsafe", map[string]any{"type": "webhook", "pattern": "events/*", "webhook": map[string]string{"url": u}}, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", u, r.raw)
		require.Equal(t, "WEBHOOK_URL_REJECTED", r.errorCode(), r.raw)
	}
	require.Equal(t, http.StatusNotFound, h.ds(http.MethodGet, "subscriptions/unsafe", nil, "").status)
	h.create("/events/a", 3)
	require.Empty(t, dialed)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Sections 7.1 and 7.3: a wake carries the section 7 payload, signed with
// Ed25519; a callback acks and ends it; a stale generation or wake_id is
// 409 FENCED and moves no cursor.
func TestDSWebhookCallbackAndFencing(t *testing.T) {
	h, _ := newDSHarness(t)
	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	w, d := h.nextDSWake()
	require.Equal(t, "s1", w.SubscriptionID)
	require.Equal(t, int64(1), w.Generation)
	require.Equal(t, callbackBase+"/__ds/subscriptions/s1/callback", w.CallbackURL)
	require.Len(t, w.Streams, 1)
	require.Equal(t, "events/a", w.Streams[0].Path)
	require.Equal(t, "glob", w.Streams[0].LinkType)
	require.Equal(t, offset(10), w.Streams[0].TailOffset)
	require.True(t, w.Streams[0].HasPending)
	require.Regexp(t, `^t=\d+,kid=ds_[^,]+,ed25519=[A-Za-z0-9_-]+$`, d.header.Get("Webhook-Signature"))

	// A stale generation, or a wake_id of another wake, under the right
	// token: fenced, nothing acked.
	stale := ackBody(w, true, "events/a", offset(10))
	stale["generation"] = w.Generation + 1
	r := h.ds(http.MethodPost, "subscriptions/s1/callback", stale, w.CallbackToken)
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	require.JSONEq(t, `{"error":{"code":"FENCED"}}`, r.raw)
	other := ackBody(w, true, "events/a", offset(10))
	other["wake_id"] = "w_other"
	r = h.ds(http.MethodPost, "subscriptions/s1/callback", other, w.CallbackToken)
	require.Equal(t, "FENCED", r.errorCode(), r.raw)
	require.Equal(t, webhooks.OffsetNone, h.dsAcked("s1", "events/a"), "a fenced callback moved the cursor")

	// A token of another subscription is not this one's.
	r = h.ds(http.MethodPost, "subscriptions/s2/callback", ackBody(w, true), w.CallbackToken)
	require.Equal(t, http.StatusUnauthorized, r.status, r.raw)

	r = h.ds(http.MethodPost, "subscriptions/s1/callback", ackBody(w, true, "events/a", offset(10)), w.CallbackToken)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.JSONEq(t, `{"ok":true,"next_wake":false}`, r.raw)
	require.Equal(t, offset(10), h.dsAcked("s1", "events/a"))

	// The same callback again is stale: the wake has ended.
	h.appendTo("/events/a", 5)
	w2, _ := h.nextDSWake()
	require.Equal(t, w.Generation+1, w2.Generation)
	r = h.ds(http.MethodPost, "subscriptions/s1/callback", ackBody(w, true, "events/a", offset(15)), w.CallbackToken)
	require.Equal(t, "FENCED", r.errorCode(), r.raw)
	require.Equal(t, offset(10), h.dsAcked("s1", "events/a"), "a stale callback moved the cursor")
}

// Section 7.1: {"done": true} from the webhook acks the snapshot's tails;
// events appended after the snapshot are woken again with a new
// generation and wake_id.
func TestDSWebhookDoneAutoAcksTheSnapshot(t *testing.T) {
	h, _ := newDSHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold}, reply{status: http.StatusOK, body: `{"done":true}`})
	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	w1, _ := h.nextDSWake()
	h.appendTo("/events/a", 5) // after the snapshot
	close(hold)
	w2, _ := h.nextDSWake()
	require.Equal(t, w1.Generation+1, w2.Generation)
	require.NotEqual(t, w1.WakeID, w2.WakeID)
	require.Equal(t, offset(10), w2.Streams[0].AckedOffset, "the first wake's snapshot was acked")
	require.Equal(t, offset(15), w2.Streams[0].TailOffset)
	require.True(t, h.waitProgress(func() bool { return h.dsAcked("s1", "events/a") == offset(15) }))
}

// Section 7.1: a failed delivery is retried after 1 s ± 20 %, with the
// same generation and wake_id, and the subscription shows status failed
// meanwhile.
func TestDSWebhookRetryAndStatus(t *testing.T) {
	h, _ := newDSHarness(t)
	h.recv.queue(reply{status: http.StatusInternalServerError})
	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	w1, _ := h.nextDSWake()
	require.True(t, h.waitProgress(func() bool {
		return h.ds(http.MethodGet, "subscriptions/s1", nil, "").body["status"] == "failed"
	}), "status never became failed")
	sub, err := h.store.(webhooks.DSStore).GetDSSubscription(context.Background(), "s1")
	require.NoError(t, err)
	wait := sub.Cursor.DueAt.Sub(h.clock.Now())
	require.GreaterOrEqual(t, wait, 800*time.Millisecond, "the retry is persisted as the due time, 1 s - 20 %")
	require.LessOrEqual(t, wait, 1200*time.Millisecond, "the retry is persisted as the due time, 1 s + 20 %")
	h.clock.Add(wait)
	w2, _ := h.nextDSWake()
	require.Equal(t, w1.Generation, w2.Generation)
	require.Equal(t, w1.WakeID, w2.WakeID)
	require.True(t, h.waitProgress(func() bool {
		return h.ds(http.MethodGet, "subscriptions/s1", nil, "").body["status"] == "active"
	}), "status never became active again")
}

// claim POSTs a claim of id by worker.
func (h *harness) claim(id, worker string) dsReply {
	h.t.Helper()
	return h.ds(http.MethodPost, "subscriptions/"+id+"/claim", map[string]string{"worker": worker}, "")
}

// claimed is a successful claim's wake.
func claimedWake(t *testing.T, r dsReply) (dsWake, string) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, r.raw)
	var w dsWake
	require.NoError(t, json.Unmarshal([]byte(r.raw), &w))
	return w, r.body["token"].(string)
}

// waitWakeEvents waits until path has n wake events.
func (h *harness) waitWakeEvents(src *appendingSource, path string, n int) []map[string]any {
	h.t.Helper()
	var got []map[string]any
	if !h.waitProgress(func() bool { got = src.wakeEvents(path); return len(got) >= n }) {
		h.t.Fatalf("%d wake events on %s, want %d: %v", len(got), path, n, got)
	}
	return got
}

// Section 7.2: a wake event on the wake stream; two workers race to
// claim, one wins and the other gets ALREADY_CLAIMED with the holder; an
// ack without done is a heartbeat that extends the lease; stale acks and
// releases are FENCED; an expired lease with pending work wakes again; a
// release with pending work writes another wake event; a subscription's
// own wake stream never wakes it.
func TestDSPullWakeClaimLeasesAndRelease(t *testing.T) {
	h, src := newDSHarness(t)
	h.source.set("/wake/pool", 0)
	h.dsPut("p1", map[string]any{"type": "pull-wake", "pattern": "**", "wake_stream": "wake/pool", "lease_ttl_ms": 1000})
	h.create("/events/a", 10)
	events := h.waitWakeEvents(src, "/wake/pool", 1)
	require.Equal(t, "wake", events[0]["type"])
	require.Equal(t, "p1", events[0]["subscription_id"])
	require.Equal(t, "events/a", events[0]["stream"])
	require.EqualValues(t, 1, events[0]["generation"])
	require.EqualValues(t, h.clock.Now().UnixMilli(), events[0]["ts"])

	// The race.
	replies := make(chan dsReply, 2)
	var wg sync.WaitGroup
	for _, worker := range []string{"worker-1", "worker-2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies <- h.claim("p1", worker)
		}()
	}
	wg.Wait()
	close(replies)
	var won, lost []dsReply
	for r := range replies {
		if r.status == http.StatusOK {
			won = append(won, r)
		} else {
			lost = append(lost, r)
		}
	}
	require.Len(t, won, 1)
	require.Len(t, lost, 1)
	require.Equal(t, http.StatusConflict, lost[0].status, lost[0].raw)
	w, token := claimedWake(t, won[0])
	require.EqualValues(t, 1, w.Generation, "the claim takes the woken generation")
	holder := "worker-1"
	if strings.Contains(lost[0].raw, "worker-1") {
		holder = "worker-2"
	}
	require.JSONEq(t, fmt.Sprintf(`{"error":{"code":"ALREADY_CLAIMED","current_holder":%q,"generation":1}}`, otherWorker(holder)), lost[0].raw)

	// Heartbeats carry the lease past its first second.
	h.clock.Add(800 * time.Millisecond)
	r := h.ds(http.MethodPost, "subscriptions/p1/ack", ackBody(w, false), token)
	require.JSONEq(t, `{"ok":true,"next_wake":false}`, r.raw)
	h.clock.Add(800 * time.Millisecond)
	r = h.claim("p1", "worker-3")
	require.Equal(t, "ALREADY_CLAIMED", r.errorCode(), "the heartbeat did not extend the lease: %s", r.raw)

	// Stale ack and release are fenced and move nothing.
	stale := ackBody(w, true, "events/a", offset(10))
	stale["wake_id"] = "w_stale"
	r = h.ds(http.MethodPost, "subscriptions/p1/ack", stale, token)
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	require.Equal(t, "FENCED", r.errorCode())
	r = h.ds(http.MethodPost, "subscriptions/p1/release", map[string]any{"wake_id": w.WakeID, "generation": w.Generation + 1}, token)
	require.Equal(t, "FENCED", r.errorCode(), r.raw)
	require.Equal(t, webhooks.OffsetNone, h.dsAcked("p1", "events/a"))

	// Expiry: no heartbeat for a lease, work pending, a new wake event.
	h.clock.Add(1100 * time.Millisecond)
	events = h.waitWakeEvents(src, "/wake/pool", 2)
	require.EqualValues(t, 2, events[1]["generation"])
	r = h.ds(http.MethodPost, "subscriptions/p1/ack", ackBody(w, true, "events/a", offset(10)), token)
	require.Equal(t, "FENCED", r.errorCode(), "an expired lease's ack was applied: %s", r.raw)

	// Release with pending work: another wake event.
	w2, token2 := claimedWake(t, h.claim("p1", "worker-2"))
	require.EqualValues(t, 2, w2.Generation)
	r = h.ds(http.MethodPost, "subscriptions/p1/release", map[string]any{"wake_id": w2.WakeID, "generation": w2.Generation}, token2)
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	events = h.waitWakeEvents(src, "/wake/pool", 3)
	require.EqualValues(t, 3, events[2]["generation"])

	// Acking everything ends the work: the wake events appended to
	// wake/pool, which "**" matches, are not work.
	w3, token3 := claimedWake(t, h.claim("p1", "worker-1"))
	require.EqualValues(t, 3, w3.Generation)
	r = h.ds(http.MethodPost, "subscriptions/p1/ack", ackBody(w3, true, "events/a", offset(10)), token3)
	require.JSONEq(t, `{"ok":true,"next_wake":false}`, r.raw)
	require.Empty(t, h.dsAcked("p1", "wake/pool"), "the subscription linked its own wake stream")
}

func otherWorker(w string) string {
	if w == "worker-1" {
		return "worker-2"
	}
	return "worker-1"
}

// Section 6.3: deletion tombstones the subscription: in-flight callbacks
// fail and move no cursor, even after it is created again.
func TestDSDeleteTombstones(t *testing.T) {
	h, _ := newDSHarness(t)
	h.dsPut("s1", webhookSub(h, "events/*"))
	h.create("/events/a", 10)
	w, _ := h.nextDSWake()
	r := h.ds(http.MethodDelete, "subscriptions/s1", nil, "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	r = h.ds(http.MethodPost, "subscriptions/s1/callback", ackBody(w, true, "events/a", offset(10)), w.CallbackToken)
	require.Equal(t, http.StatusNotFound, r.status, r.raw)

	h.dsPut("s1", webhookSub(h, "events/*"))
	r = h.ds(http.MethodPost, "subscriptions/s1/callback", ackBody(w, true, "events/a", offset(10)), w.CallbackToken)
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	require.Equal(t, "FENCED", r.errorCode())
	require.Equal(t, offset(10), h.dsAcked("s1", "events/a"), "re-created at the tail, untouched by the old callback")
}

// Section 6.4: explicit links are added at their tails and removed; a
// glob link of a matching stream stays; the path may hold slashes.
func TestDSExplicitStreams(t *testing.T) {
	h, _ := newDSHarness(t)
	h.source.set("/manual/b", 7)
	h.dsPut("s1", map[string]any{"type": "webhook", "pattern": "events/*", "streams": []string{"manual/a"}, "webhook": map[string]string{"url": h.recv.url()}})
	require.Equal(t, webhooks.OffsetNone, h.dsAcked("s1", "manual/a"), "a stream not yet created is linked before its first event")
	r := h.ds(http.MethodPost, "subscriptions/s1/streams", map[string]any{"streams": []string{"manual/b", "events/x"}}, "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	require.Equal(t, offset(7), h.dsAcked("s1", "manual/b"))
	for _, p := range []string{"manual/b", "events/x", "manual/absent"} {
		r = h.ds(http.MethodDelete, "subscriptions/s1/streams/"+url.PathEscape(p), nil, "")
		require.Equal(t, http.StatusNoContent, r.status, r.raw)
	}
	got := h.ds(http.MethodGet, "subscriptions/s1", nil, "")
	links := map[string]string{}
	for _, s := range got.body["streams"].([]any) {
		l := s.(map[string]any)
		links[l["path"].(string)] = l["link_type"].(string)
	}
	require.Equal(t, map[string]string{"manual/a": "explicit", "events/x": "glob"}, links)
}

// Both protocols on one engine and one Store: a seed-001 subscription and
// a __ds subscription over the same streams each get their own wake, and
// acking one moves nothing of the other.
func TestDSAndSeed001OnOneEngine(t *testing.T) {
	h, _ := newDSHarness(t)
	h.subscribe("seed", "/events/*")
	h.dsPut("seed", webhookSub(h, "events/*")) // the same ID, in the other namespace
	h.create("/events/a", 10)
	var dsWakes []dsWake
	var seed []receiver.Notification
	for len(dsWakes) < 1 || len(seed) < 1 {
		d := h.nextDelivery()
		if strings.Contains(string(d.body), `"subscription_id"`) && strings.Contains(string(d.body), `"callback_token"`) {
			var w dsWake
			require.NoError(t, json.Unmarshal(d.body, &w))
			dsWakes = append(dsWakes, w)
		} else {
			seed = append(seed, d.n)
		}
	}
	require.Len(t, dsWakes, 1)
	require.Len(t, seed, 1)
	r := h.ds(http.MethodPost, "subscriptions/seed/callback", ackBody(dsWakes[0], true, "events/a", offset(10)), dsWakes[0].CallbackToken)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	c := h.consumer(seed[0].ConsumerID)
	require.Equal(t, webhooks.OffsetNone, c.Streams[0].Offset, "the __ds ack moved the seed-001 cursor")
	// A seed-001 token is no __ds token, and the other way round.
	r = h.ds(http.MethodPost, "subscriptions/seed/callback", ackBody(dsWakes[0], true), seed[0].Token)
	require.Equal(t, http.StatusUnauthorized, r.status, r.raw)
	res := h.callback(seed[0].ConsumerID, dsWakes[0].CallbackToken, receiver.CallbackRequest{Epoch: epoch(seed[0].Epoch), WakeID: seed[0].WakeID, Done: true})
	require.Equal(t, http.StatusUnauthorized, res.status, res.raw)
	res = h.callback(seed[0].ConsumerID, seed[0].Token, receiver.CallbackRequest{Epoch: epoch(seed[0].Epoch), WakeID: seed[0].WakeID,
		Acks: streamOffsets("/events/a", offset(10)), Done: true})
	require.Equal(t, http.StatusOK, res.status, res.raw)
	require.Equal(t, offset(10), h.dsAcked("seed", "events/a"))
}

// Two engines on one database (SQLite, PostgreSQL), a webhook and a
// pull-wake subscription, appends through both: no generation gets two
// wake events or two wake ids, and no ack is lost.
func TestDSTwoEnginesOneStore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		stores := b.open(t, 2)
		clk := newMockClock()
		fsrc := newFakeSource()
		fsrc.set("/wake/pool", 0)
		fsrc.set("/events/a", 0)
		var engines [2]*webhooks.Engine
		var next atomic.Int64
		src := &appendingSource{fakeSource: fsrc, events: map[string][][]byte{}, notify: func(ctx context.Context, path string) error {
			return engines[next.Add(1)%2].StreamAppended(ctx, path)
		}}
		recv := newReceiver(t)
		// The first POST fails, so a retry waits on the clock.
		recv.queue(reply{status: http.StatusInternalServerError})
		for range 200 {
			recv.queue(reply{status: http.StatusOK, body: `{"done":true}`})
		}
		ds := stores[0].Store.(webhooks.DSStore)
		for _, sub := range []*webhooks.DSSubscription{
			{ID: "hook", Type: webhooks.DSWebhook, Pattern: "events/*", WebhookURL: recv.url(), LeaseTTL: time.Second, ConfigHash: "h", CreatedAt: clk.Now()},
			{ID: "pull", Type: webhooks.DSPullWake, Pattern: "**", WakeStream: "wake/pool", LeaseTTL: time.Second, ConfigHash: "p", CreatedAt: clk.Now()},
		} {
			sub.Cursor.Status = webhooks.DSActive
			_, _, err := ds.PutDSSubscription(context.Background(), &webhooks.PutDSSubscriptionParams{Subscription: sub,
				Links: []webhooks.DSLinkSpec{{Path: "events/a", Type: webhooks.DSLinkGlob, Offset: offset(0)}}})
			require.NoError(t, err)
		}
		progressed := make(chan struct{}, 1)
		var handlers [2]http.Handler
		for i, s := range stores {
			e, err := webhooks.New(s.Store, src, webhooks.WithClock(clk), webhooks.WithCallbackBaseURL(callbackBase),
				webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}), webhooks.WithPollInterval(testPollInterval))
			require.NoError(t, err)
			webhooks.SignalDSProgress(e, progressed)
			engines[i], handlers[i] = e, e.Handler(http.NotFoundHandler())
			startForTest(t, e)
		}
		const appends = 20
		var tail string
		for i := range appends {
			tail = fsrc.grow("/events/a", 1)
			require.NoError(t, engines[i%2].StreamAppended(context.Background(), "/events/a"))
		}
		acked := func(id string) string {
			links, err := ds.ListDSLinks(context.Background(), &webhooks.ListDSLinksParams{ID: id, Paths: []string{"events/a"}})
			require.NoError(t, err)
			require.Len(t, links, 1)
			return links[0].AckedOffset
		}
		wakeIDs := map[int64]map[string]bool{} // the webhook's, by generation
		note := func(d delivery) {
			var w dsWake
			require.NoError(t, json.Unmarshal(d.body, &w))
			if wakeIDs[w.Generation] == nil {
				wakeIDs[w.Generation] = map[string]bool{}
			}
			wakeIDs[w.Generation][w.WakeID] = true
		}
		// A retry (of a Store error or of a POST that failed on a busy
		// machine) waits on the mock clock: once both engines wait for
		// nothing else, the clock moves to the earlier of their timers.
		moveClock := func() {
			var at time.Time
			for _, e := range engines {
				armed, idle := webhooks.DSSchedulerIdle(e)
				if !idle {
					return
				}
				if !armed.IsZero() && (at.IsZero() || armed.Before(at)) {
					at = armed
				}
			}
			if !at.IsZero() {
				clk.Set(at)
			}
		}
		wait := func(done func() bool) bool {
			timeout := time.After(waitFor)
			for !done() {
				select {
				case <-progressed:
					moveClock()
				case d := <-recv.deliveries:
					note(d)
				case <-timeout:
					return false
				}
			}
			// On a busy machine every wake may have been answered before
			// the first look; their deliveries are still buffered.
			for {
				select {
				case d := <-recv.deliveries:
					note(d)
				default:
					return true
				}
			}
		}
		// Each wake of the webhook answers done: the snapshots are acked.
		require.True(t, wait(func() bool { return acked("hook") == tail }), "the webhook subscription lost an ack: %s", acked("hook"))
		// A worker claims through either engine and acks what it sees.
		for i := 0; acked("pull") != tail; i++ {
			require.Less(t, i, 100, "the pull-wake subscription never caught up")
			req := httptest.NewRequest(http.MethodPost, "/__ds/subscriptions/pull/claim", strings.NewReader(`{"worker":"w"}`))
			rec := httptest.NewRecorder()
			handlers[i%2].ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var w dsWake
			var c struct {
				Token string `json:"token"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &w))
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &c))
			body := ackBody(w, true)
			for _, s := range w.Streams {
				body = ackBody(w, true, s.Path, s.TailOffset)
			}
			data, _ := json.Marshal(body)
			req = httptest.NewRequest(http.MethodPost, "/__ds/subscriptions/pull/ack", strings.NewReader(string(data)))
			req.Header.Set("Authorization", "Bearer "+c.Token)
			rec = httptest.NewRecorder()
			handlers[(i+1)%2].ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		}
		require.NotEmpty(t, wakeIDs)
		for g, ids := range wakeIDs {
			require.Len(t, ids, 1, "generation %d of the webhook had several wake ids", g)
		}
		gens := map[float64]int{}
		for _, ev := range src.wakeEvents("/wake/pool") {
			gens[ev["generation"].(float64)]++
		}
		for g, n := range gens {
			require.Equal(t, 1, n, "generation %v got %d wake events", g, n)
		}
	})
}

// Section 7.1: {"done": true} acks the wake's snapshot and ends the wake
// even if one of its streams was unlinked while the webhook worked: the
// others are acked, and the lease is released, not left to expire.
func TestDSWebhookDoneAfterAStreamWasUnlinked(t *testing.T) {
	h, _ := newDSHarness(t)
	hold := make(chan struct{})
	h.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
	h.dsPut("s1", map[string]any{"type": "webhook", "streams": []string{"manual/a", "manual/b"}, "webhook": map[string]string{"url": h.recv.url()}})
	h.create("/manual/a", 3)
	h.nextDSWake() // fails; its retry shows both streams
	h.create("/manual/b", 4)
	ds := h.store.(webhooks.DSStore)
	var retry time.Time
	require.True(t, h.waitProgress(func() bool {
		sub, err := ds.GetDSSubscription(context.Background(), "s1")
		require.NoError(t, err)
		retry = sub.Cursor.DueAt
		return sub.Cursor.Status == webhooks.DSFailed && sub.Cursor.LeaseExpiresAt.IsZero() && webhooks.DSSchedulerParked(h.engine)
	}))
	h.clock.Set(retry)
	w, _ := h.nextDSWake()
	require.Len(t, w.Streams, 2)
	r := h.ds(http.MethodDelete, "subscriptions/s1/streams/manual%2Fb", nil, "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	close(hold)
	require.True(t, h.waitProgress(func() bool {
		sub, err := ds.GetDSSubscription(context.Background(), "s1")
		require.NoError(t, err)
		return sub.Cursor.WakeID == ""
	}), "the wake never ended")
	require.Equal(t, offset(3), h.dsAcked("s1", "manual/a"), "the snapshot's other stream was not acked")
}

// Section 7.3: a callback without done extends a webhook's lease, which
// may now end before the retry the scheduler waits for; its expiry, with
// work pending, still wakes at once.
func TestDSHeartbeatLeaseEndingBeforeARetryWakes(t *testing.T) {
	h, _ := newDSHarness(t)
	h.recv.queue(reply{status: http.StatusInternalServerError}, reply{status: http.StatusInternalServerError})
	h.dsPut("s1", webhookSub(h, "events/*")) // a lease of 1 s
	h.create("/events/a", 10)
	ds := h.store.(webhooks.DSStore)
	retryAt := func(attempt int) time.Time {
		var due time.Time
		require.True(t, h.waitProgress(func() bool {
			sub, err := ds.GetDSSubscription(context.Background(), "s1")
			require.NoError(t, err)
			due = sub.Cursor.DueAt
			return sub.Cursor.Attempt == attempt && sub.Cursor.Status == webhooks.DSFailed && sub.Cursor.LeaseExpiresAt.IsZero() &&
				webhooks.DSSchedulerParked(h.engine)
		}), "attempt %d never failed", attempt)
		return due
	}
	w, _ := h.nextDSWake()
	h.clock.Set(retryAt(1))
	h.nextDSWake()
	due := retryAt(2) // 2 s ± 20 % away
	r := h.ds(http.MethodPost, "subscriptions/s1/callback", ackBody(w, false), w.CallbackToken)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.True(t, h.clock.Now().Add(time.Second).Before(due))
	require.True(t, h.waitProgress(func() bool { return webhooks.DSSchedulerParked(h.engine) }))
	h.clock.Add(time.Second)
	w2, _ := h.nextDSWake()
	require.Equal(t, w.Generation+1, w2.Generation, "the lease's expiry did not wake a new generation")
}
