package exampleserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/inbox"
)

// post sends a delivery with the given headers.
func (c *client) post(t *testing.T, path string, body []byte, kv ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, bytes.NewReader(body))
	require.NoError(t, err)
	for i := 0; i < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

// TestInboxEndToEnd posts a GitHub-signed delivery to the example server's
// inbox and reads its record back from the inbox stream, with the exact
// bytes received, which verify with the secret the server was given.
func TestInboxEndToEnd(t *testing.T) {
	const secret = "e2e-github-secret"
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true,
		InboxSecrets: map[string]string{"github": secret}})

	// Whitespace and key order that re-serialising would change.
	body := []byte("{\n  \"zen\": \"Design for failure.\",\n  \"hook_id\": 42,\n  \"action\":\"opened\"\n}")
	// python3 -c 'import hmac,hashlib; print(hmac.new(b"e2e-github-secret", body, hashlib.sha256).hexdigest())'
	const signature = "sha256=8a0f56490645b68b57f0dba4a14a60730a3686e5494d04b912dd7da09dcfc1fa"
	headers := []string{"Content-Type", "application/json", "X-GitHub-Delivery", "d-1",
		"X-GitHub-Event", "issues", "X-Hub-Signature-256", signature}
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", body, headers...).StatusCode)
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", body, headers...).StatusCode, "a duplicate")
	require.Equal(t, http.StatusNotFound, c.post(t, "/inbox/gitlab", body).StatusCode)

	resp, data := c.do(t, http.MethodGet, "/inbox/github/records", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	var recs []inbox.Record
	require.NoError(t, json.Unmarshal(data, &recs))
	require.Len(t, recs, 1, "the duplicate is not appended")
	rec := recs[0]
	require.Equal(t, body, rec.Body)
	require.Equal(t, "github", rec.Provider)
	require.Equal(t, "d-1", rec.DeliveryID)
	require.Equal(t, "issues", rec.Header.Get("X-GitHub-Event"))
	require.NoError(t, inbox.GitHub{Secret: secret}.Verify(&rec))
	require.ErrorIs(t, inbox.GitHub{Secret: "another"}.Verify(&rec), inbox.ErrSignatureMismatch)

	resp, data = c.do(t, http.MethodGet, "/inbox/standard/records", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.Equal(t, "[]", string(data))

	// The subscription API still answers for patterns under /inbox/.
	resp, data = c.do(t, http.MethodGet, "/inbox/*?subscriptions", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
}

// TestInboxRoutingMetadata: a delivery to a path below the provider is
// the provider's, with that path and the query on its record; the
// provider's stream paths below it stay streams.
func TestInboxRoutingMetadata(t *testing.T) {
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true})
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github/org/acme?x=1", []byte(`{}`), "X-GitHub-Delivery", "r-1").StatusCode)
	resp, data := c.do(t, http.MethodGet, "/inbox/github/records", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	var recs []inbox.Record
	require.NoError(t, json.Unmarshal(data, &recs))
	require.Len(t, recs, 1)
	require.Equal(t, "/org/acme", recs[0].Path)
	require.Equal(t, "x=1", recs[0].Query)
	require.Equal(t, http.StatusForbidden, c.post(t, "/inbox/github/records/x", []byte(`{}`)).StatusCode)
}

func TestInboxConfigRefused(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]exampleserver.Config{
		"unknown provider":      {Inbox: true, InboxSecrets: map[string]string{"gitlab": "s"}},
		"secrets without inbox": {InboxSecrets: map[string]string{"github": "s"}},
	} {
		cfg.Addr, cfg.Dev = "127.0.0.1:0", true
		_, err := exampleserver.Start(ctx, cfg)
		require.Error(t, err, name)
	}
	// A Standard Webhooks secret that could verify nothing is refused at
	// start-up, not found out record by record.
	_, err := exampleserver.Start(ctx, exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Inbox: true,
		InboxSecrets: map[string]string{"standard": "whsec_not-base64!"}})
	require.ErrorContains(t, err, `provider "standard": its secret is not base64 after whsec_`)
}

// TestInboxProcessing: the server's processor checks each record, and
// one whose signature fails lands in the provider's dead-letter stream,
// readable like any stream, with the reason.
func TestInboxProcessing(t *testing.T) {
	const token = "inbox-operator-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true, APIToken: token,
		InboxSecrets: map[string]string{"github": "e2e-github-secret"}})
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", []byte(`{}`),
		"X-GitHub-Delivery", "forged-1", "X-Hub-Signature-256", "sha256=00").StatusCode)

	resp, data := c.do(t, http.MethodGet, "/inbox/github/dead?offset=-1", "", "", nil)
	requireRefused(t, resp, data)
	resp, data = c.do(t, http.MethodGet, "/inbox/github/dead?offset=-1&live=long-poll", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	var dead []inbox.DeadLetter
	require.NoError(t, json.Unmarshal(data, &dead))
	require.Len(t, dead, 1)
	after := resp.Header.Get("Stream-Next-Offset")
	require.Equal(t, "forged-1", dead[0].DeliveryID)
	require.Contains(t, dead[0].Reason, inbox.ErrSignatureMismatch.Error())

	resp, data = c.do(t, http.MethodGet, "/inbox/**?subscription=inbox", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.Contains(t, string(data), `"handler":"inbox"`)

	// An operator lists the dead letters, and replays one by its delivery
	// id, with the API token: it is verified again, and fails again.
	resp, data = c.do(t, http.MethodGet, "/inbox/github?status=dead", "", "", nil)
	requireRefused(t, resp, data)
	resp, data = c.do(t, http.MethodGet, "/inbox/github?status=dead", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	var page inbox.Page
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Entries, 1)
	require.Equal(t, "forged-1", page.Entries[0].Record.DeliveryID)
	resp, data = c.do(t, http.MethodGet, "/inbox/github?status=done", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Entries, 1, "the cursor passed the record")
	resp, data = c.do(t, http.MethodGet, "/inbox/github?status=pending", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.NoError(t, json.Unmarshal(data, &page))
	require.Empty(t, page.Entries)

	// The old route, a dead letter as the body, is gone: a token holder
	// could have had a forged one, with any received_at, processed.
	letter, err := json.Marshal(dead[0])
	require.NoError(t, err)
	resp, data = c.do(t, http.MethodPost, "/inbox/github/dead?replay", "application/json", token, letter)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", data)
	resp, data = c.do(t, http.MethodPost, "/inbox/github/dead?replay=nonsuch", "", token, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", data)
	resp, data = c.do(t, http.MethodPost, "/inbox/github/dead?replay=forged-1", "", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", data)
	resp, data = c.do(t, http.MethodPost, "/inbox/github/dead?replay=forged-1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	resp, data = c.do(t, http.MethodGet, "/inbox/github/dead?live=long-poll&offset="+after, "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.NoError(t, json.Unmarshal(data, &dead))
	require.Len(t, dead, 1, "replayed, verified again, and dead again")
	require.Equal(t, "forged-1", dead[0].DeliveryID)
}
