package exampleserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// requireForbidden checks a 403 in the one JSON error shape.
func requireForbidden(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", body)
	var out receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	require.NotNil(t, out.Error, "%s", body)
	require.Equal(t, receiver.ErrorCode("FORBIDDEN"), out.Error.Code)
}

// No client writes the inbox's streams, with the API token or without: a
// captured delivery appended with a fresh received_at, the time the
// timestamp tolerance trusts, never reaches the processor, and no client
// can delete the records stream or fill it with what the processor cannot
// handle.
func TestInboxStreamsAreWrittenOnlyByTheInbox(t *testing.T) {
	const token = "inbox-operator-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true, APIToken: token,
		InboxSecrets: map[string]string{"github": "e2e-github-secret"}})
	captured, err := json.Marshal(inbox.Record{Provider: "github", DeliveryID: "old-1", ReceivedAt: time.Now().UTC(),
		Header: http.Header{"X-Hub-Signature-256": {"sha256=8a0f"}}, Body: []byte(`{}`)})
	require.NoError(t, err)
	for _, given := range []string{"", token} {
		for _, path := range []string{"/inbox/github/records", "/inbox/github/dead", "/inbox/standard/records"} {
			resp, body := c.do(t, http.MethodPost, path, "application/json", given, captured)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, resp.StatusCode, "%s %s", path, body)
			resp, body = c.do(t, http.MethodPut, path, "text/plain", given, nil)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, resp.StatusCode, "%s %s", path, body)
			resp, body = c.do(t, http.MethodDelete, path, "", given, nil)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, resp.StatusCode, "%s %s", path, body)
		}
		// Nor any other stream under /inbox/, which the processor's
		// subscription or a later provider could match.
		for _, path := range []string{"/inbox/gitlab/records", "/inbox/github/records/x", "/inbox/github/other"} {
			resp, body := c.do(t, http.MethodPut, path, "application/json", given, nil)
			requireForbidden(t, resp, body)
		}
	}
	resp, body := c.do(t, http.MethodPost, "/inbox/github/records", "application/json", token, captured)
	requireForbidden(t, resp, body)

	resp, body = c.do(t, http.MethodGet, "/inbox/github/records?offset=-1", "", "", nil)
	requireRefused(t, resp, body)
	resp, body = c.do(t, http.MethodGet, "/inbox/github/records?offset=-1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "[]", string(body), "nothing but the inbox appends")
	resp, body = c.do(t, http.MethodHead, "/inbox/github/dead", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	// Without the inbox, and without a token, /inbox/ is reserved all the
	// same, so that no stream there can stop the inbox's start later.
	open, _ := startServer(t, exampleserver.Config{Dev: true})
	resp, body = open.do(t, http.MethodPut, "/inbox/github/records", "text/plain", "", nil)
	requireForbidden(t, resp, body)
}

// The API creates and updates no subscription "inbox", with the token or
// without one, so that none can conflict with the inbox's at its start;
// an operator reads it.
func TestInboxSubscriptionIDIsReserved(t *testing.T) {
	const token = "inbox-operator-token"
	create := []byte(`{"webhook":"http://127.0.0.1:1/hook"}`)
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true, APIToken: token})
	for _, target := range []string{"/inbox/*/records?subscription=inbox", "/other/*?subscription=inbox"} {
		resp, body := c.do(t, http.MethodPut, target, "application/json", token, create)
		requireForbidden(t, resp, body)
		resp, body = c.do(t, http.MethodPatch, target, "application/json", token, []byte(`{"status":"paused"}`))
		requireForbidden(t, resp, body)
	}
	resp, body := c.do(t, http.MethodPut, "/other/*?subscription=inbox", "application/json", "", create)
	requireRefused(t, resp, body)
	resp, body = c.do(t, http.MethodGet, "/inbox/*/records?subscription=inbox", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	open, _ := startServer(t, exampleserver.Config{Dev: true})
	resp, body = open.do(t, http.MethodPut, "/other/*?subscription=inbox", "application/json", "", create)
	requireForbidden(t, resp, body)
	resp, body = open.do(t, http.MethodPut, "/other/*?subscription=inboxes", "application/json", "", create)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
}

// Data that clients wrote before /inbox/ and the subscription ID were
// reserved does not stop the start: a provider whose stream has another
// content type refuses deliveries with 503, another subscription "inbox"
// leaves records unprocessed, each is logged and reported, and the other
// provider is served.
func TestInboxStartWorksAroundClientData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	streams, err := dstream.Open(filepath.Join(dir, "streams"), dstream.Options{})
	require.NoError(t, err)
	require.NoError(t, streams.Create(ctx, "/inbox/github/records", "text/plain"))
	streams.Close()

	store := memstore.New()
	engine, err := webhooks.New(store, dstream.New(dstream.Options{}), webhooks.WithCallbackBaseURL("http://127.0.0.1/"),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	require.NoError(t, err)
	require.NoError(t, engine.Start(ctx))
	_, err = engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "inbox", Pattern: "/other/*", Webhook: "http://127.0.0.1:1/hook"}, "")
	require.NoError(t, err)
	require.NoError(t, engine.Stop(ctx))

	const token = "inbox-operator-token"
	cfg := exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Inbox: true, APIToken: token, DataDir: dir, Store: store}
	srv, err := exampleserver.Start(ctx, cfg)
	require.NoError(t, err, "the start does not fail on data a client wrote")
	c := &client{hc: &http.Client{Transport: &http.Transport{}}, base: srv.URL}
	t.Cleanup(func() {
		c.hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(ctx))
	})
	require.Len(t, srv.Problems, 2, "%q", srv.Problems)
	require.Contains(t, srv.Problems[0], "/inbox/github/records exists with another content type")
	require.Contains(t, srv.Problems[1], `subscription "inbox" exists with another configuration`)

	resp, body := c.do(t, http.MethodPost, "/inbox/github", "application/json", "", []byte(`{}`))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp = c.post(t, "/inbox/standard", []byte(`{}`), "Webhook-Id", "msg-1")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	resp, body = c.do(t, http.MethodGet, "/inbox/standard/records?offset=-1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"delivery_id":"msg-1"`, "stored, to be processed once the conflict is gone")
}
