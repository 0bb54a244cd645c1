package exampleserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/receiver"
)

// TestMain fails the package if a stopped server leaves goroutines behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait for the server; each step takes milliseconds.
const wait = 10 * time.Second

// delivery is one webhook POST as the receiver got it.
type delivery struct {
	header http.Header
	body   []byte
}

// endpoint is a webhook endpoint that hands each delivery to the test and
// holds the response until the test releases it, so that the consumer stays
// WAKING until the test claims the wake.
type endpoint struct {
	deliveries chan delivery
	release    chan struct{}
}

func (rc *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	rc.deliveries <- delivery{header: r.Header.Clone(), body: body}
	select {
	case <-rc.release:
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done(): // the engine stopped
	}
}

// next waits for the next delivery.
func (rc *endpoint) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-rc.deliveries:
		return d
	case <-time.After(wait):
		t.Fatalf("no webhook within %v", wait)
		return delivery{}
	}
}

// client talks to the example server over loopback HTTP.
type client struct {
	hc   *http.Client
	base string
}

// do sends a request and returns the response with its body read.
func (c *client) do(t *testing.T, method, path, contentType, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// callback posts req to a callback URL and decodes the response.
func (c *client) callback(t *testing.T, url, token string, req map[string]any) (int, receiver.CallbackResponse) {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	resp, data := c.do(t, http.MethodPost, strings.TrimPrefix(url, c.base), "application/json", token, body)
	var out receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(data, &out), "callback response %s", data)
	return resp.StatusCode, out
}

