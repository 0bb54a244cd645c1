package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/inbox"
)

// inboxStreams are the kinds of a provider's streams:
// /inbox/{provider}/{kind}.
var inboxStreams = []string{"records", "dead"}

// mountInbox creates the providers' inbox and dead-letter streams and the
// processor's subscription, and returns the handler of the inbox's routes,
// which passes every other request to next, and the problems it worked
// around. The routes are
//   - /inbox/{provider}: deliveries;
//   - GET and HEAD of /inbox/{provider}/records and /dead, with the API
//     token: the stream protocol's reads;
//   - POST /inbox/{provider}/dead?replay, with the API token: an
//     operator's replay of a dead letter.
//
// Nothing else writes the inbox's streams, so a record's fields, its
// ReceivedAt among them, are the inbox's own. The engine's handler sees
// requests first, so subscription requests for patterns such as /inbox/*
// still reach the engine.
//
// Data clients wrote before /inbox/ and the subscription ID were reserved
// may conflict with the inbox's: a provider whose stream exists with
// another content type refuses deliveries with 503, so that its senders
// retry, and a subscription "inbox" configured otherwise leaves the records
// stored but unprocessed, until an operator deletes it and restarts the
// server. Each is logged and returned; neither fails the start.
func mountInbox(ctx context.Context, engine *webhooks.Engine, streams *dstream.Server, next http.Handler,
	providers []inbox.Provider, processor *inbox.Processor, apiToken string, log *slog.Logger) (http.Handler, []string, error) {
	var problems []string
	report := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
		log.ErrorContext(ctx, "inbox: "+problems[len(problems)-1])
	}
	known := make(map[string]bool, len(providers))
	var usable []inbox.Provider
	for _, p := range providers {
		known[p.Name] = true
		ok := true
		for _, kind := range inboxStreams {
			path := inboxPrefix + p.Name + "/" + kind
			err := streams.Create(ctx, path, "application/json")
			switch {
			case errors.Is(err, dstream.ErrContentTypeConflict):
				report("the stream %s exists with another content type, created before /inbox/ was reserved; deliveries to %s are refused with 503 until it is moved away", path, p.Name)
				ok = false
			case err != nil:
				return nil, nil, fmt.Errorf("creating the inbox stream %s: %w", path, err)
			}
		}
		if ok {
			usable = append(usable, p)
		}
	}
	// One record a batch, so that each gets every attempt (inbox.Processor);
	// from the streams' start, so that no record is skipped. Processing is
	// in process and quick: a batch a crash left in flight is retried
	// after 5 s, not after a webhook's 30.
	_, err := engine.CreateSubscription(ctx, &webhooks.Subscription{
		ID: inboxHandler, Pattern: "/inbox/*/records", Delivery: webhooks.DeliveryHandler, Handler: inboxHandler,
		Events: &webhooks.EventsOptions{MaxBatchEvents: 1, MaxBatchBytes: webhooks.DefaultMaxBatchBytes, Timeout: 5 * time.Second},
		Retry:  &webhooks.RetryPolicy{MaxAttempts: webhooks.DefaultMaxAttempts},
	}, webhooks.OffsetNone)
	switch {
	case errors.Is(err, webhooks.ErrSubscriptionExists):
		report("the subscription %q exists with another configuration, created before its ID was reserved; records are stored but not processed until an operator deletes it and restarts the server", inboxHandler)
	case err != nil:
		return nil, nil, fmt.Errorf("creating the inbox's subscription: %w", err)
	}
	h, err := inbox.New(streams, usable, inbox.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	replay := processor.ReplayHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, inboxPrefix)
		name, kind, nested := strings.Cut(rest, "/")
		switch {
		case !ok:
			next.ServeHTTP(w, r)
		case !nested && known[name] && !slices.ContainsFunc(usable, func(p inbox.Provider) bool { return p.Name == name }):
			w.Header().Set("Retry-After", "60")
			writeAPIError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "this inbox cannot store deliveries now; retry later")
		case !nested:
			h.ServeHTTP(w, r)
		case !known[name] || (kind != "records" && kind != "dead"):
			next.ServeHTTP(w, r)
		case apiToken != "" && !hasToken(r, apiToken):
			refuse(w, "the inbox's streams need the API token")
		case kind == "dead" && r.Method == http.MethodPost && r.URL.Query().Has("replay"):
			replay.ServeHTTP(w, r)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			streams.ServeHTTP(w, r)
		default:
			writeAPIError(w, http.StatusForbidden, codeForbidden, "the inbox's streams are written only by the inbox")
		}
	}), problems, nil
}
