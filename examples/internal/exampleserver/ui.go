package exampleserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"html/template"
	"net/http"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/ui"
)

// UIPrefix is where the operator's screen (package ui) is mounted. Paths
// under it are the screen's: no stream can be there.
const UIPrefix = "/ui"

// uiCookie holds an operator's session: a MAC of the API token, which
// proves that the browser was given the token, without being the token.
const uiCookie = "streamhooks_ui"

// withUI returns next with the operator's screen at UIPrefix. With an API
// token the screen admits a request that carries it as its bearer token,
// or the session cookie that the login form at UIPrefix/login sets; a
// browser without either is sent to the form.
func withUI(engine *webhooks.Engine, next http.Handler, apiToken string, in *ui.Inbox) (http.Handler, error) {
	var opts []ui.Option
	if in != nil {
		opts = append(opts, ui.WithInbox(in))
	}
	screen, err := ui.New(engine, UIPrefix, opts...)
	if err != nil {
		return nil, err
	}
	login := &uiLogin{token: apiToken, session: sessionValue(apiToken)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == UIPrefix:
			http.Redirect(w, r, UIPrefix+"/", http.StatusMovedPermanently)
		case !strings.HasPrefix(r.URL.Path, UIPrefix+"/"):
			next.ServeHTTP(w, r)
		case apiToken == "":
			screen.ServeHTTP(w, r)
		case r.URL.Path == UIPrefix+"/login":
			login.ServeHTTP(w, r)
		case r.Header.Get("Authorization") != "":
			screen.ServeHTTP(w, r)
		case login.valid(r):
			// The engine's Authorizer checks the bearer token, so a
			// session is shown to it as one.
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+apiToken)
			screen.ServeHTTP(w, r)
		case r.Method == http.MethodGet:
			http.Redirect(w, r, UIPrefix+"/login", http.StatusSeeOther)
		default:
			screen.ServeHTTP(w, r) // refused by the Authorizer
		}
	}), nil
}

// uiInbox is the inbox as the screen shows it, or nil without one.
func uiInbox(providers []inbox.Provider, streams *dstream.Server, p *inbox.Processor) *ui.Inbox {
	if p == nil {
		return nil
	}
	return &ui.Inbox{Providers: providers, Streams: streams, Processor: p}
}

// sessionValue is the session cookie's value for token.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("streamhooks ui session"))
	return hex.EncodeToString(m.Sum(nil))
}

// uiLogin serves the login form and checks sessions.
type uiLogin struct {
	token, session string
}

// valid reports whether r carries the session cookie.
func (l *uiLogin) valid(r *http.Request) bool {
	c, err := r.Cookie(uiCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(l.session)) == 1
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · streamhooks</title></head>
<body><main>
<h1>streamhooks operator screen</h1>
{{if .}}<p id="error">{{.}}</p>{{end}}
<form method="post" action="` + UIPrefix + `/login">
<label>API token <input id="token" name="token" type="password" autocomplete="current-password" autofocus></label>
<button id="signin" type="submit">Sign in</button>
</form>
</main></body></html>
`))

// loginProtection refuses a login posted from another site, so that no
// site can sign a browser in to a session of its choosing.
var loginProtection = http.NewCrossOriginProtection()

func (l *uiLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet:
		_ = loginPage.Execute(w, "")
	case http.MethodPost:
		if loginProtection.Check(r) != nil {
			http.Error(w, "cross-site login refused", http.StatusForbidden)
			return
		}
		given := sha256.Sum256([]byte(r.PostFormValue("token")))
		want := sha256.Sum256([]byte(l.token))
		if subtle.ConstantTimeCompare(given[:], want[:]) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, "That is not the API token.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: l.session, Path: UIPrefix + "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, UIPrefix+"/", http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "use GET or POST", http.StatusMethodNotAllowed)
	}
}
