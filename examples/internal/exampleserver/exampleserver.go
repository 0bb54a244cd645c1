// Package exampleserver runs a Durable Streams server with the webhook
// engine mounted, in memory, on a data directory, or in a PostgreSQL
// database that several servers share. It is the wiring that
// examples/streamserver, the demo and the end-to-end tests share, so that
// what the tests exercise is what the example runs.
package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// Config configures Start.
type Config struct {
	// Addr is the TCP listen address; "127.0.0.1:0" picks a free port.
	Addr string
	// CallbackBase is the public base URL of the callback API, as consumers
	// reach it. Empty means the server's own URL.
	CallbackBase string
	// Dev allows webhooks on loopback addresses over plain http, which the
	// engine refuses by default as an SSRF risk.
	Dev bool
	// Logger receives the server's and the engine's logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// EngineOptions are added to the engine's options.
	EngineOptions []webhooks.Option
	// Store holds the engine's subscriptions and consumers; nil means a
	// SQLite store in DataDir, or a new memstore without one. The benchmark
	// program selects it.
	Store webhooks.Store
	// DataDir, if set, keeps the streams and, unless Store is set, the
	// engine's state in this directory, so that both survive a restart.
	DataDir string
	// Postgres, if set, is the DSN of a PostgreSQL database that keeps the
	// streams and, unless Store is set, the engine's state (pgstore), so
	// that they survive a restart and several servers on the database
	// serve the same streams and subscriptions. It excludes DataDir.
	Postgres string
	// APIToken, if set, is the bearer token every subscription API request
	// and, unless PublicStreams, every stream request must carry; others
	// get 401. Empty leaves both open to anyone who can reach the address,
	// and Start logs a warning. Callbacks are not affected: their own
	// tokens authenticate them.
	APIToken string
	// TenantTokens maps tenants to their API tokens (webhooks.WithTenancy):
	// a request with a tenant's token sees and changes only that tenant's
	// subscriptions, which keep to TenantPrefix + tenant + "/**"; one with
	// the APIToken, which it needs, sees every tenant's. The tenants'
	// tokens open the subscription API and the operator's screen only:
	// streams, and the screen's login form, take the APIToken.
	TenantTokens map[string]string
	// TenantMaxSubscriptions, if positive, bounds each tenant's
	// subscriptions. It needs TenantTokens.
	TenantMaxSubscriptions int
	// PublicStreams leaves streams open to anyone, with an APIToken for the
	// subscription API only. Streams under /inbox/ are never public (see
	// Inbox).
	PublicStreams bool
	// EncryptionKey, if set, seals webhook secrets and the token key in the
	// store Start opens in DataDir (sqlitestore.WithEncryptionKey) or
	// Postgres (pgstore.WithEncryptionKey). It needs one of them and no
	// Store.
	EncryptionKey []byte
	// Inbox mounts an inbox (package inbox) at /inbox/{provider} for the
	// providers "github" and "standard" (Standard Webhooks). Each appends
	// its deliveries to the JSON stream /inbox/{provider}/records, which
	// Start creates. A Processor processes the records through the handler
	// subscription "inbox", which Start creates if it is missing, and logs
	// each; dead letters go to the JSON stream /inbox/{provider}/dead.
	// Those streams are read with GET and HEAD at their paths, with the
	// APIToken, and written only by the inbox. Whether or not Inbox is
	// set, the stream API serves no path under /inbox/, and the
	// subscription API creates and updates no subscription "inbox".
	Inbox bool
	// InboxSecrets maps an inbox provider to the secret its deliveries are
	// signed with, which verifies its records when they are processed. It
	// needs Inbox.
	InboxSecrets map[string]string
	// InboxHandler, if set, processes each verified record after it is
	// logged; its error leaves the record to be tried again. A host that
	// embeds the server, such as a demo, sets it.
	InboxHandler inbox.RecordHandler

	// StreamRoot is the path under which the reserved `__ds` API of the
	// Durable Streams protocol is served, "{StreamRoot}/__ds/", and to
	// which the stream paths in its bodies are relative
	// (webhooks.WithStreamRoot); "" is the origin's root. Streams are
	// served at every path, under it or not.
	StreamRoot string

	// SubscriptionMetrics, if positive, labels the delivery metrics with
	// the first SubscriptionMetrics subscriptions, the rest as "other"
	// (webhooks.WithSubscriptionMetrics).
	SubscriptionMetrics int

	// InboxRetention partitions the inbox's records and dead letters by
	// day, "/inbox/{provider}/records/{yyyy-mm-dd}" and
	// ".../dead/{yyyy-mm-dd}" (inbox.WithDailyPartitions), and deletes,
	// each hour, the partitions past seed 003's retention: processed
	// records after 7 days, dead letters after 30 (inbox.Processor.Sweep).
	// The unpartitioned streams of a data directory written without it
	// are still processed, listed and read; they are never deleted. It
	// needs Inbox.
	InboxRetention bool
}

