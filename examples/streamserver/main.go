// Command streamserver is a Durable Streams server with the webhook engine
// mounted: streams, the subscription API and the callback API on one
// address. It keeps everything in memory, or with -data in a directory, so
// that streams, subscriptions and acked offsets survive a restart, or with
// -postgres in a PostgreSQL database, where they also survive a restart and
// several servers on different addresses serve the same streams: a
// long-poll on one sees an append made through another.
//
//	STREAMHOOKS_API_TOKEN=... go run ./examples/streamserver -addr 127.0.0.1:8787 -data ./data
//	go run ./examples/streamserver -addr 127.0.0.1:8787 -dev
//	STREAMHOOKS_POSTGRES=postgres://... go run ./examples/streamserver -addr 127.0.0.1:8788 -dev
//
// Every flag can also be set by an environment variable, STREAMHOOKS_ and
// the flag's name in upper case with "_" for "-" (-log-level is
// $STREAMHOOKS_LOG_LEVEL); -h lists both. -log-format and -log-level set
// the logs; /healthz, /readyz and /metrics serve probes and Prometheus
// without the API token.
//
// The subscription API lists webhook URLs and deletes subscriptions, so it
// requires a bearer token, from -api-token or $STREAMHOOKS_API_TOKEN. Only
// with -dev may it run without one, open to anyone who can reach it.
// Streams need the token too, unless -public-streams is given; callbacks
// do not need it.
//
// The DSN comes from -postgres or $STREAMHOOKS_POSTGRES; -postgres and
// -data exclude each other.
//
// With -data or -postgres, -encryption-key-file or $STREAMHOOKS_ENCRYPTION_KEY gives a
// key that seals webhook secrets and the token key in the engine's store:
// 32 bytes, base64-encoded, as `openssl rand -base64 32` prints.
//
// With -inbox, it receives third-party webhooks from GitHub and Standard
// Webhooks senders at /inbox/github and /inbox/standard, each appended to
// the stream /inbox/{provider}/records before it is answered;
// -inbox-secret github=SECRET gives the secret a provider signs with. The
// inbox's streams are read with the API token, and written only by the
// inbox, even with -public-streams.
//
// With -tenant-token TENANT=TOKEN (repeatable), the subscription API
// serves several tenants: a request with a tenant's token sees, changes
// and creates only that tenant's subscriptions, each under
// /tenants/TENANT/, and another tenant's answer 404; the -api-token, the
// operator's, sees them all. -tenant-max-subscriptions caps each tenant.
//
//	STREAMHOOKS_API_TOKEN=op STREAMHOOKS_TENANT_TOKEN="acme=t1 globex=t2" go run ./examples/streamserver
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

// Every flag can be set by an environment variable instead, envPrefix and
// its name in upper case with "_" for "-" (envName): unlike flags, they do
// not show in process lists. A flag given on the command line wins.
// STREAMHOOKS_ENCRYPTION_KEY holds the key itself rather than a file.
const (
	envPrefix        = "STREAMHOOKS_"
	apiTokenEnv      = "STREAMHOOKS_API_TOKEN"
	encryptionKeyEnv = "STREAMHOOKS_ENCRYPTION_KEY"
	postgresEnv      = "STREAMHOOKS_POSTGRES"
)

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// encryptionKeyBytes is the length sqlitestore.WithEncryptionKey wants.
const encryptionKeyBytes = 32

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "streamserver:", err)
		os.Exit(2)
	}
	log := cfg.Logger
	if err := run(cfg, log); err != nil {
		log.Error("streamserver failed", "error", err)
		os.Exit(1)
	}
}

