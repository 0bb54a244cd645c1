// Command demo runs the whole webhook cycle in one process and narrates it:
// an example stream server with the engine mounted, and an agent woken by
// its webhooks. The agent reads the events, acks them and says it is done;
// new events then wake it again, with the next epoch.
//
//	go run ./examples/demo
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/agent"
	"github.com/streamhooks/webhooks/examples/internal/narrate"
)

// timeout bounds the whole demo; every step takes milliseconds.
const timeout = 10 * time.Second

const (
	pattern = "/agents/*"
	stream  = "/agents/task-1"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// run runs the demo, narrating to out, and returns once the agent has
// finished two wakes and both servers have shut down, or with an error when
// ctx ends first.
func run(ctx context.Context, out io.Writer) (err error) {
	p := narrate.NewPrinter(out)
	// The subscription API takes a bearer token, as it should anywhere.
	srv, apiToken, err := narrate.StartServer(ctx, p)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, narrate.CloseWithin("stream server", srv.Close)) }()
	log := narrate.Logger()

	// The agent's address must be known to subscribe, and the secret the
	// subscription returns to build the agent, so listen first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hook := "http://" + ln.Addr().String() + "/wake"
	// The demo's own client, so that its idle connections can be closed
	// before the servers shut down: http.Server.Shutdown waits for a
	// connection that was dialed but never used, which the transport can
	// leave behind.
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	body, _ := json.Marshal(map[string]string{"webhook": hook, "description": "demo agent"})
	secret, err := narrate.Subscribe(ctx, hc, srv.URL, apiToken, pattern+"?subscription=demo-agents", string(body))
	if err != nil {
		_ = ln.Close()
		return err
	}
	p.Say("subscribed", "%s → %s (201 Created, secret %s…)", pattern, hook, secret[:len("whsec_")+4])

	finished := make(chan agent.Step, 8)
	a, err := agent.New(agent.Config{
		Secret:       secret,
		StreamServer: srv.URL,
		HTTPClient:   hc,
		Logger:       log,
		OnStep: func(s agent.Step) {
			step(p, s)
			if s.Kind == agent.StepDone || s.Kind == agent.StepFailed {
				select {
				case finished <- s:
				default: // the demo has stopped listening
				}
			}
		},
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	consumer := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	// One webhook per connection. A wake can start while the previous
	// webhook's response is still being written, and the engine then dials
	// a second connection; with keep-alives, one of the two could sit unused,
	// and Shutdown waits 5 seconds for such a connection.
	consumer.SetKeepAlivesEnabled(false)
	go func() { _ = consumer.Serve(ln) }()
	defer func() { err = errors.Join(err, narrate.CloseWithin("consumer", consumer.Shutdown)) }()
	defer hc.CloseIdleConnections() // runs first; see hc
	p.Say("consumer", "agent listening at %s", hook)

	// Each batch is one request, so it lands in one piece and wakes the
	// agent once. The first creates the stream with its events: an empty
	// stream created first would wake the agent before they arrive.
	batches := [][]string{
		{`{"type":"task.created","title":"summarize the logs"}`, `{"type":"step","n":1}`, `{"type":"step","n":2}`},
		{`{"type":"step","n":3}`, `{"type":"task.finished"}`},
	}
	for i, batch := range batches {
		body := "[" + strings.Join(batch, ",") + "]"
		if i == 0 {
			if err := narrate.Request(ctx, hc, http.MethodPut, srv.URL+stream, body, http.StatusCreated); err != nil {
				return fmt.Errorf("creating %s: %w", stream, err)
			}
			p.Say("created", "stream %s with %d events", stream, len(batch))
		} else {
			p.Say("append", "%d events to %s", len(batch), stream)
			if err := narrate.Request(ctx, hc, http.MethodPost, srv.URL+stream, body, http.StatusNoContent); err != nil {
				return fmt.Errorf("appending to %s: %w", stream, err)
			}
		}
		var s agent.Step
		select {
		case s = <-finished:
		case <-ctx.Done():
			return fmt.Errorf("no finished wake %d within %v: %w", i+1, timeout, ctx.Err())
		}
		if s.Kind == agent.StepFailed {
			return fmt.Errorf("wake %d failed: %w", i+1, s.Err)
		}
		if want := int64(i + 1); s.Notification.Epoch != want {
			return fmt.Errorf("wake %d had epoch %d, want %d", i+1, s.Notification.Epoch, want)
		}
		c, err := srv.Store.GetConsumer(ctx, s.Notification.ConsumerID)
		if err != nil {
			return err
		}
		p.Say("state", "consumer is %s at epoch %d, acked through %s", c.State, c.Epoch, c.Streams[0].Offset)
	}
	p.Say("ok", "woken twice, epochs 1 → 2: wake, claim, read, ack, done works end to end")
	return nil
}

// step narrates a step of the agent.
func step(p *narrate.Printer, s agent.Step) {
	n := s.Notification
	switch s.Kind {
	case agent.StepWoken:
		rewake := ""
		if n.Epoch > 1 {
			rewake = " (re-wake)"
		}
		p.Say("WOKEN", "consumer %s, epoch %d%s, wake_id %s, triggered by %v", n.ConsumerID, n.Epoch, rewake, n.WakeID, n.TriggeredBy)
	case agent.StepClaimed:
		p.Say("claimed", "wake %s via the callback API", n.WakeID)
	case agent.StepRead:
		p.Say("read", "%s from offset %s: %d events", s.Stream, s.From, len(s.Events))
		for _, e := range s.Events {
			p.Say("", "  %s", e)
		}
	case agent.StepAcked:
		p.Say("acked", "%s through %s (its Stream-Next-Offset)", s.Stream, s.Offset)
	case agent.StepDone:
		p.Say("done", "epoch %d finished", n.Epoch)
	case agent.StepFailed:
		p.Say("FAILED", "epoch %d: %v", n.Epoch, s.Err)
	}
}
