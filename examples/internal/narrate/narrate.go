// Package narrate holds what the one-process demos share: the narrative
// they print, and the HTTP calls and shutdowns they make.
package narrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

// Printer writes a demo's narrative, one labelled line at a time. Lines
// come from several goroutines, so writes are serialized.
type Printer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewPrinter returns a Printer that writes to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w} }

// Say writes one line: the label in a column, then the formatted text.
func (p *Printer) Say(label, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%-11s %s\n", label, fmt.Sprintf(format, args...))
}

// Request sends a JSON request and checks the status.
func Request(ctx context.Context, hc *http.Client, method, url, body string, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != want {
		return fmt.Errorf("status %s, want %d: %s", resp.Status, want, bytes.TrimSpace(msg))
	}
	return nil
}

// CloseWithin runs a shutdown function with a bounded context. Everything
// is idle by then, so shutting down takes milliseconds.
func CloseWithin(what string, shutdown func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down the %s: %w", what, err)
	}
	return nil
}

// StartServer starts the example server for a demo, in memory on
// loopback, with its subscription API behind a fresh bearer token, which it
// returns, and public streams, which the demo's consumers read without it;
// it says where it listens.
func StartServer(ctx context.Context, p *Printer) (*exampleserver.Running, string, error) {
	token := rand.Text()
	srv, err := exampleserver.Start(ctx, exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Logger: Logger(), APIToken: token, PublicStreams: true})
	if err != nil {
		return nil, "", fmt.Errorf("starting the stream server: %w", err)
	}
	p.Say("server", "stream server with the webhook engine at %s (in-memory store)", srv.URL)
	return srv, token, nil
}

// Logger is the demos' logger. Warnings and errors still show; routine
// logs would drown the narrative.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Subscribe creates a subscription with the request body at target, a
// pattern and its ?subscription= query, on server, and returns its webhook
// secret.
func Subscribe(ctx context.Context, hc *http.Client, server, token, target, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, server+target, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("subscribing: %w", err)
	}
	defer resp.Body.Close()
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("subscribing: status %s, decoding: %v", resp.Status, err)
	}
	if !strings.HasPrefix(created.Secret, "whsec_") {
		return "", fmt.Errorf("subscribing: unexpected secret %q", created.Secret)
	}
	return created.Secret, nil
}