// inboxSchemes make the Scheme of each inbox provider from its secret.
var inboxSchemes = map[string]func(secret string) inbox.Scheme{
	"github":   func(s string) inbox.Scheme { return inbox.GitHub{Secret: s} },
	"standard": func(s string) inbox.Scheme { return inbox.StandardWebhooks{Secret: s} },
}

// Timeouts of the HTTP server. A long-poll read waits up to
// dstream.DefaultLongPollTimeout before its response is written, and
// net/http counts that wait against both ReadTimeout (whose expiry cancels
// the request's context, ending the long-poll early) and WriteTimeout, so
// both exceed it, with margin for writing a large response.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = dstream.DefaultLongPollTimeout + 30*time.Second
	WriteTimeout      = dstream.DefaultLongPollTimeout + 30*time.Second
	IdleTimeout       = 2 * time.Minute
)

// Running is a started server. Call Close, once, to stop it.
type Running struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8787. Streams,
	// the subscription API and the callback API are all under it.
	URL string
	// Store holds the engine's subscriptions and consumers; tests and the
	// demo read consumer state from it.
	Store webhooks.Store
	// Problems lists what Start found wrong in data that clients wrote
	// before it could refuse it, and worked around instead of failing;
	// each is also logged at ERROR.
	Problems []string

	streams *dstream.Server
	owned   io.Closer // the store or database pool Start opened, if any
	engine  *webhooks.Engine
	tel     *telemetry
	// stopSweep stops the inbox's retention sweep, if it runs.
	stopSweep func()
	http      *http.Server
	served    chan error
}

