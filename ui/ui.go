// Package ui is an operator's screen for a webhook engine: an http.Handler
// that a host mounts beside its own routes, under a prefix of its choice.
// It shows subscriptions with their health and consumers, one consumer's
// streams and delivery log, the dead letters of every subscription and,
// when the host mounts one, the inbox; and it pauses, resumes, tests,
// rotates, rewinds, revives, replays, and verifies pending subscriptions.
//
// Pages are rendered on the server; every asset is embedded, so the screen
// needs no network beyond its host. Its one script polls the subscription
// and consumer pages for their counts and states. Every request passes the
// engine's Authorizer (webhooks.WithAuthorizer), as a read or as the
// operation it performs. With webhooks.WithTenancy, each request acts
// within its tenant (Engine.TenantContext): a tenant's screen shows and
// acts on that tenant's subscriptions only, and not the inbox, which is
// the operator's; a request of no tenant sees them all. Actions are POSTs, refused unless a browser says
// they come from the screen's own origin; and the pages show nothing that
// the subscription API hides: no secret and no custom header value.
package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the screen's own script, styles and
// images, and nothing inline or from elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Option configures New.
type Option func(*Handler) error

// WithInbox shows the inbox the host mounts (package inbox), and replays
// its dead letters.
func WithInbox(in *Inbox) Option {
	return func(h *Handler) error {
		if in == nil || in.Streams == nil || in.Processor == nil || len(in.Providers) == 0 {
			return errors.New("ui: WithInbox needs streams, a processor and providers")
		}
		h.inbox = in
		return nil
	}
}

// WithLogger sets where failures are logged; the page says only that
// something failed. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(h *Handler) error {
		if l == nil {
			return errors.New("ui: WithLogger: logger is nil")
		}
		h.log = l
		return nil
	}
}

// Handler serves the operator's screen. Make one with New.
type Handler struct {
	engine *webhooks.Engine
	prefix string
	inbox  *Inbox
	log    *slog.Logger
	pages  map[string]*template.Template
	mux    *http.ServeMux
}

// New returns the screen of engine, mounted at prefix: a path such as
// "/ui" under which the host routes every request to it, unstripped.
func New(engine *webhooks.Engine, prefix string, opts ...Option) (*Handler, error) {
	if engine == nil {
		return nil, errors.New("ui: engine is nil")
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" && !strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("ui: prefix %q does not start with '/'", prefix)
	}
	h := &Handler{engine: engine, prefix: prefix, log: slog.Default()}
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.routes()
	return h, nil
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template)
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", name)
		if err != nil {
			return nil, err
		}
		pages[base] = t
	}
	return pages, nil
}

// routes registers the screen's pages, live reads and actions.
func (h *Handler) routes() {
	m := http.NewServeMux()
	p := h.prefix
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET "+p+"/static/", h.read(http.StripPrefix(p+"/static/", http.FileServerFS(static))))
	m.Handle("GET "+p+"/{$}", h.read(http.HandlerFunc(h.subscriptionsPage)))
	m.HandleFunc("GET "+p+"/subscription", h.subscriptionPage)
	m.HandleFunc("GET "+p+"/subscription/live", h.subscriptionLive)
	m.HandleFunc("GET "+p+"/consumer", h.consumerPage)
	m.HandleFunc("GET "+p+"/consumer/live", h.consumerLive)
	m.Handle("GET "+p+"/dead", h.read(http.HandlerFunc(h.deadPage)))
	m.HandleFunc("POST "+p+"/subscription/pause", h.pause)
	m.HandleFunc("POST "+p+"/subscription/resume", h.resume)
	m.HandleFunc("POST "+p+"/subscription/test", h.test)
	m.HandleFunc("POST "+p+"/subscription/rotate", h.rotate)
	m.HandleFunc("POST "+p+"/subscription/rewind", h.rewind)
	m.HandleFunc("POST "+p+"/subscription/verify", h.verify)
	m.HandleFunc("POST "+p+"/subscription/challenge", h.challenge)
	m.HandleFunc("POST "+p+"/consumer/revive", h.revive)
	m.Handle("GET "+p+"/inbox", h.inboxRead(http.HandlerFunc(h.inboxPage)))
	m.Handle("POST "+p+"/inbox/replay", h.inboxOperate(http.HandlerFunc(h.replay)))
	h.mux = m
}

// ServeHTTP answers a request under the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := sameOrigin(r); err != nil {
			h.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
	}
	// Every Go call of the screen then acts within the request's tenant.
	ctx, err := h.engine.TenantContext(r)
	if err != nil {
		h.refuse(w, r, "", "", err)
		return
	}
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// crossOrigin refuses requests that a browser says come from another
// origin.
var crossOrigin = http.NewCrossOriginProtection()

// sameOrigin admits an action only if the browser that sent it says it
// comes from this origin. http.CrossOriginProtection lets through requests
// that carry neither Sec-Fetch-Site nor Origin, as non-browser clients
// send them; the screen's forms always come from a browser, which sends
// Origin with every POST, so such requests are refused too.
func sameOrigin(r *http.Request) error {
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		return errors.New("this action must come from the operator screen in a browser")
	}
	if crossOrigin.Check(r) != nil {
		return errors.New("this action came from another site and was refused")
	}
	return nil
}

// allowed runs the engine's Authorizer and, if it refuses, answers the
// request.
func (h *Handler) allowed(w http.ResponseWriter, r *http.Request, op webhooks.Operation, id string) bool {
	err := h.engine.Authorize(r, op, id)
	if err == nil {
		return true
	}
	h.refuse(w, r, op, id, err)
	return false
}

// refuse answers a request that the Authorizer, or the tenant's lookup,
// refused with err.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, op webhooks.Operation, id string, err error) {
	switch {
	case errors.Is(err, webhooks.ErrUnauthorized):
		w.Header().Set("WWW-Authenticate", "Bearer")
		h.fail(w, r, http.StatusUnauthorized, "Authentication required.")
	case errors.Is(err, webhooks.ErrForbidden):
		h.fail(w, r, http.StatusForbidden, "You may not do this.")
	default:
		h.log.ErrorContext(r.Context(), "ui: authorizing", "operation", op, "subscription", id, "error", err)
		h.fail(w, r, http.StatusInternalServerError, "Something failed; it is logged.")
	}
}

// read admits requests that the Authorizer allows as a listing.
func (h *Handler) read(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, webhooks.OpList, "") {
			next.ServeHTTP(w, r)
		}
	})
}
