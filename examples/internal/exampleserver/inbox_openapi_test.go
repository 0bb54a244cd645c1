package exampleserver_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/inbox"
)

// TestInboxAdminRoutesMatchTheDocument drives each shape of the inbox's
// operator routes, and a delivery below a provider, through the
// validating client (openapitest): a paged listing, a replay by position
// and its refusals.
func TestInboxAdminRoutesMatchTheDocument(t *testing.T) {
	const token = "inbox-operator-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, Inbox: true, APIToken: token,
		InboxSecrets: map[string]string{"github": "e2e-github-secret"}})
	for _, id := range []string{"forged-1", "forged-2"} {
		require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github/org/acme?x=1", []byte(`{}`),
			"X-GitHub-Delivery", id, "X-Hub-Signature-256", "sha256=00").StatusCode)
	}
	// Both are dead letters once the dead-letter stream holds two.
	var dead []inbox.DeadLetter
	for offset := "-1"; len(dead) < 2; {
		resp, data := c.do(t, http.MethodGet, "/inbox/github/dead?live=long-poll&offset="+offset, "", token, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
		var more []inbox.DeadLetter
		require.NoError(t, json.Unmarshal(data, &more))
		dead, offset = append(dead, more...), resp.Header.Get("Stream-Next-Offset")
	}

	var page inbox.Page
	resp, data := c.do(t, http.MethodGet, "/inbox/github?status=dead&limit=1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Entries, 1)
	require.NotEmpty(t, page.Next)
	require.Equal(t, "/org/acme", page.Entries[0].Record.Path)
	require.Equal(t, "x=1", page.Entries[0].Record.Query)
	resp, data = c.do(t, http.MethodGet, "/inbox/github?status=dead&limit=1&from="+url.QueryEscape(page.Next), "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Entries, 1)
	require.Equal(t, "forged-2", page.Entries[0].Record.DeliveryID)

	resp, data = c.do(t, http.MethodPost, "/inbox/github/dead?replay&at="+url.QueryEscape(page.Entries[0].At), "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	for _, bad := range []string{"?replay&at=bogus", "?replay=forged-1&at=" + url.QueryEscape(page.Entries[0].At)} {
		resp, data = c.do(t, http.MethodPost, "/inbox/github/dead"+bad, "", token, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", bad, data)
	}
	for _, bad := range []string{"?status=later", "?status=dead&limit=501", "?status=dead&from=bogus"} {
		resp, data = c.do(t, http.MethodGet, "/inbox/github"+bad, "", token, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", bad, data)
	}
}
