package webhooks_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// An authorizer that lets an admin token do anything and a read-only token
// only read and list. Requests without a known token get 401 with
// "WWW-Authenticate: Bearer"; a read-only token that tries to change
// something gets 403.
func ExampleWithAuthorizer() {
	ctx := context.Background()
	tokenOf := func(r *http.Request) string {
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	is := func(got, want string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 }
	authorize := func(r *http.Request, op webhooks.Operation, _ string) error {
		switch token := tokenOf(r); {
		case is(token, "admin-token"):
			return nil
		case is(token, "reader-token"):
			if op == webhooks.OpRead || op == webhooks.OpList {
				return nil
			}
			return webhooks.ErrForbidden
		default:
			return webhooks.ErrUnauthorized
		}
	}
	e, err := webhooks.New(memstore.New(), &exampleSource{streams: map[string]int{}},
		webhooks.WithCallbackBaseURL("https://streams.example.com"),
		webhooks.WithAuthorizer(authorize))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Stop(ctx) }()
	api := e.SubscriptionHandler()

	send := func(method, target, token string) {
		req := httptest.NewRequest(method, target, strings.NewReader(`{"webhook":"https://hooks.example.com/orders"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		fmt.Printf("%s as %q: %d", method, token, rec.Code)
		if challenge := rec.Header().Get("WWW-Authenticate"); challenge != "" {
			fmt.Print(", WWW-Authenticate: ", challenge)
		}
		fmt.Println()
	}
	send(http.MethodGet, "/**?subscriptions", "")
	send(http.MethodPut, "/orders/*?subscription=orders", "reader-token")
	send(http.MethodPut, "/orders/*?subscription=orders", "admin-token")
	send(http.MethodGet, "/**?subscriptions", "reader-token")
	// Output:
	// GET as "": 401, WWW-Authenticate: Bearer
	// PUT as "reader-token": 403
	// PUT as "admin-token": 201
	// GET as "reader-token": 200
}
