// Command consumer is an agent woken by webhooks: it verifies each
// notification, claims the wake, reads its streams from the stream server,
// logs the events, acks them and calls done.
//
//	STREAMHOOKS_WEBHOOK_SECRET=whsec_... go run ./examples/consumer \
//	    -addr 127.0.0.1:8788 -server http://127.0.0.1:8787
//
// Point a subscription's webhook at http://{addr}/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/agent"
)

// secretEnv names the environment variable the secret is read from when
// -secret is not given; unlike a flag, it does not show in process lists.
const secretEnv = "STREAMHOOKS_WEBHOOK_SECRET"

func main() {
	addr := flag.String("addr", "127.0.0.1:8788", "listen address for webhooks")
	server := flag.String("server", "http://127.0.0.1:8787", "base URL of the stream server")
	secret := flag.String("secret", os.Getenv(secretEnv), "the subscription's webhook_secret (default $"+secretEnv+")")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *server, *secret, log); err != nil {
		log.Error("consumer failed", "error", err)
		os.Exit(1)
	}
}

func run(addr, server, secret string, log *slog.Logger) error {
	a, err := agent.New(agent.Config{Secret: secret, StreamServer: server, Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Addr: addr, Handler: a, ReadHeaderTimeout: 10 * time.Second}
	// One webhook per connection: the engine may dial a connection for a
	// wake and then use another, and Shutdown waits 5 seconds for an unused
	// one.
	hs.SetKeepAlivesEnabled(false)
	served := make(chan error, 1)
	go func() { served <- hs.ListenAndServe() }()
	log.Info("waiting for webhooks", "url", "http://"+addr+"/", "stream_server", server)
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	stop()
	log.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = hs.Shutdown(shutdown)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