// parseConfig reads the command line args and, through getenv, the
// environment. It refuses to run the subscription API open without -dev,
// both -data and a database, and an encryption key with neither.
func parseConfig(args []string, getenv func(string) string) (exampleserver.Config, error) {
	fs := flag.NewFlagSet("streamserver", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8787", "listen address")
	dev := fs.Bool("dev", false, "development mode: allow webhooks on loopback over plain http, and run without an API token")
	callbackBase := fs.String("callback-base", "", `public base URL of the callback API (default "http://" + the listen address)`)
	waking := fs.Duration("waking-timeout", webhooks.DefaultWakingTimeout, "how long a woken consumer has to claim its wake")
	data := fs.String("data", "", "keep streams and engine state in this directory (default: in memory)")
	liveness := fs.Duration("liveness-timeout", webhooks.DefaultLivenessTimeout, "how long a LIVE consumer may stay silent")
	token := fs.String("api-token", "", "bearer token the subscription API and streams require")
	publicStreams := fs.Bool("public-streams", false, "with an API token, leave streams open to anyone; the subscription API and the inbox's streams still need it")
	postgres := fs.String("postgres", "", "keep streams and engine state in this PostgreSQL database, shared with other servers on it: a DSN")
	keyFile := fs.String("encryption-key-file", "", "file holding the key that seals secrets in -data or -postgres: 32 bytes, base64 (or the key itself in $"+encryptionKeyEnv+")")
	inbox := fs.Bool("inbox", false, "receive github and standard (Standard Webhooks) deliveries at /inbox/{provider} into the stream /inbox/{provider}/records")
	retention := fs.Bool("inbox-retention", false, "with -inbox, partition the inbox's streams by day and delete, hourly, processed records after 7 days and dead letters after 30")
	secrets := map[string]string{}
	fs.Func("inbox-secret", "PROVIDER=SECRET: the secret a provider of -inbox signs with (repeatable)", func(v string) error {
		provider, secret, ok := strings.Cut(v, "=")
		if !ok || provider == "" || secret == "" {
			return errors.New("want PROVIDER=SECRET")
		}
		secrets[provider] = secret
		return nil
	})
	tenantTokens := map[string]string{}
	fs.Func("tenant-token", "TENANT=TOKEN: a tenant's bearer token for the subscription API, which then sees only that tenant's subscriptions, under /tenants/TENANT/ (repeatable; needs -api-token, the operator's)", func(v string) error {
		tenant, token, ok := strings.Cut(v, "=")
		if !ok || tenant == "" || token == "" {
			return errors.New("want TENANT=TOKEN")
		}
		tenantTokens[tenant] = token
		return nil
	})
	tenantMax := fs.Int("tenant-max-subscriptions", 0, "with -tenant-token, the most subscriptions each tenant may have (0: no limit)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	var logLevel slog.Level
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "lowest level logged: debug, info, warn or error")
	streamRoot := fs.String("stream-root", "/v1/stream", "path under which the reserved __ds subscription API of the Durable Streams protocol is served, and to which its stream paths are relative")
	subMetrics := fs.Int("metrics-subscriptions", 0, "label delivery metrics with the first N subscriptions, the rest as \"other\" (0: no subscription label)")
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += " [$" + envName(f.Name) + "]"
	})
	if err := fs.Parse(args); err != nil {
		return exampleserver.Config{}, err
	}
	if err := setFromEnv(fs, getenv); err != nil {
		return exampleserver.Config{}, err
	}
	if len(secrets) > 0 && !*inbox {
		return exampleserver.Config{}, errors.New("-inbox-secret needs -inbox")
	}
	if *retention && !*inbox {
		return exampleserver.Config{}, errors.New("-inbox-retention needs -inbox")
	}
	if *token == "" && !*dev {
		return exampleserver.Config{}, fmt.Errorf("no API token: set -api-token or $%s, or pass -dev to leave the subscription API open", apiTokenEnv)
	}
	if *postgres != "" && *data != "" {
		return exampleserver.Config{}, fmt.Errorf("-data and -postgres (or $%s) exclude each other", postgresEnv)
	}
	key, err := encryptionKey(*keyFile, getenv)
	if err != nil {
		return exampleserver.Config{}, err
	}
	if key != nil && *data == "" && *postgres == "" {
		return exampleserver.Config{}, errors.New("an encryption key needs -data or -postgres: the in-memory store keeps nothing")
	}
	log, err := newLogger(*logFormat, logLevel)
	if err != nil {
		return exampleserver.Config{}, err
	}
	return exampleserver.Config{
		Logger:                 log,
		SubscriptionMetrics:    *subMetrics,
		Addr:                   *addr,
		CallbackBase:           *callbackBase,
		Dev:                    *dev,
		DataDir:                *data,
		Postgres:               *postgres,
		APIToken:               *token,
		PublicStreams:          *publicStreams,
		EncryptionKey:          key,
		Inbox:                  *inbox,
		InboxSecrets:           secrets,
		InboxRetention:         *retention,
		StreamRoot:             *streamRoot,
		TenantTokens:           tenantTokens,
		TenantMaxSubscriptions: *tenantMax,
		EngineOptions:          []webhooks.Option{webhooks.WithTimeouts(*waking, *liveness, 0)},
	}, nil
}

// setFromEnv sets every flag of fs not given on the command line from its
// environment variable, if set. A repeatable flag (-inbox-secret) takes
// space-separated values: -inbox-secret and -tenant-token.
func setFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(envName(f.Name))
		if given[f.Name] || v == "" || err != nil {
			return
		}
		values := []string{v}
		if f.Name == "inbox-secret" || f.Name == "tenant-token" {
			values = strings.Fields(v)
		}
		for _, v := range values {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("$%s: %w", envName(f.Name), serr)
				return
			}
		}
	})
	return err
}

// newLogger returns a logger to stderr in format, text or json, from
// level up.
func newLogger(format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// encryptionKey returns the key in file, if named, or else in the
// environment, or nil if neither gives one.
func encryptionKey(file string, getenv func(string) string) ([]byte, error) {
	text, source := getenv(encryptionKeyEnv), "$"+encryptionKeyEnv
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the encryption key: %w", err)
		}
		text, source = string(data), file
	}
	if text == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("encryption key in %s is not base64 (make one with `openssl rand -base64 %d`)", source, encryptionKeyBytes)
	}
	if len(key) != encryptionKeyBytes {
		return nil, fmt.Errorf("encryption key in %s is %d bytes, want %d, base64-encoded (make one with `openssl rand -base64 %d`)",
			source, len(key), encryptionKeyBytes, encryptionKeyBytes)
	}
	return key, nil
}

func run(cfg exampleserver.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := exampleserver.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	log.Info("serving streams, subscriptions and callbacks", "url", srv.URL, "dev", cfg.Dev, "data", cfg.DataDir, "postgres", cfg.Postgres != "",
		"api_token", cfg.APIToken != "", "encrypted", cfg.EncryptionKey != nil, "inbox", cfg.Inbox)
	<-ctx.Done()
	stop() // a second signal kills the process at once
	log.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Close(shutdown)
}
