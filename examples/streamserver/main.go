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

// Environment variables read when the matching flag is not given; unlike
// flags, they do not show in process lists.
const (
	apiTokenEnv      = "STREAMHOOKS_API_TOKEN"
	encryptionKeyEnv = "STREAMHOOKS_ENCRYPTION_KEY"
	postgresEnv      = "STREAMHOOKS_POSTGRES"
)

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
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.Logger = log
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
	token := fs.String("api-token", "", "bearer token the subscription API and streams require (default $"+apiTokenEnv+")")
	publicStreams := fs.Bool("public-streams", false, "with an API token, leave streams open to anyone; the subscription API and the inbox's streams still need it")
	postgres := fs.String("postgres", "", "keep streams and engine state in this PostgreSQL database, shared with other servers on it: a DSN (default $"+postgresEnv+")")
	keyFile := fs.String("encryption-key-file", "", "file holding the key that seals secrets in -data or -postgres: 32 bytes, base64 (default $"+encryptionKeyEnv+")")
	inbox := fs.Bool("inbox", false, "receive github and standard (Standard Webhooks) deliveries at /inbox/{provider} into the stream /inbox/{provider}/records")
	secrets := map[string]string{}
	fs.Func("inbox-secret", "PROVIDER=SECRET: the secret a provider of -inbox signs with (repeatable)", func(v string) error {
		provider, secret, ok := strings.Cut(v, "=")
		if !ok || provider == "" || secret == "" {
			return errors.New("want PROVIDER=SECRET")
		}
		secrets[provider] = secret
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return exampleserver.Config{}, err
	}
	if len(secrets) > 0 && !*inbox {
		return exampleserver.Config{}, errors.New("-inbox-secret needs -inbox")
	}
	if *token == "" {
		*token = getenv(apiTokenEnv)
	}
	if *token == "" && !*dev {
		return exampleserver.Config{}, fmt.Errorf("no API token: set -api-token or $%s, or pass -dev to leave the subscription API open", apiTokenEnv)
	}
	if *postgres == "" {
		*postgres = getenv(postgresEnv)
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
	return exampleserver.Config{
		Addr:          *addr,
		CallbackBase:  *callbackBase,
		Dev:           *dev,
		DataDir:       *data,
		Postgres:      *postgres,
		APIToken:      *token,
		PublicStreams: *publicStreams,
		EncryptionKey: key,
		Inbox:         *inbox,
		InboxSecrets:  secrets,
		EngineOptions: []webhooks.Option{webhooks.WithTimeouts(*waking, *liveness, 0)},
	}, nil
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