// Start listens on cfg.Addr and serves the stream protocol with the engine
// mounted: the operator's screen is at UIPrefix, behind cfg.APIToken;
// subscription requests and callbacks go to the engine, with cfg.Inbox
// deliveries to /inbox/{provider} to the inbox, and all other requests to
// the stream server, which tells the engine about every change.
// ctx is used only while starting.
func Start(ctx context.Context, cfg Config) (*Running, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.DataDir != "" && cfg.Postgres != "" {
		return nil, errors.New("a data directory and a PostgreSQL database exclude each other")
	}
	if len(cfg.EncryptionKey) > 0 && (cfg.DataDir == "" && cfg.Postgres == "" || cfg.Store != nil) {
		return nil, errors.New("an encryption key needs a data directory or a PostgreSQL database for the engine's store, and no other Store")
	}
	providers, err := inboxProviders(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	url := "http://" + advertised(ln.Addr())
	base := cfg.CallbackBase
	if base == "" {
		base = url
	}
	opts := []webhooks.Option{webhooks.WithCallbackBaseURL(base), webhooks.WithLogger(log), webhooks.WithStreamRoot(cfg.StreamRoot)}
	if cfg.Dev {
		opts = append(opts, webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	}
	opts = append(opts, webhooks.WithAuthorizer(apiAuthorizer(cfg.APIToken, cfg.TenantTokens)))
	tenants, err := tenancy(cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	opts = append(opts, tenants...)
	if cfg.APIToken == "" {
		log.Warn("the subscription API and the streams are open: anyone who can reach " + url + " can list webhook URLs, delete subscriptions and read and write streams; set an API token")
	}
	tel, err := newTelemetry(ctx)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("setting up telemetry: %w", err)
	}
	opts = append(opts, webhooks.WithMeterProvider(tel.meters))
	if tel.tracers != nil {
		opts = append(opts, webhooks.WithTracerProvider(tel.tracers))
	}
	if cfg.SubscriptionMetrics > 0 {
		opts = append(opts, webhooks.WithSubscriptionMetrics(cfg.SubscriptionMetrics))
	}
	opts = append(opts, cfg.EngineOptions...)
	streams, store, owned, err := open(ctx, cfg, log)
	if err != nil {
		_ = ln.Close()
		return nil, errors.Join(err, tel.close(ctx))
	}
	var processor *inbox.Processor
	if cfg.Inbox {
		if processor, err = newProcessor(newInboxAppender(streams), providers, cfg.InboxHandler, cfg.InboxRetention, log); err != nil {
			_ = ln.Close()
			streams.Close()
			return nil, errors.Join(err, tel.close(ctx))
		}
		opts = append(opts, webhooks.WithBatchHandler(inboxHandler, processor.HandleBatch))
	}
	engine, err := webhooks.New(store, streams, opts...)
	if err == nil {
		err = engine.Start(ctx)
	}
	if err != nil {
		_ = ln.Close()
		streams.Close()
		if owned != nil {
			_ = owned.Close()
		}
		return nil, errors.Join(err, tel.close(ctx))
	}
	// The engine is built from the stream server, so it is registered as
	// its observer afterwards, before any request can arrive.
	streams.SetObserver(engine)
	next := guardStreams(streams, cfg.APIToken, cfg.PublicStreams)
	var problems []string
	if cfg.Inbox {
		if next, problems, err = mountInbox(ctx, engine, streams, next, providers, processor, cfg, log); err != nil {
			_ = ln.Close()
			streams.Close()
			err = errors.Join(err, engine.Stop(ctx), tel.close(ctx))
			if owned != nil {
				err = errors.Join(err, owned.Close())
			}
			return nil, err
		}
	}
	handler, err := withUI(engine, engine.Handler(next), cfg.APIToken, uiInbox(providers, streams, processor))
	if err != nil {
		_ = ln.Close()
		streams.Close()
		err = errors.Join(err, engine.Stop(ctx))
		if owned != nil {
			err = errors.Join(err, owned.Close())
		}
		return nil, err
	}
	r := &Running{
		URL:     url,
		Store:   store,
		streams: streams,
		owned:   owned,
		engine:  engine,
		tel:     tel,
		http:    newHTTPServer(opsHandler(engine, tel.scrape, log, handler), log),
		served:  make(chan error, 1),
	}
	r.Problems = problems
	if cfg.InboxRetention {
		r.stopSweep = sweepInbox(engine, streams, processor, clock.New(), log)
	}
	go func() { r.served <- r.http.Serve(ln) }()
	return r, nil
}

// inboxProviders returns the inbox's providers with the secrets cfg gives,
// or none without cfg.Inbox.
func inboxProviders(cfg Config) ([]inbox.Provider, error) {
	if !cfg.Inbox {
		if len(cfg.InboxSecrets) > 0 || cfg.InboxRetention {
			return nil, errors.New("inbox secrets and retention need the inbox")
		}
		return nil, nil
	}
	for name := range cfg.InboxSecrets {
		if inboxSchemes[name] == nil {
			return nil, fmt.Errorf("no inbox provider %q: there are github and standard", name)
		}
	}
	var providers []inbox.Provider
	for name, scheme := range inboxSchemes {
		providers = append(providers, inbox.Provider{Name: name, Scheme: scheme(cfg.InboxSecrets[name])})
	}
	return providers, nil
}

// inboxHandler names the inbox's Processor on the engine, and its
// subscription.
const inboxHandler = "inbox"

// newProcessor returns the inbox's Processor, which logs each record.
func newProcessor(appender inbox.Appender, providers []inbox.Provider, then inbox.RecordHandler, daily bool, log *slog.Logger) (*inbox.Processor, error) {
	opts := []inbox.Option{inbox.WithLogger(log)}
	if daily {
		opts = append(opts, inbox.WithDailyPartitions())
	}
	p, err := inbox.NewProcessor(appender, providers, opts...)
	if err != nil {
		return nil, err
	}
	for _, prov := range providers {
		p.Handle(prov.Name, "", func(ctx context.Context, rec *inbox.Record) error {
			if then != nil {
				if err := then(ctx, rec); err != nil {
					return err
				}
			}
			log.InfoContext(ctx, "inbox: processed a record", "provider", rec.Provider,
				"delivery_id", rec.DeliveryID, "event_type", inbox.EventType(rec), "bytes", len(rec.Body))
			return nil
		})
	}
	return p, nil
}

func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Close stops the server: it ends pending long-polls, stops accepting
// requests and waits, until ctx ends, for those in progress, then stops the
// engine. Stopping the engine last lets in-flight callbacks finish.
func (r *Running) Close(ctx context.Context) error {
	if r.stopSweep != nil {
		r.stopSweep()
	}
	r.streams.Close()
	err := r.http.Shutdown(ctx)
	if serr := <-r.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("serving: %w", serr))
	}
	err = errors.Join(err, r.engine.Stop(ctx), r.tel.close(ctx))
	if r.owned != nil {
		err = errors.Join(err, r.owned.Close())
	}
	return err
}

