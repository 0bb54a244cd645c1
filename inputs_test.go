package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// formatSource is a fakeSource that knows its offset format.
type formatSource struct{ *fakeSource }

var offsetFormat = regexp.MustCompile(`^[0-9]{16}_[0-9]{16}$`)

func (formatSource) ValidOffset(o string) bool { return offsetFormat.MatchString(o) }

// ackGarbage acks each offset in a live consumer's primary stream (tail
// offset(10)) and checks that each is refused with INVALID_OFFSET and
// changes nothing, while a real offset is still accepted.
func ackGarbage(t *testing.T, h *harness, garbage []string) {
	t.Helper()
	d := h.live()
	for _, o := range garbage {
		require.Len(t, o, len(offset(10)), "%q has the tail's length: length alone does not tell", o)
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, o)})
		requireError(t, r, http.StatusConflict, receiver.CodeInvalidOffset)
		require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), h.consumer(agentAID).Streams, "%q", o)
	}
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(3))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// A source that knows its offset format decides which acks are offsets.
func TestAckOffsetBySourceFormat(t *testing.T) {
	h := newHarnessWrapped(t, func(s *fakeSource) webhooks.StreamSource { return formatSource{s} })
	ackGarbage(t, h, []string{"0000000000000000_00000000000000!!", "0000000000000000-0000000000000003"})
}

// Without one, the protocol's rules decide: an offset is a header value
// without the characters the protocol reserves.
func TestAckOffsetByProtocolRules(t *testing.T) {
	h := newHarness(t)
	prefix := offset(10)[:len(offset(10))-2] + "0" // sorts before the tail whatever follows
	var garbage []string
	for _, c := range []string{"/", ",", "&", "=", "?", " ", "\x00", "\x1f", "\x7f"} {
		garbage = append(garbage, prefix+c)
	}
	ackGarbage(t, h, garbage)
}

// serve puts h's handler behind a real HTTP server, so that requests go
// through net/http's parsing of the raw request line.
func (h *harness) serve() *httptest.Server {
	srv := httptest.NewServer(h.handler)
	h.t.Cleanup(srv.Close)
	return srv
}

// send makes a request to srv with target written as is on the request
// line, and returns the status and body.
func send(t *testing.T, srv *httptest.Server, method, target, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+target, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, target, req.URL.RequestURI(), "the target went out as written")
	return resp.StatusCode, data
}

// A request path is percent-decoded once: "%252A" is the literal segment
// "%2A", not a wildcard, while "%2A" is '*'. Create, get, list and delete
// all read the path the same way.
func TestSubscriptionPathDecodedOnce(t *testing.T) {
	h := newHarness(t)
	srv := h.serve()
	body := subBody(h.recv.url(), "")

	status, out := send(t, srv, http.MethodPut, "/a/%252A?subscription=lit", body)
	require.Equal(t, http.StatusCreated, status, string(out))
	require.Equal(t, "/a/%2A", subDecode(t, out).Pattern)
	status, out = send(t, srv, http.MethodPut, "/a/%2A?subscription=star", body)
	require.Equal(t, http.StatusCreated, status, string(out))
	require.Equal(t, "/a/*", subDecode(t, out).Pattern)

	h.create("/a/x", 0)
	h.consumer(webhooks.ConsumerID("star", "/a/x"))
	h.subNoConsumer(webhooks.ConsumerID("lit", "/a/x"))
	h.create("/a/%2A", 0)
	h.consumer(webhooks.ConsumerID("lit", "/a/%2A"))

	// The literal pattern reaches only the literal subscription.
	status, out = send(t, srv, http.MethodGet, "/a/%252A?subscriptions", "")
	require.Equal(t, http.StatusOK, status, string(out))
	require.JSONEq(t, `["lit"]`, mustJSON(t, listIDs(t, out)))
	status, out = send(t, srv, http.MethodGet, "/a/%252A?subscription=star", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), status, out, "application/json")
	status, out = send(t, srv, http.MethodDelete, "/a/%252A?subscription=star", "")
	subRequireError(t, http.StatusNotFound, receiver.ErrorCode("SUBSCRIPTION_NOT_FOUND"), status, out, "application/json")
	status, out = send(t, srv, http.MethodGet, "/a/%252A?subscription=lit", "")
	require.Equal(t, http.StatusOK, status, string(out))
	status, out = send(t, srv, http.MethodDelete, "/a/%252A?subscription=lit", "")
	require.Equal(t, http.StatusNoContent, status, string(out))
	require.Equal(t, []string{"star"}, h.subList("/**"))
}

func listIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var out struct {
		Subscriptions []subView `json:"subscriptions"`
	}
	require.NoError(t, json.Unmarshal(body, &out), string(body))
	ids := []string{}
	for _, s := range out.Subscriptions {
		ids = append(ids, s.SubscriptionID)
	}
	return ids
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

// Control characters in a pattern are refused, whichever method.
func TestSubscriptionPatternControlCharacters(t *testing.T) {
	h := newHarness(t)
	srv := h.serve()
	for _, enc := range []string{"%00", "%0A", "%1F", "%7F", "%C2%85"} {
		for _, target := range []string{"/a/" + enc + "?subscription=c", "/a" + enc + "/*?subscription=c", "/a/" + enc + "?subscriptions"} {
			method := http.MethodGet
			if strings.Contains(target, "subscription=") {
				method = http.MethodPut
			}
			status, out := send(t, srv, method, target, subBody(h.recv.url(), ""))
			e := subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, status, out, "application/json")
			require.Contains(t, e.Message, "control character", target)
		}
	}
	require.Empty(t, h.subList("/**"))
}

// A run of "**" is stored as one, so the same subscription created either
// way is one subscription.
func TestSubscriptionGlobstarRunIsCanonical(t *testing.T) {
	h := newHarness(t)
	srv := h.serve()
	body := subBody(h.recv.url(), "")
	status, out := send(t, srv, http.MethodPut, "/**/**?subscription=all", body)
	require.Equal(t, http.StatusCreated, status, string(out))
	require.Equal(t, "/**", subDecode(t, out).Pattern)
	status, out = send(t, srv, http.MethodPut, "/**?subscription=all", body)
	require.Equal(t, http.StatusOK, status, string(out))
	status, out = send(t, srv, http.MethodPut, "/a/**/**/**/b?subscription=ab", body)
	require.Equal(t, http.StatusCreated, status, string(out))
	require.Equal(t, "/a/**/b", subDecode(t, out).Pattern)
	status, out = send(t, srv, http.MethodPut, "/a/**/b?subscription=ab", body)
	require.Equal(t, http.StatusOK, status, string(out))
}

// Stream paths with control characters are refused wherever a callback
// names one: subscribe, unsubscribe, acks and the consumer ID of its URL.
func TestCallbackPathControlCharacters(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	for _, req := range []receiver.CallbackRequest{
		{Subscribe: []string{"/tools/a\x00"}},
		{Subscribe: []string{"/tools/a\u0085"}},
		{Unsubscribe: []string{"/agents/a\n"}},
		{Acks: streamOffsets("/agents/a\x7f", webhooks.OffsetNone)},
	} {
		req.Epoch = epoch(1)
		r := h.callback(agentAID, d.n.Token, req)
		requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
		require.Contains(t, r.body.Error.Message, "control character")
	}
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), h.consumer(agentAID).Streams)

	r := h.rawCallback("s1:%2Fagents%2Fa%00", d.n.Token, `{"epoch":1}`)
	requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
	require.Contains(t, r.body.Error.Message, "control character")
}

