package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// Every input limit is inclusive: the limit itself is accepted, one more
// is refused with 400 INVALID_REQUEST and a message that names the limit.
// Limits tested elsewhere: MaxStreamsPerConsumer (TestStreamLimitPerConsumer),
// MaxSubscriptionIDLength (TestSubscriptionInvalidIDs), MaxPatternLength
// (TestSubscriptionBadPatterns, TestParsePatternMaxLength),
// MaxDescriptionLength and the exact MaxSubscriptionBodyBytes
// (TestSubscriptionBadBodies), MaxWebhookResponseBytes
// (TestFaultResponseBodyLimitBoundary).

// faultLimitRefused checks a callback was refused as past a limit.
func faultLimitRefused(t *testing.T, r callbackResult, message string) {
	t.Helper()
	requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
	require.Contains(t, r.body.Error.Message, message)
}

// faultPad pads a JSON body with spaces to n bytes.
func faultPad(t *testing.T, body string, n int) string {
	t.Helper()
	require.LessOrEqual(t, len(body), n)
	return body + strings.Repeat(" ", n-len(body))
}

func TestFaultLimitCallbackBody(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	r := h.rawCallback(agentAID, d.n.Token, faultPad(t, `{"epoch":1}`, webhooks.MaxCallbackBodyBytes))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = h.rawCallback(agentAID, d.n.Token, faultPad(t, `{"epoch":1}`, webhooks.MaxCallbackBodyBytes+1))
	faultLimitRefused(t, r, fmt.Sprintf("exceeds %d bytes", webhooks.MaxCallbackBodyBytes))
}

func TestFaultLimitCallbackLists(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	paths := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s/%d", prefix, i)
		}
		return out
	}
	acks := func(n int) []webhooks.StreamOffset {
		out := make([]webhooks.StreamOffset, n)
		for i := range out {
			out[i] = webhooks.StreamOffset{Path: agentA, Offset: offset(1)}
		}
		return out
	}
	const limit = webhooks.MaxCallbackListLength
	for _, tc := range []struct {
		name      string
		at, after receiver.CallbackRequest
	}{
		{"acks", receiver.CallbackRequest{Acks: acks(limit)}, receiver.CallbackRequest{Acks: acks(limit + 1)}},
		{"subscribe", receiver.CallbackRequest{Subscribe: paths("/s", limit)}, receiver.CallbackRequest{Subscribe: paths("/t", limit+1)}},
		{"unsubscribe", receiver.CallbackRequest{Unsubscribe: paths("/u", limit)}, receiver.CallbackRequest{Unsubscribe: paths("/u", limit+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.at.Epoch, tc.after.Epoch = epoch(1), epoch(1)
			r := h.callback(agentAID, d.n.Token, tc.at)
			require.Equal(t, http.StatusOK, r.status, "%.300s", r.raw)
			before := h.consumer(agentAID)
			r = h.callback(agentAID, d.n.Token, tc.after)
			faultLimitRefused(t, r, fmt.Sprintf("%s has %d entries; at most %d", tc.name, limit+1, limit))
			require.Equal(t, before.Streams, h.consumer(agentAID).Streams)
		})
	}
}

func TestFaultLimitCallbackPathAndOffset(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	at := "/" + strings.Repeat("p", webhooks.MaxStreamPathLength-1)
	after := at + "p"
	pathLimit := fmt.Sprintf("at most %d characters", webhooks.MaxStreamPathLength)
	for _, tc := range []struct {
		name      string
		at, after receiver.CallbackRequest
	}{
		{"subscribe", receiver.CallbackRequest{Subscribe: []string{at}}, receiver.CallbackRequest{Subscribe: []string{after}}},
		{"acks", receiver.CallbackRequest{Acks: streamOffsets(at, webhooks.OffsetNone)}, receiver.CallbackRequest{Acks: streamOffsets(after, webhooks.OffsetNone)}},
		{"unsubscribe", receiver.CallbackRequest{Unsubscribe: []string{at}}, receiver.CallbackRequest{Unsubscribe: []string{after}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.at.Epoch, tc.after.Epoch = epoch(1), epoch(1)
			r := h.callback(agentAID, d.n.Token, tc.at)
			require.Equal(t, http.StatusOK, r.status, "%.300s", r.raw)
			r = h.callback(agentAID, d.n.Token, tc.after)
			faultLimitRefused(t, r, pathLimit)
		})
	}

	// An offset of MaxOffsetLength passes validation, and is then refused
	// only because it is not an offset of the stream; one byte longer is
	// refused as too long.
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1),
		Acks: streamOffsets(agentA, strings.Repeat("0", webhooks.MaxOffsetLength))})
	requireError(t, r, http.StatusConflict, receiver.CodeInvalidOffset)
	r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1),
		Acks: streamOffsets(agentA, strings.Repeat("0", webhooks.MaxOffsetLength+1))})
	faultLimitRefused(t, r, fmt.Sprintf("1 to %d characters", webhooks.MaxOffsetLength))
}