// TestEndToEnd drives the example server over real HTTP through two wake
// cycles: subscribe, append, signed webhook, claim, read, ack, done to IDLE,
// then a re-wake at epoch 2 that fences the epoch-1 token with STALE_EPOCH.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	const e2eToken = "e2e-api-token"
	srv, err := exampleserver.Start(ctx, exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, APIToken: e2eToken})
	require.NoError(t, err)
	rc := &endpoint{deliveries: make(chan delivery, 4), release: make(chan struct{})}
	hook := httptest.NewServer(rc)
	c := &client{hc: &http.Client{Transport: &http.Transport{}}, base: srv.URL}
	t.Cleanup(func() {
		// Idle client connections first: Shutdown would wait for one the
		// transport dialed but never used.
		c.hc.CloseIdleConnections()
		closeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(closeCtx)) // cancels a delivery the receiver still holds
		hook.Close()
	})
	const (
		stream     = "/agents/task-1"
		consumerID = "e2e:%2Fagents%2Ftask-1"
	)
	state := func() *webhooks.Consumer {
		t.Helper()
		cons, err := srv.Store.GetConsumer(ctx, consumerID)
		require.NoError(t, err)
		return cons
	}

	// Subscribe: 201 with the secret, shown only now. Only the
	// subscription API takes the API token; streams and callbacks do not.
	resp, body := c.do(t, http.MethodPut, "/agents/*?subscription=e2e", "application/json", e2eToken,
		[]byte(`{"webhook":"`+hook.URL+`/hook","description":"e2e"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	var sub struct {
		ID      string `json:"subscription_id"`
		Pattern string `json:"pattern"`
		Secret  string `json:"webhook_secret"`
	}
	require.NoError(t, json.Unmarshal(body, &sub))
	require.Equal(t, "e2e", sub.ID)
	require.Equal(t, "/agents/*", sub.Pattern)
	require.True(t, strings.HasPrefix(sub.Secret, "whsec_"), "secret %q", sub.Secret)

	// Create the stream and append two events.
	resp, body = c.do(t, http.MethodPut, stream, "application/json", e2eToken, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodPost, stream, "application/json", e2eToken, []byte(`[{"n":1},{"n":2}]`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	tail1 := resp.Header.Get("Stream-Next-Offset")
	require.NotEmpty(t, tail1)

	// The webhook arrives, signed with the subscription's secret.
	n1 := verify(t, rc.next(t), sub.Secret)
	require.Equal(t, consumerID, n1.ConsumerID)
	require.EqualValues(t, 1, n1.Epoch)
	require.NotEmpty(t, n1.WakeID)
	require.Equal(t, stream, n1.PrimaryStream)
	require.Equal(t, []webhooks.StreamOffset{{Path: stream, Offset: webhooks.OffsetNone}}, n1.Streams)
	require.Equal(t, []string{stream}, n1.TriggeredBy)
	require.Equal(t, srv.URL+"/callback/"+consumerID, n1.Callback)
	require.Equal(t, webhooks.StateWaking, state().State, "the receiver has not answered yet")

	// Claim with the wake_id: WAKING → LIVE.
	status, cb := c.callback(t, n1.Callback, n1.Token, map[string]any{"epoch": 1, "wake_id": n1.WakeID})
	require.Equal(t, http.StatusOK, status, "%+v", cb.Error)
	require.True(t, cb.OK)
	require.NotEmpty(t, cb.Token)
	require.Equal(t, n1.Streams, cb.Streams)
	require.Equal(t, webhooks.StateLive, state().State)
	rc.release <- struct{}{}
	token := cb.Token

	// Read over the ordinary stream protocol, from the start.
	resp, body = c.do(t, http.MethodGet, stream+"?offset=-1", "", e2eToken, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `[{"n":1},{"n":2}]`, string(body))
	next := resp.Header.Get("Stream-Next-Offset")
	require.Equal(t, tail1, next)

	// An ack of something that is not one of the stream's offsets, though
	// as long as one and not past the tail, is refused.
	status, cb = c.callback(t, n1.Callback, token, map[string]any{
		"epoch": 1, "acks": []webhooks.StreamOffset{{Path: stream, Offset: "0000000000000000_00000000000000!!"}},
	})
	require.Equal(t, http.StatusConflict, status, "%+v", cb)
	require.Equal(t, receiver.CodeInvalidOffset, cb.Error.Code)

	// Ack what was read, then done: no pending work, so IDLE.
	status, cb = c.callback(t, n1.Callback, token, map[string]any{
		"epoch": 1, "acks": []webhooks.StreamOffset{{Path: stream, Offset: next}},
	})
	require.Equal(t, http.StatusOK, status, "%+v", cb.Error)
	require.Equal(t, []webhooks.StreamOffset{{Path: stream, Offset: next}}, cb.Streams)
	status, cb = c.callback(t, n1.Callback, cb.Token, map[string]any{"epoch": 1, "done": true})
	require.Equal(t, http.StatusOK, status, "%+v", cb.Error)
	idle := state()
	require.Equal(t, webhooks.StateIdle, idle.State)
	require.EqualValues(t, 1, idle.Epoch)

	// A new event wakes the consumer again, at epoch 2, from the acked offset.
	resp, body = c.do(t, http.MethodPost, stream, "application/json", e2eToken, []byte(`{"n":3}`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	n2 := verify(t, rc.next(t), sub.Secret)
	require.EqualValues(t, 2, n2.Epoch)
	require.NotEqual(t, n1.WakeID, n2.WakeID)
	require.Equal(t, []webhooks.StreamOffset{{Path: stream, Offset: next}}, n2.Streams)

	// A zombie of the first cycle is fenced off.
	status, cb = c.callback(t, n1.Callback, token, map[string]any{"epoch": 1, "done": true})
	require.Equal(t, http.StatusConflict, status)
	require.False(t, cb.OK)
	require.NotNil(t, cb.Error)
	require.Equal(t, receiver.CodeStaleEpoch, cb.Error.Code)

	// The current cycle reads only the new event and finishes.
	status, cb = c.callback(t, n2.Callback, n2.Token, map[string]any{"epoch": 2, "wake_id": n2.WakeID})
	require.Equal(t, http.StatusOK, status, "%+v", cb.Error)
	rc.release <- struct{}{}
	resp, body = c.do(t, http.MethodGet, stream+"?offset="+next, "", e2eToken, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `[{"n":3}]`, string(body))
	next = resp.Header.Get("Stream-Next-Offset")
	status, cb = c.callback(t, n2.Callback, cb.Token, map[string]any{
		"epoch": 2, "acks": []webhooks.StreamOffset{{Path: stream, Offset: next}}, "done": true,
	})
	require.Equal(t, http.StatusOK, status, "%+v", cb.Error)
	final := state()
	require.Equal(t, webhooks.StateIdle, final.State)
	require.EqualValues(t, 2, final.Epoch)
	require.Equal(t, []webhooks.StreamOffset{{Path: stream, Offset: next}}, final.Streams)
}

// verify checks a delivery's signature as a consumer must, against the raw
// body, and decodes it.
func verify(t *testing.T, d delivery, secret string) *receiver.Notification {
	t.Helper()
	v, err := receiver.NewVerifier(receiver.WithSecret(secret))
	require.NoError(t, err)
	require.NoError(t, v.Verify(context.Background(), d.header, d.body))
	var n receiver.Notification
	require.NoError(t, json.Unmarshal(d.body, &n))
	return &n
}