// open returns the stream server and the engine's store that cfg asks for,
// and the store or pool to close with the server if open created it.
func open(ctx context.Context, cfg Config, log *slog.Logger) (*dstream.Server, webhooks.Store, io.Closer, error) {
	if cfg.Postgres != "" {
		return openPostgres(ctx, cfg, log)
	}
	if cfg.DataDir == "" {
		store := cfg.Store
		if store == nil {
			store = memstore.New()
		}
		return dstream.New(dstream.Options{Logger: log}), store, nil, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, nil, err
	}
	streams, err := dstream.Open(filepath.Join(cfg.DataDir, "streams"), dstream.Options{Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening streams: %w", err)
	}
	if cfg.Store != nil {
		return streams, cfg.Store, nil, nil
	}
	var opts []sqlitestore.Option
	if len(cfg.EncryptionKey) > 0 {
		opts = append(opts, sqlitestore.WithEncryptionKey(cfg.EncryptionKey))
	}
	store, err := sqlitestore.Open(filepath.Join(cfg.DataDir, "engine.db"), opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening the engine's store: %w", err)
	}
	return streams, store, store, nil
}

// openPostgres opens the streams and, unless cfg.Store is set, a pgstore on
// the database at cfg.Postgres, each on a pool of its own: the engine reads
// the streams while it holds a consumer's row locked, so on one pool every
// connection could be held by an update waiting for one to read a stream.
func openPostgres(ctx context.Context, cfg Config, log *slog.Logger) (*dstream.Server, webhooks.Store, io.Closer, error) {
	streamPool, err := pgxpool.New(ctx, cfg.Postgres)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	streams, err := dstream.OpenPostgres(ctx, streamPool, dstream.Options{Logger: log})
	if err != nil {
		streamPool.Close()
		return nil, nil, nil, fmt.Errorf("opening streams: %w", err)
	}
	if cfg.Store != nil {
		return streams, cfg.Store, poolCloser{streamPool}, nil
	}
	fail := func(err error) (*dstream.Server, webhooks.Store, io.Closer, error) {
		streams.Close()
		streamPool.Close()
		return nil, nil, nil, err
	}
	storePool, err := pgxpool.New(ctx, cfg.Postgres)
	if err != nil {
		return fail(fmt.Errorf("connecting to PostgreSQL: %w", err))
	}
	var opts []pgstore.Option
	if len(cfg.EncryptionKey) > 0 {
		opts = append(opts, pgstore.WithEncryptionKey(cfg.EncryptionKey))
	}
	store, err := pgstore.New(ctx, storePool, opts...)
	if err != nil {
		storePool.Close()
		return fail(fmt.Errorf("opening the engine's store: %w", err))
	}
	return streams, store, poolCloser{streamPool, storePool}, nil
}

// poolCloser closes pools as an io.Closer.
type poolCloser []*pgxpool.Pool

func (c poolCloser) Close() error {
	for _, p := range c {
		p.Close()
	}
	return nil
}

// advertised is the host:port clients dial for a listener at addr. A
// wildcard listener is dialed on loopback, which is always among its
// addresses.
func advertised(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}
