// Command pushdemo shows event push, the engine's second delivery mode, in
// one process: an example stream server with the engine mounted, and a
// receiver that only answers 2xx. The subscription filters the events by
// type, and each POST carries a batch of the rest; the receiver never
// calls back.
//
//	go run ./examples/pushdemo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/narrate"
	"github.com/streamhooks/webhooks/examples/internal/pushreceiver"
	"github.com/streamhooks/webhooks/receiver"
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
	p := narrate.NewPrinter(out)
	srv, apiToken, err := narrate.StartServer(ctx, p)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, narrate.CloseWithin("stream server", srv.Close)) }()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hook := "http://" + ln.Addr().String() + "/orders"
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	body := fmt.Sprintf(`{"webhook":%q,"description":"push demo",%s}`, hook, options)
	secret, err := narrate.Subscribe(ctx, hc, srv.URL, apiToken, pattern+"?subscription=demo-orders", body)
	if err != nil {
		_ = ln.Close()
		return err
	}
	p.Say("subscribed", "%s → %s, delivery events, filter type order.* or refund.** (secret %s…)", pattern, hook, secret[:len("whsec_")+4])

	batches := make(chan *receiver.EventsPayload, 8)
	handler, err := pushreceiver.New(secret, func(b *receiver.EventsPayload) error {
		batches <- b
		return nil
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	hookSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hookSrv.Serve(ln) }()
	defer func() { err = errors.Join(err, narrate.CloseWithin("receiver", hookSrv.Shutdown)) }()
	defer hc.CloseIdleConnections()
	p.Say("receiver", "at %s: checks the signature, handles each Webhook-Id once, answers 204", hook)

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
		if err := narrate.Request(ctx, hc, method, srv.URL+stream, body, want); err != nil {
			return fmt.Errorf("%s %s: %w", verb, stream, err)
		}
		p.Say(verb, "%s with %d events", stream, len(events))
		var b *receiver.EventsPayload
		select {
		case b = <-batches:
		case <-ctx.Done():
			return fmt.Errorf("no batch %d within %v: %w", i+1, timeout, ctx.Err())
		}
		p.Say("POST", "delivery %s: %d events of %s, offsets %s → %s, up_to_date %v", b.DeliveryID, len(b.Events), b.Stream, b.FirstOffset, b.Offset, b.UpToDate)
		for _, e := range b.Events {
			p.Say("", "  %s", e)
		}
		c, err := waitCursor(ctx, srv.Store, webhooks.ConsumerID("demo-orders", stream), b.Offset)
		if err != nil {
			return err
		}
		p.Say("state", "consumer is %s, cursor at %s: the 204 acked the batch", c.State, c.Streams[0].Offset)
	}
	p.Say("ok", "two batches pushed and acked by 2xx alone; user.login was filtered out")
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
