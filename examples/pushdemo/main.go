// Command pushdemo shows event push, the engine's second delivery mode, in
// one process: an example stream server with the engine mounted, and a
// receiver that only answers 2xx. The subscription filters the events by
// type, and each POST carries a batch of the rest; the receiver never
// calls back.
//
//	go run ./examples/pushdemo
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/examples/internal/pushreceiver"
)

// timeout bounds the whole demo; every step takes milliseconds.
const timeout = 10 * time.Second

const (
	pattern = "/orders/*"
	stream  = "/orders/eu"
	// options are the subscription's event-push options: send at once,
	// up to 100 events a POST, and only order and refund events.
	options = `"delivery":"events","batch":{"max_size":100,"max_wait_ms":0},
		"filter":{"field":"type","patterns":["order.*","refund.**"]}`
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pushdemo failed:", err)
		os.Exit(1)
	}
}

// run runs the demo, narrating to out, and returns once the receiver has
// had both batches and both servers have shut down, or with an error when
// ctx ends first.
func run(ctx context.Context, out io.Writer) (err error) {
	p := &printer{w: out}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	apiToken := rand.Text()
	srv, err := exampleserver.Start(ctx, exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Logger: log, APIToken: apiToken})
	if err != nil {
		return fmt.Errorf("starting the stream server: %w", err)
	}
	defer func() { err = errors.Join(err, closeWithin("stream server", srv.Close)) }()
	p.say("server", "stream server with the webhook engine at %s (in-memory store)", srv.URL)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hook := "http://" + ln.Addr().String() + "/orders"
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	secret, err := subscribe(ctx, hc, srv.URL, apiToken, hook)
	if err != nil {
		_ = ln.Close()
		return err
	}
	p.say("subscribed", "%s → %s, delivery events, filter type order.* or refund.** (secret %s…)", pattern, hook, secret[:len("whsec_")+4])

	batches := make(chan *webhooks.EventsPayload, 8)
	receiver := &http.Server{
		Handler: pushreceiver.New(secret, func(b *webhooks.EventsPayload) error {
			batches <- b
			return nil
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = receiver.Serve(ln) }()
	defer func() { err = errors.Join(err, closeWithin("receiver", receiver.Shutdown)) }()
	defer hc.CloseIdleConnections()
	p.say("receiver", "at %s: checks the signature, handles each Webhook-Id once, answers 204", hook)

	appends := [][]string{
		{`{"type":"order.created","id":"o1"}`, `{"type":"user.login","user":"ann"}`, `{"type":"order.paid","id":"o1"}`},
		{`{"type":"refund.issued.partial","id":"o1"}`, `{"type":"order.shipped","id":"o1"}`},
	}
	for i, events := range appends {
		body := "[" + strings.Join(events, ",") + "]"
		method, want, verb := http.MethodPost, http.StatusNoContent, "append"
		if i == 0 {
			method, want, verb = http.MethodPut, http.StatusCreated, "created"
		}
		if err := request(ctx, hc, method, srv.URL+stream, body, want); err != nil {
			return fmt.Errorf("%s %s: %w", verb, stream, err)
		}
		p.say(verb, "%s with %d events", stream, len(events))
		var b *webhooks.EventsPayload
		select {
		case b = <-batches:
		case <-ctx.Done():
			return fmt.Errorf("no batch %d within %v: %w", i+1, timeout, ctx.Err())
		}
		p.say("POST", "delivery %s: %d events of %s, offsets %s → %s, up_to_date %v", b.DeliveryID, len(b.Events), b.Stream, b.FirstOffset, b.Offset, b.UpToDate)
		for _, e := range b.Events {
			p.say("", "  %s", e)
		}
		c, err := waitCursor(ctx, srv.Store, webhooks.ConsumerID("demo-orders", stream), b.Offset)
		if err != nil {
			return err
		}
		p.say("state", "consumer is %s, cursor at %s: the 204 acked the batch", c.State, c.Streams[0].Offset)
	}
	p.say("ok", "two batches pushed and acked by 2xx alone; user.login was filtered out")
	return nil
}

// waitCursor waits until consumer id's cursor reaches offset: the engine
// records the 2xx just after the receiver sends it.
func waitCursor(ctx context.Context, store webhooks.Store, id, offset string) (*webhooks.Consumer, error) {
	for {
		c, err := store.GetConsumer(ctx, id)
		if err != nil {
			return nil, err
		}
		if c.Streams[0].Offset == offset && c.State == webhooks.StateIdle {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the cursor of %s never reached %s: %w", id, offset, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// subscribe creates the demo's subscription and returns its webhook secret.
func subscribe(ctx context.Context, hc *http.Client, server, apiToken, hook string) (string, error) {
	body := fmt.Sprintf(`{"webhook":%q,"description":"push demo",%s}`, hook, options)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, server+pattern+"?subscription=demo-orders", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiToken)
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
	return created.Secret, nil
}

// request sends a JSON request and checks the status.
func request(ctx context.Context, hc *http.Client, method, url, body string, want int) error {
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

// closeWithin runs a shutdown function with a bounded context.
func closeWithin(what string, shutdown func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down the %s: %w", what, err)
	}
	return nil
}

// printer writes the narrative.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) say(label, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%-11s %s\n", label, fmt.Sprintf(format, args...))
}
