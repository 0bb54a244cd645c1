package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const goodSub = `{"subscription_id":"s1","pattern":"/orders/*","webhook":"https://h.example/hook","delivery":"wake","status":"active","consecutive_failures":0,"failing_since":null,"last_success_at":null,"last_failure_at":null}`

func check(t *testing.T, v *Validator, method, target, reqBody string, status int, body string) error {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(reqBody))
	if reqBody != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	h := http.Header{"Content-Type": {"application/json"}}
	return v.Check(r, []byte(reqBody), status, h, []byte(body))
}

// The document passes what the engine answers, and catches a response
// that breaks it, a status it does not list, and a route it lacks.
func TestValidatorCatchesMismatches(t *testing.T) {
	v, err := New()
	require.NoError(t, err)

	require.NoError(t, check(t, v, http.MethodGet, "/**?subscription=s1", "", 200, goodSub))
	require.NoError(t, check(t, v, http.MethodPut, "/orders/*?subscription=s1", `{"webhook":"https://h.example/hook"}`, 201, goodSub))
	require.NoError(t, check(t, v, http.MethodGet, "/**?subscription=nope", "", 404,
		`{"ok":false,"error":{"code":"SUBSCRIPTION_NOT_FOUND","message":"no subscription nope"}}`))
	require.NoError(t, check(t, v, http.MethodGet, "/orders/1?offset=-1", "", 200, `[1]`), "a stream read is not the document's")

	// Deliberately wrong responses.
	wrong := strings.Replace(goodSub, `"status":"active"`, `"status":"on"`, 1)
	err = check(t, v, http.MethodGet, "/**?subscription=s1", "", 200, wrong)
	require.ErrorContains(t, err, "status")
	t.Logf("caught: %v", err)
	err = check(t, v, http.MethodGet, "/**?subscription=s1&dead", "", 200, `{"items":[]}`)
	require.ErrorContains(t, err, "consumers")
	err = check(t, v, http.MethodGet, "/**?subscription=s1", "", 404, `{"error":"not found"}`)
	require.Error(t, err, "not the one error shape")
	err = check(t, v, http.MethodDelete, "/**?subscription=s1", "", 202, ``)
	require.ErrorContains(t, err, "202")

	// A bad request body the engine accepted.
	err = check(t, v, http.MethodPost, "/callback/c1", `{"epoch":"one"}`, 200, `{"ok":true,"token":"t","streams":[]}`)
	require.ErrorContains(t, err, "epoch")

	// A route missing from the document.
	v.doc.Paths.Delete("/{pattern}?rotate")
	err = check(t, v, http.MethodPost, "/**?subscription=s1&rotate", `{}`, 200, `{}`)
	require.ErrorContains(t, err, "has no POST")
}

// The route finder classifies the inbox's routes and the JWKS as the
// example server routes them; what it passes to the stream protocol is
// not the document's.
func TestRouteClassifiesTheInboxAndTheJWKS(t *testing.T) {
	v, err := New()
	require.NoError(t, err)
	for target, want := range map[string]string{
		"GET /inbox/github?status=dead":       "/inbox/{provider}",
		"POST /inbox/github":                  "/inbox/{provider}",
		"POST /inbox/github/org/acme?x=1":     "/inbox/{provider}/{path}",
		"POST /inbox/standard/dead?replay=d1": "/inbox/{provider}/dead?replay",
		"POST /inbox/github/dead?replay&at=p": "/inbox/{provider}/dead?replay",
		"GET /__ds/jwks.json":                 "/__ds/jwks.json",
		"POST /inbox/github/records/x":        "",
		"POST /inbox/github/dead":             "",
		"GET /inbox/github/org/acme":          "",
		"POST /inbox/gitlab/org/acme":         "",
		"GET /__ds/jwks.json?offset=-1":       "",
		"POST /__ds/jwks.json":                "",
	} {
		method, path, _ := strings.Cut(target, " ")
		key, _, err := v.route(httptest.NewRequest(method, path, nil))
		if want == "" {
			require.ErrorIs(t, err, errNotAPI, target)
			continue
		}
		require.NoError(t, err, target)
		require.Equal(t, want, key, target)
	}

	h := http.Header{"Content-Type": {"application/jwk-set+json"}}
	r := httptest.NewRequest(http.MethodGet, "/__ds/jwks.json", nil)
	good := `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"ds_wijOZRM8rMTmRNXhdJcwFkGm7ZevWKt7dfVRMo9x__E","use":"sig","alg":"EdDSA","x":"4Ncd59w3vpxmYlmatB0tufTfwIB9iIL91QCkzAAAAAA"}]}`
	require.NoError(t, v.Check(r, nil, 200, h, []byte(good)))
	err = v.Check(r, nil, 200, h, []byte(strings.Replace(good, `"x":`, `"d":"secret","x":`, 1)))
	require.ErrorContains(t, err, "d", "a private member is never served")
}
