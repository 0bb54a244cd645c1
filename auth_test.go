package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// authCall is one call of an Authorizer, as it saw it.
type authCall struct {
	method, path string
	op           webhooks.Operation
	id           string
}

// authRecorder is an Authorizer that records its calls and answers with
// whatever the test stores in verdict.
type authRecorder struct {
	mu      sync.Mutex
	calls   []authCall
	verdict atomic.Pointer[error]
}

func (a *authRecorder) authorize(r *http.Request, op webhooks.Operation, id string) error {
	a.mu.Lock()
	a.calls = append(a.calls, authCall{method: r.Method, path: r.URL.Path, op: op, id: id})
	a.mu.Unlock()
	if err := a.verdict.Load(); err != nil {
		return *err
	}
	return nil
}

func (a *authRecorder) refuseWith(err error) { a.verdict.Store(&err) }

func (a *authRecorder) taken() []authCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.calls
	a.calls = nil
	return out
}

// authSend sends one request to srv over HTTP and returns the response with
// its body read.
func authSend(t *testing.T, srv *httptest.Server, method, target, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+target, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// newAuthServer serves an engine with rec as its Authorizer over HTTP.
func newAuthServer(t *testing.T, rec *authRecorder, opts ...webhooks.Option) (*harness, *httptest.Server) {
	h := newHarness(t, append(opts, webhooks.WithAuthorizer(rec.authorize))...)
	srv := httptest.NewServer(h.handler)
	t.Cleanup(srv.Close)
	return h, srv
}

func TestAuthorizerSeesOperationAndSubscriptionID(t *testing.T) {
	rec := &authRecorder{}
	h, srv := newAuthServer(t, rec)

	resp, body := authSend(t, srv, http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodGet, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodGet, "/**?subscriptions", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodPatch, "/agents/*?subscription=s1", `{"status":"paused"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodPost, "/agents/*?subscription=s1&rewind", `{"offset":"-1"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodGet, "/agents/*?subscription=s1&consumers", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodDelete, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))

	require.Equal(t, []authCall{
		{http.MethodPut, "/agents/*", webhooks.OpCreate, "s1"},
		{http.MethodGet, "/agents/*", webhooks.OpRead, "s1"},
		{http.MethodGet, "/**", webhooks.OpList, ""},
		{http.MethodPatch, "/agents/*", webhooks.OpUpdate, "s1"},
		{http.MethodPost, "/agents/*", webhooks.OpOperate, "s1"},
		{http.MethodGet, "/agents/*", webhooks.OpRead, "s1"},
		{http.MethodDelete, "/agents/*", webhooks.OpDelete, "s1"},
	}, rec.taken())

	// A method the API does not serve is asked as a read, then answered
	// 405.
	resp, body = authSend(t, srv, http.MethodOptions, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, string(body))
	require.Equal(t, []authCall{{http.MethodOptions, "/agents/*", webhooks.OpRead, "s1"}}, rec.taken())
}

func TestAuthorizerUnauthorizedIs401WithBearerChallenge(t *testing.T) {
	rec := &authRecorder{}
	h, srv := newAuthServer(t, rec)
	rec.refuseWith(fmt.Errorf("%w: token sk-do-not-echo unknown", webhooks.ErrUnauthorized))

	for _, r := range []struct{ method, target, body string }{
		{http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), "")},
		{http.MethodGet, "/agents/*?subscription=s1", ""},
		{http.MethodGet, "/**?subscriptions", ""},
		{http.MethodDelete, "/agents/*?subscription=s1", ""},
		{http.MethodPatch, "/agents/*?subscription=s1", `{"status":"paused"}`},
		{http.MethodPost, "/agents/*?subscription=s1&rotate", ""},
		{http.MethodPost, "/agents/*?subscription=s1&rewind", `{"offset":"-1"}`},
		{http.MethodGet, "/agents/*?subscription=s1&deliveries&consumer=x", ""},
	} {
		resp, body := authSend(t, srv, r.method, r.target, r.body)
		subRequireError(t, http.StatusUnauthorized, receiver.ErrorCode("UNAUTHORIZED"), resp.StatusCode, body, resp.Header.Get("Content-Type"))
		require.Equal(t, "Bearer", resp.Header.Get("WWW-Authenticate"))
		require.NotContains(t, string(body), "sk-do-not-echo")
	}
	subs, err := h.store.ListSubscriptions(context.Background())
	require.NoError(t, err)
	require.Empty(t, subs, "a refused create stored a subscription")
}

func TestAuthorizerForbiddenIs403AndChangesNothing(t *testing.T) {
	rec := &authRecorder{}
	h, srv := newAuthServer(t, rec)
	h.subscribe("s1", "/agents/*")
	rec.refuseWith(fmt.Errorf("tenant b may not touch s1: %w", webhooks.ErrForbidden))

	resp, body := authSend(t, srv, http.MethodDelete, "/agents/*?subscription=s1", "")
	subRequireError(t, http.StatusForbidden, receiver.ErrorCode("FORBIDDEN"), resp.StatusCode, body, resp.Header.Get("Content-Type"))
	require.Empty(t, resp.Header.Get("WWW-Authenticate"))
	require.NotContains(t, string(body), "tenant b")
	_, err := h.store.GetSubscription(context.Background(), "s1")
	require.NoError(t, err, "a refused delete removed the subscription")
}

func TestAuthorizerOtherErrorIsLoggedGeneric500(t *testing.T) {
	var logs bytes.Buffer
	rec := &authRecorder{}
	_, srv := newAuthServer(t, rec, webhooks.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	rec.refuseWith(errors.New("identity provider at 10.0.0.7 timed out"))

	resp, body := authSend(t, srv, http.MethodGet, "/**?subscriptions", "")
	subRequireError(t, http.StatusInternalServerError, receiver.ErrorCode("INTERNAL_ERROR"), resp.StatusCode, body, resp.Header.Get("Content-Type"))
	require.NotContains(t, string(body), "10.0.0.7")
	require.NotContains(t, string(body), "identity provider")
	require.Contains(t, logs.String(), "identity provider at 10.0.0.7 timed out")
}

func TestAuthorizerDoesNotGuardCallbacks(t *testing.T) {
	rec := &authRecorder{}
	h, _ := newAuthServer(t, rec)
	d := h.live()
	rec.taken()
	rec.refuseWith(webhooks.ErrUnauthorized)

	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Empty(t, rec.taken())
}

func TestWithoutAuthorizerTheAPIIsOpen(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.handler)
	t.Cleanup(srv.Close)

	resp, body := authSend(t, srv, http.MethodPut, "/agents/*?subscription=s1", subBody(h.recv.url(), ""))
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodGet, "/**?subscriptions", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = authSend(t, srv, http.MethodDelete, "/agents/*?subscription=s1", "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
}

func TestWithAuthorizerRefusesNil(t *testing.T) {
	_, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase), webhooks.WithAuthorizer(nil))
	require.ErrorContains(t, err, "WithAuthorizer")
}
