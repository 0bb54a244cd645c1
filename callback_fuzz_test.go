package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

const (
	cbFuzzSub    = "fz"
	cbFuzzPath   = "/fz/a" // the primary stream: 10 bytes
	cbFuzzOther  = "/fz/b" // 20 bytes, not subscribed at first
	cbFuzzEmpty  = "/fz/empty"
	cbFuzzGone   = "/fz/gone" // subscribed, but no such stream
	cbFuzzWakeID = "w_fuzz"
)

// cbFuzzStatus is the status the spec gives each error code.
var cbFuzzStatus = map[receiver.ErrorCode]int{
	receiver.CodeInvalidRequest: http.StatusBadRequest,
	receiver.CodeTokenExpired:   http.StatusUnauthorized,
	receiver.CodeTokenInvalid:   http.StatusUnauthorized,
	receiver.CodeAlreadyClaimed: http.StatusConflict,
	receiver.CodeInvalidOffset:  http.StatusConflict,
	receiver.CodeStaleEpoch:     http.StatusConflict,
	receiver.CodeConsumerGone:   http.StatusGone,
}

// FuzzCallback posts arbitrary bodies to the real callback handler of a
// consumer woken by a real engine. Every answer is 200 or a spec error JSON
// with its status; a failed callback leaves the consumer exactly as it was;
// and a successful one moves offsets only forward, to offsets it acked that
// exist, and subscribes and unsubscribes only what it asked for.
//
// The consumer is reset before each input and the engine is stopped, so an
// input's outcome depends on nothing but the input.
func FuzzCallback(f *testing.F) {
	h := newHarness(f)
	id := webhooks.ConsumerID(cbFuzzSub, cbFuzzPath)
	d := h.wake(cbFuzzSub, "/fz/*", cbFuzzPath)
	h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
	stop, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(f, h.engine.Stop(stop))
	h.source.set(cbFuzzOther, 20)
	h.source.set(cbFuzzEmpty, 0)
	template := h.consumer(id)
	template.WakeID = cbFuzzWakeID
	template.Streams = streamOffsets(cbFuzzPath, offset(4), cbFuzzOther, webhooks.OffsetNone, cbFuzzGone, offset(2))
	template.Deadline = h.clock.Now().Add(time.Minute)
	token := d.n.Token
	// The token is expired for a second engine on the same Store, whose
	// clock is past its lifetime. Moving one mock clock back and forth
	// would cost a millisecond a move.
	late := newMockClock()
	late.Set(h.clock.Now().Add(webhooks.DefaultTokenTTL + time.Second))
	lateEngine, err := webhooks.New(h.store, h.source, webhooks.WithClock(late), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(f, err)
	// Started to load its key; stopped at once, so that its scheduler acts
	// on nothing while the inputs run. Its handler keeps working.
	require.NoError(f, lateEngine.Start(context.Background()))
	require.NoError(f, lateEngine.Stop(stop))
	handlers := map[bool]http.Handler{false: h.engine.CallbackHandler(), true: lateEngine.CallbackHandler()}

	for _, body := range cbFuzzSeeds() {
		f.Add([]byte(body), true, false)
	}
	f.Add([]byte(`{"epoch":1,"wake_id":"w_fuzz"}`), false, false)
	f.Add([]byte(`{"epoch":1,"done":true}`), false, false)
	f.Add([]byte(`{"epoch":1,"acks":[{"path":"/fz/a","offset":"0000000000000000_0000000000000010"}]}`), true, true)
	f.Fuzz(func(t *testing.T, body []byte, live, expired bool) {
		ctx := context.Background()
		want := template.Clone()
		want.State, want.InFlight, want.Attempt = webhooks.StateLive, false, 0
		if !live {
			want.State, want.InFlight, want.Attempt = webhooks.StateWaking, true, 1
		}
		_, err := h.store.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
			*c = *want.Clone()
			return webhooks.UpdateSave, nil
		})
		if errors.Is(err, webhooks.ErrConsumerNotFound) {
			err = h.store.CreateConsumer(ctx, want.Clone())
		}
		require.NoError(t, err)
		before, err := h.store.GetConsumer(ctx, id)
		require.NoError(t, err)

		req := httptest.NewRequest(http.MethodPost, "/callback/"+id, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		handlers[expired].ServeHTTP(rec, req)

		raw := rec.Body.String()
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var resp receiver.CallbackResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp), raw)
		after, err := h.store.GetConsumer(ctx, id)
		if errors.Is(err, webhooks.ErrConsumerNotFound) {
			after, err = nil, nil
		}
		require.NoError(t, err)

		if rec.Code != http.StatusOK {
			require.False(t, resp.OK, raw)
			require.NotNil(t, resp.Error, raw)
			status, known := cbFuzzStatus[resp.Error.Code]
			require.True(t, known, "unknown error code: %s", raw)
			require.Equal(t, status, rec.Code, raw)
			require.NotEmpty(t, resp.Error.Message, raw)
			require.Equal(t, resp.Error.Code == receiver.CodeTokenExpired, resp.Token != "", raw)
			require.Equal(t, before, after, "a failed callback changed the consumer: %s", raw)
			return
		}
		require.True(t, resp.OK, raw)
		require.Nil(t, resp.Error, raw)
		require.NotEmpty(t, resp.Token, raw)
		require.Contains(t, raw, `"streams":[`)
		require.False(t, expired, "an expired token was accepted: %s", raw)
		var cb receiver.CallbackRequest
		require.NoError(t, json.Unmarshal(body, &cb), "accepted a body that does not decode")
		require.NotNil(t, cb.Epoch)
		require.Equal(t, before.Epoch, *cb.Epoch, "accepted another epoch")
		require.Contains(t, []string{"", cbFuzzWakeID}, cb.WakeID, "accepted another wake")
		cbFuzzCheckStreams(t, h.source, before, after, &cb)
		if after == nil {
			require.Empty(t, resp.Streams)
			return
		}
		require.Equal(t, after.Streams, resp.Streams, "the response lists other streams than the consumer has")
		if after.Epoch != before.Epoch {
			require.True(t, cb.Done, "a new wake without done")
		}
		if after.Epoch == before.Epoch {
			require.NotEqual(t, webhooks.StateWaking, after.State, "a successful callback left the wake unclaimed")
		}
	})
}

