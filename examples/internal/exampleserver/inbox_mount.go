package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

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
//   - /inbox/{provider}, and POST to /inbox/{provider}/{path...} but for
//     the stream paths below: deliveries, whose path below the provider
//     and query are the record's (inbox.Record.Path, Query);
//   - GET and HEAD of /inbox/{provider}/records and /dead, with the API
//     token: the stream protocol's reads;
//   - GET /inbox/{provider}?status=pending|done|dead[&from][&limit], with
//     the API token: an operator's listing (inbox.Admin);
//   - POST /inbox/{provider}/dead?replay={delivery_id}, or
//     ?replay&offset={offset}, with the API token: an operator's replay of
//     the dead letter the dead-letter stream holds. A body is never read,
//     so a forged dead letter, whatever its received_at, is never
//     replayed.
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
	providers []inbox.Provider, processor *inbox.Processor, cfg Config, log *slog.Logger) (http.Handler, []string, error) {
	apiToken := cfg.APIToken
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
	for _, sub := range inboxSubscriptions {
		_, err := engine.CreateSubscription(ctx, &webhooks.Subscription{
			ID: sub.id, Pattern: sub.pattern, Delivery: webhooks.DeliveryHandler, Handler: inboxHandler,
			Events: &webhooks.EventsOptions{MaxBatchEvents: 1, MaxBatchBytes: webhooks.DefaultMaxBatchBytes, Timeout: 5 * time.Second},
			Retry:  &webhooks.RetryPolicy{MaxAttempts: webhooks.DefaultMaxAttempts},
		}, webhooks.OffsetNone)
		switch {
		case errors.Is(err, webhooks.ErrSubscriptionExists):
			report("the subscription %q exists with another configuration, created before its ID was reserved; records are stored but not processed until an operator deletes it and restarts the server", sub.id)
		case err != nil:
			return nil, nil, fmt.Errorf("creating the inbox's subscription: %w", err)
		}
	}
	opts := []inbox.Option{inbox.WithLogger(log)}
	if cfg.InboxRetention {
		opts = append(opts, inbox.WithDailyPartitions())
	}
	h, err := inbox.New(newInboxAppender(streams), usable, opts...)
	if err != nil {
		return nil, nil, err
	}
	admin := processor.Admin(streams, inboxCursor(engine))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, inboxPrefix)
		name, below, nested := strings.Cut(rest, "/")
		kind, _, _ := strings.Cut(below, "/")
		stream := kind == "records" || kind == "dead"
		switch {
		case !ok:
			next.ServeHTTP(w, r)
		case !known[name] && !nested:
			h.ServeHTTP(w, r) // 404, in the inbox's words
		case known[name] && !nested && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			if guarded(w, r, apiToken) {
				admin.Handler(name).ServeHTTP(w, r)
			}
		case known[name] && !stream && (!nested || r.Method == http.MethodPost) && !slices.ContainsFunc(usable, func(p inbox.Provider) bool { return p.Name == name }):
			w.Header().Set("Retry-After", "60")
			writeAPIError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "this inbox cannot store deliveries now; retry later")
		case known[name] && !stream && (!nested || r.Method == http.MethodPost):
			h.ServeHTTP(w, r)
		case !known[name] || !stream:
			next.ServeHTTP(w, r)
		case below == "dead" && r.Method == http.MethodPost && r.URL.Query().Has("replay"):
			if guarded(w, r, apiToken) {
				admin.Handler(name).ServeHTTP(w, r)
			}
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			if guarded(w, r, apiToken) {
				streams.ServeHTTP(w, r)
			}
		default:
			writeAPIError(w, http.StatusForbidden, codeForbidden, "the inbox's streams are written only by the inbox")
		}
	}), problems, nil
}

// guarded reports whether r may reach the inbox's operator routes, and
// answers it if not.
func guarded(w http.ResponseWriter, r *http.Request, apiToken string) bool {
	if apiToken != "" && !hasToken(r, apiToken) {
		refuse(w, "the inbox's streams need the API token")
		return false
	}
	return true
}

// inboxCursor is the processor subscription's acknowledged offset of a
// records stream: where the inbox's records stop being pending.
func inboxCursor(engine *webhooks.Engine) inbox.Cursor {
	return func(ctx context.Context, stream string) (string, error) {
		id := inboxHandler
		if strings.Count(stream, "/") > 3 { // /inbox/{provider}/records/{day}
			id = inboxPartitions
		}
		c, err := engine.Consumer(ctx, webhooks.ConsumerID(id, stream))
		if errors.Is(err, webhooks.ErrConsumerNotFound) {
			return webhooks.OffsetNone, nil
		}
		if err != nil {
			return "", err
		}
		for _, s := range c.Streams {
			if s.Path == stream {
				return s.Offset, nil
			}
		}
		return webhooks.OffsetNone, nil
	}
}

// inboxSubscriptions are the processor's: one of the unpartitioned
// records streams, as data directories written before partitions have it,
// and one of their daily partitions (Config.InboxRetention). Two, not one
// wider pattern, because a subscription's pattern cannot be widened in
// place: the engine matches new streams by the pattern it started with.
var inboxSubscriptions = []struct{ id, pattern string }{
	{inboxHandler, "/inbox/*/records"},
	{inboxPartitions, "/inbox/*/records/*"},
}

// inboxPartitions is the ID of the subscription of the records'
// partitions.
const inboxPartitions = "inbox-partitions"

// inboxAppender appends to the inbox's streams, creating a day's partition
// (inbox.WithDailyPartitions) on its first append.
type inboxAppender struct {
	streams *dstream.Server
	created sync.Map // the streams known to exist
}

func newInboxAppender(streams *dstream.Server) *inboxAppender {
	return &inboxAppender{streams: streams}
}

// Append implements inbox.Appender.
func (a *inboxAppender) Append(ctx context.Context, stream string, record []byte) error {
	if _, ok := a.created.Load(stream); !ok {
		if err := a.streams.Create(ctx, stream, "application/json"); err != nil {
			return err
		}
		a.created.Store(stream, true)
	}
	return a.streams.Append(ctx, stream, record)
}

// sweepInbox runs processor's retention sweep each hour of clk, until the
// function it returns is called, which waits for a sweep in progress.
func sweepInbox(engine *webhooks.Engine, streams *dstream.Server, processor *inbox.Processor, clk clock.Clock, log *slog.Logger) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tick := clk.Ticker(time.Hour)
	go func() {
		defer close(done)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := processor.Sweep(ctx, streams, inboxCursor(engine), streams, inbox.Retention{}); err != nil {
					log.ErrorContext(ctx, "inbox: the retention sweep failed; it runs again in an hour", "error", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
