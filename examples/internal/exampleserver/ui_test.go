package exampleserver_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

// TestUIBehindTheAPIToken checks how the example server guards its
// operator screen: a browser signs in with the API token and gets an
// HttpOnly, same-site session cookie; a script sends the bearer header;
// nothing else gets a page, and no other site can sign a browser in.
func TestUIBehindTheAPIToken(t *testing.T) {
	const token = "ui-api-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: token})
	noRedirect := &http.Client{Transport: c.hc.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	send := func(method, path string, form url.Values, header map[string]string) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(data)
	}
	sameOrigin := map[string]string{"Origin": c.base, "Sec-Fetch-Site": "same-origin"}

	resp, _ := send(http.MethodGet, "/ui/", nil, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/login", resp.Header.Get("Location"))
	resp, _ = send(http.MethodGet, "/ui/", nil, map[string]string{"Cookie": "streamhooks_ui=forged"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a forged session")
	resp, _ = send(http.MethodGet, "/ui/", nil, map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, body := send(http.MethodGet, "/ui/", nil, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="subscriptions"`)

	resp, _ = send(http.MethodPost, "/ui/login", url.Values{"token": {"wrong"}}, sameOrigin)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	resp, _ = send(http.MethodPost, "/ui/login", url.Values{"token": {token}},
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a login from another site")
	require.Empty(t, resp.Cookies())

	resp, _ = send(http.MethodPost, "/ui/login", url.Values{"token": {token}}, sameOrigin)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	session := resp.Cookies()[0]
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.Equal(t, "/ui/", session.Path)
	require.NotContains(t, session.Value, token)
	cookie := map[string]string{"Cookie": session.Name + "=" + session.Value}
	resp, body = send(http.MethodGet, "/ui/", nil, cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)

	// An action with the session: refused from another site, done from
	// the screen.
	resp, data := c.do(t, http.MethodPut, "/a/*?subscription=s1", "application/json", token, []byte(`{"webhook":"http://127.0.0.1:1/hook"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", data)
	cross := map[string]string{"Cookie": cookie["Cookie"], "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	resp, _ = send(http.MethodPost, "/ui/subscription/pause", url.Values{"id": {"s1"}}, cross)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = send(http.MethodPost, "/ui/subscription/pause", url.Values{"id": {"s1"}}, sameOrigin)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no session")
	same := map[string]string{"Cookie": cookie["Cookie"], "Origin": c.base, "Sec-Fetch-Site": "same-origin"}
	resp, _ = send(http.MethodPost, "/ui/subscription/pause", url.Values{"id": {"s1"}}, same)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, data = c.do(t, http.MethodGet, "/a/*?subscription=s1", "", token, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	require.Contains(t, string(data), `"status":"paused"`)

	// The prefix without its slash leads to the screen.
	resp, _ = send(http.MethodGet, "/ui", nil, nil)
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
}
