package exampleserver_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

// Two tenants' tokens: each creates, reads and lists its own subscriptions
// only, under /tenants/{tenant}/; the other's answers 404, a pattern
// outside 403, a create past the limit 403; the operator sees both.
func TestTenantTokens(t *testing.T) {
	const op, acme, globex = "operator-token", "acme-token", "globex-token"
	c, _ := startServer(t, exampleserver.Config{Dev: true, APIToken: op,
		TenantTokens: map[string]string{"acme": acme, "globex": globex}, TenantMaxSubscriptions: 1})
	create := []byte(`{"webhook":"http://127.0.0.1:1/hook"}`)
	status := func(method, target, token string, body []byte) int {
		t.Helper()
		ct := ""
		if body != nil {
			ct = "application/json"
		}
		resp, _ := c.do(t, method, target, ct, token, body)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, status(http.MethodPut, "/tenants/acme/*?subscription=a1", acme, create))
	require.Equal(t, http.StatusForbidden, status(http.MethodPut, "/tenants/acme/x/*?subscription=a2", acme, create), "acme's limit is 1")
	require.Equal(t, http.StatusForbidden, status(http.MethodPut, "/tenants/acme/*?subscription=g1", globex, create))
	require.Equal(t, http.StatusForbidden, status(http.MethodPut, "/**?subscription=g1", globex, create))
	require.Equal(t, http.StatusCreated, status(http.MethodPut, "/tenants/globex/**?subscription=g1", globex, create))
	require.Equal(t, http.StatusNotFound, status(http.MethodGet, "/**?subscription=a1", globex, nil))
	require.Equal(t, http.StatusNotFound, status(http.MethodDelete, "/**?subscription=a1", globex, nil))
	require.Equal(t, http.StatusOK, status(http.MethodGet, "/**?subscription=a1", acme, nil))
	require.Equal(t, http.StatusUnauthorized, status(http.MethodGet, "/**?subscriptions", "nobody", nil))

	list := func(token string) []string {
		t.Helper()
		resp, body := c.do(t, http.MethodGet, "/**?subscriptions", "", token, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		var out struct {
			Subscriptions []struct {
				ID     string `json:"subscription_id"`
				Tenant string `json:"tenant"`
			}
		}
		require.NoError(t, json.Unmarshal(body, &out))
		ids := []string{}
		for _, s := range out.Subscriptions {
			ids = append(ids, s.Tenant+"/"+s.ID)
		}
		return ids
	}
	require.Equal(t, []string{"acme/a1"}, list(acme))
	require.Equal(t, []string{"globex/g1"}, list(globex))
	require.Equal(t, []string{"acme/a1", "globex/g1"}, list(op))
}

// Tenant tokens need the operator's API token, tokens of their own, and
// tenant names the engine accepts.
func TestTenantTokensRefused(t *testing.T) {
	for _, cfg := range []exampleserver.Config{
		{Dev: true, TenantTokens: map[string]string{"acme": "t1"}},
		{Dev: true, APIToken: "op", TenantTokens: map[string]string{"acme": "op"}},
		{Dev: true, APIToken: "op", TenantTokens: map[string]string{"a/b": "t1"}},
		{Dev: true, APIToken: "op", TenantMaxSubscriptions: 2},
	} {
		cfg.Addr = "127.0.0.1:0"
		_, err := exampleserver.Start(t.Context(), cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
