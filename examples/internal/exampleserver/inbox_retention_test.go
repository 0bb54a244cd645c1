package exampleserver_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/memstore"
)

// TestInboxRetentionOverAnOldDataDirectory: a data directory written
// before partitions, with a record still unprocessed in the unpartitioned
// stream and the subscription's old pattern, starts with InboxRetention:
// its subscription goes on, the old record is processed, and new ones go to today's partition, processed too; the
// listing shows both.
func TestInboxRetentionOverAnOldDataDirectory(t *testing.T) {
	const secret, token = "retention-secret", "retention-token"
	ctx := context.Background()
	dir := t.TempDir()
	streams, err := dstream.Open(filepath.Join(dir, "streams"), dstream.Options{})
	require.NoError(t, err)
	body := []byte(`{"n":0}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	old, err := json.Marshal(inbox.Record{Provider: "github", DeliveryID: "old-1", ReceivedAt: time.Now().UTC(),
		Header: http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac.Sum(nil))}}, Body: body})
	require.NoError(t, err)
	require.NoError(t, streams.Create(ctx, "/inbox/github/records", "application/json"))
	require.NoError(t, streams.Append(ctx, "/inbox/github/records", old))
	streams.Close()

	store := memstore.New()
	engine, err := webhooks.New(store, dstream.New(dstream.Options{}), webhooks.WithCallbackBaseURL("http://127.0.0.1/"),
		webhooks.WithBatchHandler("inbox", func(context.Context, *webhooks.Batch) error { return nil }))
	require.NoError(t, err)
	require.NoError(t, engine.Start(ctx))
	// As the server created it before partitions.
	_, err = engine.CreateSubscription(ctx, &webhooks.Subscription{ID: "inbox", Pattern: "/inbox/*/records",
		Delivery: webhooks.DeliveryHandler, Handler: "inbox",
		Events: &webhooks.EventsOptions{MaxBatchEvents: 1, MaxBatchBytes: webhooks.DefaultMaxBatchBytes, Timeout: 5 * time.Second},
		Retry:  &webhooks.RetryPolicy{MaxAttempts: webhooks.DefaultMaxAttempts}}, webhooks.OffsetNone)
	require.NoError(t, err)
	require.NoError(t, engine.Stop(ctx))

	processed := make(chan string, 10)
	srv, err := exampleserver.Start(ctx, exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Inbox: true, InboxRetention: true,
		APIToken: token, DataDir: dir, Store: store, InboxSecrets: map[string]string{"github": secret},
		InboxHandler: func(_ context.Context, rec *inbox.Record) error { processed <- rec.DeliveryID; return nil }})
	require.NoError(t, err)
	c := &client{hc: &http.Client{Transport: &http.Transport{}}, base: srv.URL}
	t.Cleanup(func() {
		c.hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(ctx))
	})
	require.Empty(t, srv.Problems)
	require.Equal(t, "old-1", nextID(t, processed), "the old stream is still processed")

	body = []byte(`{"n":1}`)
	mac = hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", body, "X-GitHub-Delivery", "new-1",
		"X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil))).StatusCode)
	require.Equal(t, "new-1", nextID(t, processed))

	resp, data := c.do(t, http.MethodGet, "/inbox/github?status=done", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	var page inbox.Page
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Entries, 2, "%s", data)
	require.Equal(t, "/inbox/github/records", page.Entries[0].Stream)
	require.Equal(t, "old-1", page.Entries[0].Record.DeliveryID)
	require.True(t, strings.HasPrefix(page.Entries[1].Stream, "/inbox/github/records/"), page.Entries[1].Stream)
	require.Equal(t, "new-1", page.Entries[1].Record.DeliveryID)
	// The partition reads like any inbox stream, with the token.
	resp, data = c.do(t, http.MethodGet, page.Entries[1].Stream+"?offset=-1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.Contains(t, string(data), `"delivery_id":"new-1"`)
}

// nextID waits for the next id on ids.
func nextID(t *testing.T, ids chan string) string {
	t.Helper()
	select {
	case id := <-ids:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("nothing processed")
		return ""
	}
}
