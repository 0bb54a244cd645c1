package exampleserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/internal/openapitest"
	"github.com/streamhooks/webhooks/receiver"
)

// startServer starts the example server with cfg on a free loopback port.
// It returns a client for it and a function that stops it, which runs at
// the end of the test unless the test calls it first.
func startServer(t *testing.T, cfg exampleserver.Config) (*client, func()) {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	srv, err := exampleserver.Start(context.Background(), cfg)
	require.NoError(t, err)
	// Every exchange is checked against the OpenAPI document.
	c := &client{hc: &http.Client{Transport: openapitest.NewTransport(t, &http.Transport{})}, base: srv.URL}
	stop := sync.OnceFunc(func() {
		c.hc.Transport.(*openapitest.Transport).Base.(*http.Transport).CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(ctx))
	})
	t.Cleanup(stop)
	return c, stop
}

// requireRefused checks a 401 in the one JSON error shape with a Bearer
// challenge.
func requireRefused(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", body)
	require.Equal(t, "Bearer", resp.Header.Get("WWW-Authenticate"))
	var out receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	require.NotNil(t, out.Error, "%s", body)
	require.Equal(t, receiver.ErrorCode("UNAUTHORIZED"), out.Error.Code)
}

func TestAPITokenGuardsTheSubscriptionAPI(t *testing.T) {
	const token = "the-api-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: token})
	create := []byte(`{"webhook":"http://127.0.0.1:1/hook"}`)

	for _, given := range []string{"", "wrong-token", token + "x", strings.ToUpper(token)} {
		resp, body := c.do(t, http.MethodPut, "/agents/*?subscription=s1", "application/json", given, create)
		requireRefused(t, resp, body)
		resp, body = c.do(t, http.MethodGet, "/**?subscriptions", "", given, nil)
		requireRefused(t, resp, body)
	}

	// The token under another scheme is refused; the scheme's case does
	// not matter.
	for header, status := range map[string]int{"Basic " + token: http.StatusUnauthorized, "bearer " + token: http.StatusOK} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, c.base+"/**?subscriptions", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", header)
		resp, err := c.hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, status, resp.StatusCode, header)
	}

	resp, body := c.do(t, http.MethodPut, "/agents/*?subscription=s1", "application/json", token, create)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodGet, "/**?subscriptions", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"subscription_id":"s1"`)
	resp, body = c.do(t, http.MethodDelete, "/agents/*?subscription=s1", "", "", nil)
	requireRefused(t, resp, body)

}

// With an API token, every stream request needs it too, unless streams
// are public.
func TestAPITokenGuardsStreams(t *testing.T) {
	const token = "the-api-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: token})
	for _, given := range []string{"", "wrong-token"} {
		for _, req := range []struct{ method, path, body string }{
			{http.MethodPut, "/agents/a", ""}, {http.MethodPost, "/agents/a", `[{"n":1}]`},
			{http.MethodGet, "/agents/a?offset=-1", ""}, {http.MethodDelete, "/agents/a", ""},
		} {
			resp, body := c.do(t, req.method, req.path, "application/json", given, []byte(req.body))
			requireRefused(t, resp, body)
		}
		resp, body := c.do(t, http.MethodHead, "/agents/a", "", given, nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", body)
	}
	requireStreamsServe(t, c, token)

	public, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: token, PublicStreams: true})
	requireStreamsServe(t, public, "")
	resp, body := public.do(t, http.MethodGet, "/**?subscriptions", "", "", nil)
	requireRefused(t, resp, body)
}

// requireStreamsServe creates, appends to, reads and deletes a stream with
// token.
func requireStreamsServe(t *testing.T, c *client, token string) {
	t.Helper()
	resp, body := c.do(t, http.MethodPut, "/agents/a", "application/json", token, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodPost, "/agents/a", "application/json", token, []byte(`[{"n":1}]`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodGet, "/agents/a?offset=-1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.JSONEq(t, `[{"n":1}]`, string(body))
	resp, body = c.do(t, http.MethodDelete, "/agents/a", "", token, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
}

func TestWithoutAPITokenTheSubscriptionAPIIsOpen(t *testing.T) {
	c, _ := startServer(t, exampleserver.Config{Dev: true})
	resp, body := c.do(t, http.MethodGet, "/**?subscriptions", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	requireStreamsServe(t, c, "")
}

func TestEncryptionKeySealsSecretsOnDisk(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       []byte
		plaintext bool
	}{
		// Without a key the secret is on disk, which shows that the search
		// below finds it where it is.
		{"without a key", nil, true},
		{"with a key", bytes.Repeat([]byte{7}, 32), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, stop := startServer(t, exampleserver.Config{Dev: true, APIToken: "t", DataDir: dir, EncryptionKey: tc.key})
			resp, body := c.do(t, http.MethodPut, "/agents/*?subscription=s1", "application/json", "t",
				[]byte(`{"webhook":"http://127.0.0.1:1/hook"}`))
			require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
			var created struct {
				Secret string `json:"webhook_secret"`
			}
			require.NoError(t, json.Unmarshal(body, &created))
			hexPart := strings.TrimPrefix(created.Secret, "whsec_")
			require.Len(t, hexPart, 64)
			stop()

			var found []string
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if bytes.Contains(data, []byte(hexPart)) {
					found = append(found, path)
				}
				return err
			})
			require.NoError(t, err)
			if tc.plaintext {
				require.NotEmpty(t, found, "the secret is not in the files in plain text")
			} else {
				require.Empty(t, found, "the secret is in plain text")
			}
		})
	}
}

func TestStartRefusesAnEncryptionKeyWithoutADataDirectory(t *testing.T) {
	_, err := exampleserver.Start(context.Background(), exampleserver.Config{
		Addr: "127.0.0.1:0", Dev: true, EncryptionKey: bytes.Repeat([]byte{7}, 32),
	})
	require.ErrorContains(t, err, "needs a data directory")
}