func TestFaultLimitSubscriptionBodyAndWebhookURL(t *testing.T) {
	h := newHarness(t)
	valid := fmt.Sprintf(`{"webhook":%q}`, h.recv.url())
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", faultPad(t, valid, webhooks.MaxSubscriptionBodyBytes+1))
	e := subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	require.Contains(t, e.Message, fmt.Sprintf("exceeds %d bytes", webhooks.MaxSubscriptionBodyBytes))

	long := func(n int) string {
		base := h.recv.url() + "?q="
		return base + strings.Repeat("q", n-len(base))
	}
	rec = h.do(http.MethodPut, "/agents/*?subscription=s2", subBody(long(webhooks.MaxWebhookURLLength), ""))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/agents/*?subscription=s3", subBody(long(webhooks.MaxWebhookURLLength+1), ""))
	e = subRequireError(t, http.StatusBadRequest, receiver.CodeInvalidRequest, rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type"))
	require.Contains(t, e.Message, fmt.Sprintf("longer than %d characters", webhooks.MaxWebhookURLLength))
}

// A consumer ID in a callback URL is bounded by MaxSubscriptionIDLength and
// MaxStreamPathLength: a longer one is refused before anything is looked
// up.
func TestFaultLimitConsumerIDInCallbackURL(t *testing.T) {
	h := newHarness(t)
	sub := strings.Repeat("s", webhooks.MaxSubscriptionIDLength)
	at := "/" + strings.Repeat("p", webhooks.MaxStreamPathLength-1)
	for _, tc := range []struct {
		id     string
		status int
		code   receiver.ErrorCode
	}{
		{webhooks.ConsumerID(sub, at), http.StatusUnauthorized, receiver.CodeTokenInvalid},
		{webhooks.ConsumerID(sub, at+"p"), http.StatusBadRequest, receiver.CodeInvalidRequest},
		{webhooks.ConsumerID(sub+"s", at), http.StatusBadRequest, receiver.CodeInvalidRequest},
	} {
		requireError(t, h.rawCallback(tc.id, "not-a-token", `{"epoch":1}`), tc.status, tc.code)
	}
	_, _, err := webhooks.ParseConsumerID(webhooks.ConsumerID(sub, at+"p"))
	require.ErrorContains(t, err, fmt.Sprintf("longer than %d bytes", webhooks.MaxStreamPathLength))
}

// A stream whose path is longer than MaxStreamPathLength gets no consumer:
// the consumer could never name it in a callback to ack it, and would be
// woken again after every liveness timeout. The longest path still works
// end to end.
func TestFaultLimitStreamPathLength(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/**")
	at := "/" + strings.Repeat("p", webhooks.MaxStreamPathLength-1)
	after := at + "p"

	h.source.set(after, 10)
	err := h.engine.StreamCreated(context.Background(), after)
	var ve *webhooks.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "path", ve.Field)
	require.Contains(t, ve.Reason, fmt.Sprintf("at most %d characters", webhooks.MaxStreamPathLength))
	h.subNoConsumer(webhooks.ConsumerID("s1", after))
	// Nor does a subscription created after the stream adopt it.
	h.subscribe("s2", "/**")
	h.subNoConsumer(webhooks.ConsumerID("s2", after))

	h.create(at, 10)
	d := h.nextDelivery()
	require.Contains(t, []string{webhooks.ConsumerID("s1", at), webhooks.ConsumerID("s2", at)}, d.n.ConsumerID)
	r := h.callback(d.n.ConsumerID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(at, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, "%.300s", r.raw)
	require.Equal(t, webhooks.StateIdle, h.consumer(d.n.ConsumerID).State)
}

// A stream whose path is not valid UTF-8 gets no consumer, as one with a
// control character: JSON could not carry its path to the consumer and
// back, so the consumer could never ack it.
func TestFaultStreamPathNotUTF8(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/**")
	bad := "/agents/\xff"
	h.source.set(bad, 10)
	require.ErrorContains(t, h.engine.StreamCreated(context.Background(), bad), "not valid UTF-8")
	h.subNoConsumer(webhooks.ConsumerID("s1", bad))
	// Nor does a subscription created after the stream adopt it.
	h.subscribe("s2", "/**")
	h.subNoConsumer(webhooks.ConsumerID("s2", bad))
}
