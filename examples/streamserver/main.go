// Command streamserver is a Durable Streams server with the webhook engine
// mounted: streams, the subscription API and the callback API on one
// address. It keeps everything in memory, or with -data in a directory, so
// that streams, subscriptions and acked offsets survive a restart.
//
//	go run ./examples/streamserver -addr 127.0.0.1:8787 -dev -data ./data
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8787", "listen address")
	dev := flag.Bool("dev", false, "allow webhooks on loopback over plain http (development only)")
	callbackBase := flag.String("callback-base", "", `public base URL of the callback API (default "http://" + the listen address)`)
	waking := flag.Duration("waking-timeout", webhooks.DefaultWakingTimeout, "how long a woken consumer has to claim its wake")
	data := flag.String("data", "", "keep streams and engine state in this directory (default: in memory)")
	liveness := flag.Duration("liveness-timeout", webhooks.DefaultLivenessTimeout, "how long a LIVE consumer may stay silent")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := exampleserver.Config{
		Addr:          *addr,
		CallbackBase:  *callbackBase,
		Dev:           *dev,
		Logger:        log,
		DataDir:       *data,
		EngineOptions: []webhooks.Option{webhooks.WithTimeouts(*waking, *liveness, 0)},
	}
	if err := run(cfg, log); err != nil {
		log.Error("streamserver failed", "error", err)
		os.Exit(1)
	}
}

func run(cfg exampleserver.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := exampleserver.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	log.Info("serving streams, subscriptions and callbacks", "url", srv.URL, "dev", cfg.Dev, "data", cfg.DataDir)
	<-ctx.Done()
	stop() // a second signal kills the process at once
	log.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Close(shutdown)
}
