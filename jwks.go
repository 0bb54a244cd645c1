package webhooks

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// jwksMaxAge is how long a receiver may cache the JWKS, in seconds: the
// protocol's example. A new key need not wait for it, since a receiver
// refetches when it meets a kid it has not cached.
const jwksMaxAge = 300

// JWKSHandler returns the handler of the engine's JSON Web Key Set: the
// public keys that verify SignatureEd25519 deliveries, the one that signs
// now and those that signed or will soon sign (RotateWebhookKey). Mount
// it at "{stream root}/__ds/jwks.json", where the Durable Streams protocol
// puts it. It answers GET and HEAD, needs no authorization, and until
// Start has loaded the keys answers 503.
func (e *Engine) JWKSHandler() http.Handler {
	return http.HandlerFunc(e.serveJWKS)
}

func (e *Engine) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		e.writeError(w, r, &methodError{allow: "GET, HEAD"})
		return
	}
	if err := e.checkLoaded(); err != nil {
		e.writeError(w, r, err)
		return
	}
	body, err := json.Marshal(webhooksig.JWKS{Keys: e.keys.published(e.clock.Now())})
	if err != nil {
		e.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(jwksMaxAge))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}
