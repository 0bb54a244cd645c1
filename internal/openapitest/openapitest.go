// Package openapitest checks HTTP requests and responses against the
// engine's OpenAPI document (package openapi) with kin-openapi: a request to
// a route the document lacks, or a request or response that does not
// match it, is an error.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/streamhooks/webhooks/openapi"
)

// Validator checks exchanges against the document.
type Validator struct {
	doc *openapi3.T
	// providers are the inbox's, as the document's enum names them: a
	// POST below another name is the stream protocol's, as the example
	// server routes it.
	providers map[string]bool
}

// New loads and validates the document.
func New() (*Validator, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Document)
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	v := &Validator{doc: doc, providers: map[string]bool{}}
	if item := doc.Paths.Value("/inbox/{provider}"); item != nil && item.Post != nil {
		if p := item.Post.Parameters.GetByInAndName("path", "provider"); p != nil && p.Schema != nil && p.Schema.Value != nil {
			for _, name := range p.Schema.Value.Enum {
				if s, ok := name.(string); ok {
					v.providers[s] = true
				}
			}
		}
	}
	return v, nil
}

// errNotAPI marks a request the document does not cover: the stream
// protocol's, which its own specification describes.
var errNotAPI = errors.New("not an engine route")

// operators are the query parameters that pick an operator route, in the
// order the engine looks for them.
var operators = []string{"consumers", "deliveries", "rewind", "dead", "revive", "test", "rotate", "verify", "challenge"}

// route returns the document's key of the route r is for, and its path
// parameters, classifying r as the engine and the example server route it.
func (v *Validator) route(r *http.Request) (string, map[string]string, error) {
	p, q := r.URL.Path, r.URL.Query()
	switch {
	case p == "/healthz" || p == "/readyz" || p == "/metrics" || p == "/openapi.json":
		return p, nil, nil
	case p == "/__ds/jwks.json" && r.URL.RawQuery == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return p, nil, nil // other requests of it are the stream protocol's
	case strings.HasPrefix(p, "/__ds/subscriptions/"):
		// The reserved API at the stream root "" (the root tests' engine).
		rest := strings.TrimPrefix(r.URL.EscapedPath(), "/__ds/subscriptions/")
		id, op, _ := strings.Cut(rest, "/")
		params := map[string]string{"id": id}
		switch {
		case op == "":
			return "/__ds/subscriptions/{id}", params, nil
		case strings.HasPrefix(op, "streams/"):
			params["path"] = strings.TrimPrefix(op, "streams/")
			return "/__ds/subscriptions/{id}/streams/{path}", params, nil
		}
		return "/__ds/subscriptions/{id}/" + op, params, nil
	case strings.HasPrefix(p, "/callback/"):
		return "/callback/{consumer_id}", map[string]string{"consumer_id": strings.TrimPrefix(p, "/callback/")}, nil
	case q.Has("subscription") || q.Has("subscriptions"):
		params := map[string]string{"pattern": p}
		if !q.Has("subscription") {
			return "/{pattern}?subscriptions", params, nil
		}
		for _, op := range operators {
			if q.Has(op) {
				return "/{pattern}?" + op, params, nil
			}
		}
		if q.Has("consumer") {
			return "/{pattern}?consumer", params, nil
		}
		return "/{pattern}?subscription", params, nil
	}
	if rest, ok := strings.CutPrefix(p, "/inbox/"); ok {
		if rest != "" && !strings.Contains(rest, "/") {
			return "/inbox/{provider}", map[string]string{"provider": rest}, nil
		}
		if provider, ok := strings.CutSuffix(rest, "/dead"); ok && q.Has("replay") {
			return "/inbox/{provider}/dead?replay", map[string]string{"provider": provider}, nil
		}
		// A POST below a provider is a delivery, but for its streams'.
		provider, below, _ := strings.Cut(rest, "/")
		kind, _, _ := strings.Cut(below, "/")
		if r.Method == http.MethodPost && v.providers[provider] && kind != "records" && kind != "dead" {
			return "/inbox/{provider}/{path}", map[string]string{"provider": provider, "path": below}, nil
		}
	}
	return "", nil, errNotAPI
}

// Check validates the exchange of r, whose body was reqBody, and the
// response with status, header and body. It returns nil for a request the
// document does not cover (the stream protocol), and an error for an
// engine route the document lacks or an exchange it does not allow.
func (v *Validator) Check(r *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	key, params, err := v.route(r)
	if errors.Is(err, errNotAPI) {
		return nil
	}
	item := v.doc.Paths.Value(key)
	var op *openapi3.Operation
	if item != nil {
		op = item.GetOperation(r.Method)
	}
	if op == nil {
		if status == http.StatusMethodNotAllowed || status == http.StatusUnauthorized {
			// A method the route refuses, as it should; without the API
			// token, before saying which methods it serves.
			return nil
		}
		return fmt.Errorf("%s %s: route %q has no %s in the OpenAPI document", r.Method, r.URL, key, r.Method)
	}
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if len(reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		// The engine reads a body as JSON whatever its type says.
		req.Header.Set("Content-Type", "application/json")
	}
	// The flags of the subscription API are bare ("&dead"); the document
	// declares them with empty values allowed.
	req.URL = &url.URL{Path: r.URL.Path, RawQuery: r.URL.Query().Encode()}
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      &routers.Route{Spec: v.doc, Path: key, PathItem: item, Method: r.Method, Operation: op},
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	var errs []error
	if status < 400 {
		// A refused request is one the document need not allow.
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			errs = append(errs, fmt.Errorf("request: %w", err))
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
		errs = append(errs, fmt.Errorf("response %d %.300s: %w", status, body, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s %s: %w", r.Method, r.URL, errors.Join(errs...))
	}
	return nil
}

// Transport is an http.RoundTripper that checks every exchange through
// Base against the document, failing t on a mismatch.
type Transport struct {
	Base      http.RoundTripper
	Validator *Validator
	T         testing.TB
}

// NewTransport returns a Transport over base, or http.DefaultTransport if
// base is nil.
func NewTransport(t testing.TB, base http.RoundTripper) *Transport {
	t.Helper()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{Base: base, Validator: v, T: t}
}

// RoundTrip sends r and checks the exchange.
func (tr *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	var reqBody []byte
	if r.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := tr.Base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if _, _, rerr := tr.Validator.route(r); rerr != nil {
		return resp, nil // not an engine route: a long-poll may stream
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := tr.Validator.Check(r, reqBody, resp.StatusCode, resp.Header, body); err != nil {
		tr.T.Errorf("OpenAPI: %v", err)
	}
	return resp, nil
}

// shared is the one Validator that Handler uses: the document is loaded
// and validated once per test binary, not once per handler.
var shared = sync.OnceValues(New)

// Handler returns next behind a check of every exchange against the
// document, failing t on a mismatch: the server side of Transport, for
// tests that call a handler directly or serve it with httptest. Requests
// the document does not cover go straight to next.
func Handler(t testing.TB, next http.Handler) http.Handler {
	t.Helper()
	v, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := v.route(r); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		var reqBody []byte
		if r.Body != nil {
			var err error
			if reqBody, err = io.ReadAll(r.Body); err != nil {
				http.Error(w, "reading the request body", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if err := v.Check(r, reqBody, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("OpenAPI: %v", err)
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}