// cbFuzzCheckStreams checks what a successful callback did to the
// consumer's streams against what it asked for.
func cbFuzzCheckStreams(t *testing.T, src *fakeSource, before, after *webhooks.Consumer, cb *receiver.CallbackRequest) {
	t.Helper()
	if after == nil {
		for _, s := range before.Streams {
			require.Contains(t, cb.Unsubscribe, s.Path, "the consumer was deleted with %s still subscribed", s.Path)
		}
		return
	}
	var paths []string
	for _, s := range after.Streams {
		require.NotContains(t, paths, s.Path, "subscribed twice")
		paths = append(paths, s.Path)
		require.NotContains(t, cb.Unsubscribe, s.Path, "still subscribed after unsubscribe")
		info, err := src.Stream(context.Background(), s.Path)
		exists := err == nil
		i := slices.IndexFunc(before.Streams, func(o webhooks.StreamOffset) bool { return o.Path == s.Path })
		if i < 0 {
			require.Contains(t, cb.Subscribe, s.Path, "subscribed to a stream not asked for")
			if exists {
				require.Equal(t, info.Tail, s.Offset, "a new subscription starts at the tail")
			} else {
				require.Equal(t, webhooks.OffsetNone, s.Offset)
			}
			continue
		}
		old := before.Streams[i].Offset
		if s.Offset == old {
			continue
		}
		require.True(t, exists, "moved the offset of %s, which does not exist", s.Path)
		require.Equal(t, len(info.Tail), len(s.Offset), "offset %q is not one of %s", s.Offset, s.Path)
		require.Regexp(t, `^[!-~]+$`, s.Offset, "offset %q is not a header value", s.Offset)
		require.False(t, strings.ContainsAny(s.Offset, ",&=?/"), "offset %q has a character the protocol reserves", s.Offset)
		require.LessOrEqual(t, s.Offset, info.Tail, "acked past the tail of %s", s.Path)
		if old != webhooks.OffsetNone {
			require.Greater(t, s.Offset, old, "the offset of %s moved back", s.Path)
		}
		require.True(t, slices.Contains(cb.Acks, webhooks.StreamOffset{Path: s.Path, Offset: s.Offset}),
			"%s moved to %s, which was not acked", s.Path, s.Offset)
	}
	for _, s := range before.Streams {
		if !slices.Contains(cb.Unsubscribe, s.Path) {
			require.Contains(t, paths, s.Path, "%s was dropped without unsubscribe", s.Path)
		}
	}
}

