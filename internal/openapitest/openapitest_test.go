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
