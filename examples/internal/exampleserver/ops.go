package exampleserver

import (
	"log/slog"
	"net/http"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/openapi"
)

// Operator routes, served without the API token: probes and scrapers
// carry none, and webhook receivers fetch the JWKS.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	OpenAPIPath = "/openapi.json"
	// JWKSPath serves the public keys of Ed25519 webhook signatures, at
	// the stream root's reserved "__ds" prefix, where the Durable Streams
	// protocol puts it: this server's streams live at the root.
	JWKSPath = "/__ds/jwks.json"
)

// opsHandler serves the operator routes and passes every other request to
// next. They are exact paths, so streams may still live under them.
func opsHandler(engine *webhooks.Engine, metrics http.Handler, log *slog.Logger, next http.Handler) http.Handler {
	routes := map[string]http.Handler{
		MetricsPath: metrics,
		OpenAPIPath: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(openapi.Document)
		}),
		HealthzPath: probe(log, "liveness", func(r *http.Request) error { return engine.Live() }),
		ReadyzPath:  probe(log, "readiness", func(r *http.Request) error { return engine.Ready(r.Context()) }),
		JWKSPath:    engine.JWKSHandler(),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := routes[r.URL.Path]
		if !ok || r.URL.RawQuery != "" || r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// probe answers 200 {"status":"ok"} while check passes, and 503
// {"status":"unavailable"} otherwise, logging why rather than telling an
// unauthenticated caller.
func probe(log *slog.Logger, name string, check func(*http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(r); err != nil {
			log.WarnContext(r.Context(), "exampleserver: "+name+" check failed", "error", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
}