// A stream whose path has a control character gets no consumer, as it
// could not name the stream in a callback to ack it.
func TestStreamPathControlCharacters(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/**")
	const path = "/agents/a\x00"
	h.source.set(path, 10)
	err := h.engine.StreamCreated(context.Background(), path)
	require.ErrorContains(t, err, "control character")
	h.subNoConsumer(webhooks.ConsumerID("s1", path))
	h.subscribe("s2", "/**")
	h.subNoConsumer(webhooks.ConsumerID("s2", path))
}

// Request bodies use the API's snake_case names exactly: a key that differs
// only in case is an unknown field, refused with a message naming it.
func TestRequestKeysAreCaseSensitive(t *testing.T) {
	h := newHarness(t)
	url := h.recv.url()
	for key, body := range map[string]string{
		"Webhook":     `{"Webhook":"` + url + `"}`,
		"DESCRIPTION": `{"webhook":"` + url + `","DESCRIPTION":"d"}`,
	} {
		rec := h.do(http.MethodPut, "/agents/*?subscription=s1", body)
		e := subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
		require.Contains(t, e.Message, `"`+key+`"`)
	}
	require.Empty(t, h.subList("/**"))

	d := h.live()
	for key, body := range map[string]string{
		"Epoch":   `{"Epoch":1}`,
		"Done":    `{"epoch":1,"Done":true}`,
		"Path":    `{"epoch":1,"acks":[{"Path":"/agents/a","offset":"-1"}]}`,
		"OFFSET":  `{"epoch":1,"acks":[{"path":"/agents/a","OFFSET":"-1"}]}`,
		"Wake_ID": `{"epoch":1,"Wake_ID":"` + d.n.WakeID + `"}`,
	} {
		r := h.rawCallback(agentAID, d.n.Token, body)
		requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
		require.Contains(t, r.body.Error.Message, `"`+key+`"`)
	}
	r := h.rawCallback(agentAID, d.n.Token, `{"epoch":1,"acks":[{"path":"/agents/a","offset":"-1"}],"done":false}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// encoding/json would replace invalid UTF-8 with U+FFFD, so the engine
// would act on another path than the client sent.
func TestRequestBodyMustBeUTF8(t *testing.T) {
	h := newHarness(t)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", `{"webhook":"`+h.recv.url()+`","description":"`+"caf\xe9"+`"}`)
	e := subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	require.Contains(t, e.Message, "UTF-8")
	d := h.live()
	r := h.rawCallback(agentAID, d.n.Token, `{"epoch":1,"subscribe":["`+"/tools/a\xff"+`"]}`)
	requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
	require.Contains(t, r.body.Error.Message, "UTF-8")
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), h.consumer(agentAID).Streams)
}

// The token's own epoch claim fences on its own: a token validly signed for
// the current wake but another epoch is refused even when the request's
// epoch is current. The engine never issues such a token, so the wake check
// alone does not catch it.
func TestTokenEpochClaimIsChecked(t *testing.T) {
	key := []byte(strings.Repeat("k", webhooks.MinTokenKeyLength))
	h := newHarness(t, webhooks.WithTokenKey(key))
	d := h.live()
	mint := func(epoch int64) string {
		now := h.clock.Now()
		raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": agentAID, "epoch": epoch, "wake": d.n.WakeID,
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		}).SignedString(key)
		require.NoError(t, err)
		return raw
	}
	for _, e := range []int64{0, 2} {
		r := h.callback(agentAID, mint(e), receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(5))})
		requireError(t, r, http.StatusConflict, receiver.CodeStaleEpoch)
		require.Contains(t, r.body.Error.Message, "token was issued for epoch")
	}
	require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), h.consumer(agentAID).Streams)
	// The same token at the consumer's epoch is accepted: only the epoch
	// claim was wrong.
	r := h.callback(agentAID, mint(1), receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(5))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// A millisecond field too large for a duration is refused, naming the
// field, on create and on PATCH, rather than wrapped around before its
// range is checked: 2^58 ms became 0 (no limit) and 2^58+1000 ms one
// second.
func TestMillisecondFieldsAreCheckedBeforeConversion(t *testing.T) {
	h := newHarness(t)
	h.subscribeEvents("e1", "/orders/*", "")
	h.subscribe("w1", "/agents/*")
	const wrapsToZero, wrapsToOneSecond = int64(1) << 58, int64(1)<<58 + 1000
	for _, field := range []struct{ name, events, wake string }{
		{"retry.schedule_ms", "", `"retry":{"schedule_ms":[%d]}`},
		{"retry.max_age_ms", "", `"retry":{"max_age_ms":%d}`},
		{"batch.max_wait_ms", `"batch":{"max_wait_ms":%d}`, ""},
		{"timeout_ms", `"timeout_ms":%d`, ""},
	} {
		for _, ms := range []int64{wrapsToZero, wrapsToOneSecond} {
			for _, c := range []struct{ pattern, id, delivery, fields string }{
				{"/orders/*", "e1", `"delivery":"events"`, field.events},
				{"/agents/*", "w1", `"delivery":"wake"`, field.wake},
			} {
				if c.fields == "" {
					c.fields = field.events + field.wake
					if c.delivery == `"delivery":"wake"` {
						continue // an events field on a wake subscription is refused for that
					}
				}
				f := strings.Replace(c.fields, "%d", strconv.FormatInt(ms, 10), 1)
				create := h.do(http.MethodPut, "/x/*?subscription=new", `{"webhook":"`+h.recv.url()+`",`+c.delivery+`,`+f+`}`)
				require.Equal(t, http.StatusBadRequest, create.Code, "%s=%d: %s", field.name, ms, create.Body.String())
				require.Contains(t, create.Body.String(), field.name)
				patch := h.do(http.MethodPatch, c.pattern+"?subscription="+c.id, `{`+f+`}`)
				require.Equal(t, http.StatusBadRequest, patch.Code, "%s=%d: %s", field.name, ms, patch.Body.String())
				require.Contains(t, patch.Body.String(), field.name)
			}
		}
	}
	sub, err := h.store.GetSubscription(context.Background(), "new")
	require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	require.Nil(t, sub)
}

// Every offset the API takes is checked as an ack's is: a rewind to an
// offset its stream could not have, and deliver_policy from_offset with
// one, are refused (or, for a stream the offset does not fit, start at the
// tail) rather than stored as a cursor that wedges the consumer. With the
// source's OffsetValidator, its own format decides at the door.
func TestOffsetsAreCheckedAsAcksAre(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*fakeSource) webhooks.StreamSource
	}{
		{"protocol rules", nil},
		{"source format", func(s *fakeSource) webhooks.StreamSource { return formatSource{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.wrap != nil {
				h = newHarnessWrapped(t, tc.wrap)
			}
			h.subscribe("s1", "/agents/*")
			h.create(agentA, 10)
			d := h.nextDelivery()
			h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
			r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
			require.Equal(t, http.StatusOK, r.status, r.raw)
			before := h.consumer(agentAID)
			bad := []string{"!", "0", "-2", " ", "zzzz", offset(11)}
			if tc.wrap != nil {
				// Of the tail's length and form by the protocol's rules, but
				// not the source's own format: as an ack, refused only here.
				bad = append(bad, "0000000000000000_00000000000000!!")
			}
			for _, o := range bad {
				rec := h.do(http.MethodPost, "/agents/*?subscription=s1&rewind", fmt.Sprintf(`{"offset":%q}`, o))
				require.Contains(t, []int{http.StatusBadRequest, http.StatusConflict}, rec.Code, "rewind to %q: %s", o, rec.Body.String())
				require.Equal(t, before.Streams, h.consumer(agentAID).Streams, "rewind to %q", o)
				require.Equal(t, before.Epoch, h.consumer(agentAID).Epoch, "rewind to %q", o)

				id := "from" + strconv.Itoa(len(o))
				rec = h.do(http.MethodPut, "/agents/*?subscription="+id, fmt.Sprintf(`{"webhook":%q,"deliver_policy":"from_offset","offset":%q}`, h.recv.url(), o))
				if rec.Code == http.StatusBadRequest {
					continue
				}
				require.Contains(t, []int{http.StatusCreated, http.StatusOK}, rec.Code, rec.Body.String())
				c := h.consumer(webhooks.ConsumerID(id, agentA))
				require.Equal(t, streamOffsets(agentA, offset(10)), c.Streams, "from_offset %q: a stream it does not fit starts at its tail", o)
				require.Equal(t, webhooks.StateIdle, c.State)
			}
		})
	}
}
