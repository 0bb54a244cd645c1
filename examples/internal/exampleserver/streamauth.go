package exampleserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
)

// The codes of the engine's one error shape that these routes answer.
const (
	codeUnauthorized       string = "UNAUTHORIZED"
	codeForbidden          string = "FORBIDDEN"
	codeServiceUnavailable string = "SERVICE_UNAVAILABLE"
)

// inboxPrefix is the inbox's part of the stream namespace. The public
// stream API never serves a path under it, whether or not the inbox is
// mounted, so that no client can create, fill or delete a stream there
// that the inbox would later trust or stumble on.
const inboxPrefix = "/inbox/"

// guardStreams admits stream requests to streams: none under inboxPrefix,
// and, with a token, only those that carry it, unless public.
func guardStreams(streams http.Handler, token string, public bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, inboxPrefix):
			writeAPIError(w, http.StatusForbidden, codeForbidden,
				"streams under /inbox/ are the inbox's: they are read at the inbox's routes, with the API token, and written only by the inbox")
		case token != "" && !public && !hasToken(r, token):
			refuse(w, "streams need the API token")
		default:
			streams.ServeHTTP(w, r)
		}
	})
}

// apiAuthorizer guards the subscription API: with a token, every request
// must carry it or a tenant's (then Config.TenantTokens scopes it); and the inbox's subscription ID is reserved, so that no
// request can create it, or change it into one the inbox's start-up would
// conflict with. It may be read and operated (rewind, revive), and deleted
// by an operator: the next start creates it again.
func apiAuthorizer(token string, tenantTokens map[string]string) webhooks.Authorizer {
	return func(r *http.Request, op webhooks.Operation, id string) error {
		if token != "" && !hasToken(r, token) && !hasTenantToken(r, tenantTokens) {
			return webhooks.ErrUnauthorized
		}
		if (id == inboxHandler || id == inboxPartitions) && (op == webhooks.OpCreate || op == webhooks.OpUpdate) {
			return webhooks.ErrForbidden
		}
		return nil
	}
}

// hasTenantToken reports whether r carries one of tokens' tokens.
func hasTenantToken(r *http.Request, tokens map[string]string) bool {
	for _, t := range tokens {
		if hasToken(r, t) {
			return true
		}
	}
	return false
}

// hasToken reports whether r carries token as its bearer token. Both sides
// are hashed before the constant-time comparison, so that neither the
// token nor its length leaks through timing.
func hasToken(r *http.Request, token string) bool {
	want := sha256.Sum256([]byte(token))
	scheme, given, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(given))
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// refuse answers 401 with a Bearer challenge.
func refuse(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	writeAPIError(w, http.StatusUnauthorized, codeUnauthorized, message)
}

// writeAPIError answers in the engine's one JSON error shape.
func writeAPIError(w http.ResponseWriter, status int, code string, message string) {
	var body struct {
		OK    bool `json:"ok"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = code, message
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