// cbFuzzSeeds are callback bodies that reach each branch of the handler:
// the spec's errors, the limits, and JSON that a lax decoder would take.
func cbFuzzSeeds() []string {
	ack := func(path, off string) string { return `{"path":"` + path + `","offset":"` + off + `"}` }
	many := strings.Repeat(`"/fz/b",`, webhooks.MaxCallbackListLength) + `"/fz/b"`
	return []string{
		`{"epoch":1}`,
		`{"epoch":1,"wake_id":"w_fuzz","acks":[` + ack(cbFuzzPath, offset(10)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, offset(7)) + `,` + ack(cbFuzzPath, offset(5)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, offset(3)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, offset(11)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, "0_10") + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, "0000000000000000_000000000000000/") + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, "0000000000000000_000000000000000 ") + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, "-1") + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, "") + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzGone, offset(3)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzEmpty, offset(0)) + `]}`,
		`{"epoch":1,"acks":[` + ack("fz/a", offset(5)) + `]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, offset(8)) + `,` + ack(cbFuzzOther, offset(25)) + `]}`,
		`{"epoch":1,"subscribe":["/fz/b","/fz/empty","/fz/nope","/fz/b"],"acks":[` + ack(cbFuzzOther, offset(20)) + `]}`,
		`{"epoch":1,"subscribe":["/fz/empty"],"acks":[` + ack(cbFuzzEmpty, offset(0)) + `]}`,
		`{"epoch":1,"unsubscribe":["/fz/gone","/fz/nope"]}`,
		`{"epoch":1,"unsubscribe":["/fz/a","/fz/b","/fz/gone"]}`,
		`{"epoch":1,"unsubscribe":["/fz/a"],"acks":[` + ack(cbFuzzPath, offset(9)) + `]}`,
		`{"epoch":1,"done":true}`,
		`{"epoch":1,"done":true,"acks":[` + ack(cbFuzzPath, offset(10)) + `],"unsubscribe":["/fz/b"]}`,
		`{"epoch":1,"done":true,"acks":[` + ack(cbFuzzPath, offset(10)) + `,` + ack(cbFuzzOther, offset(20)) + `]}`,
		`{"epoch":0}`,
		`{"epoch":2}`,
		`{"epoch":-1}`,
		`{"epoch":9223372036854775807}`,
		`{"epoch":9223372036854775808}`,
		`{"epoch":1.0}`,
		`{"epoch":"1"}`,
		`{"epoch":null}`,
		`{"epoch":1,"wake_id":"w_other"}`,
		`{"epoch":1,"wake_id":""}`,
		`{"EPOCH":1,"Done":true}`,
		`{"epoch":2,"epoch":1}`,
		`{"epoch":1,"extra":true}`,
		`{"epoch":1}{"epoch":1}`,
		`{"epoch":1} `,
		`{"epoch":1}x`,
		`{"epoch":1,"subscribe":[` + many + `]}`,
		`{"epoch":1,"subscribe":["/` + strings.Repeat("x", webhooks.MaxStreamPathLength) + `"]}`,
		`{"epoch":1,"acks":[` + ack(cbFuzzPath, strings.Repeat("9", webhooks.MaxOffsetLength+1)) + `]}`,
		`{"epoch":1,"subscribe":["/fz/\u00e9\ud800"]}`,
		"{\"epoch\":1,\"subscribe\":[\"/fz/\xff\"]}",
		`{"epoch":1,"acks":null,"subscribe":null}`,
		`{"epoch":1,"acks":[null]}`,
		`{"epoch":1,"acks":{}}`,
		`null`,
		`[]`,
		`{}`,
		``,
		`{"epoch":1`,
	}
}
