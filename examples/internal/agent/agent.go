// Package agent is a webhook consumer for the examples. Woken by a signed
// notification, it claims the wake, reads each of its streams over the
// ordinary Durable Streams protocol, acks what it read and says it is done.
// examples/consumer serves it; the demo narrates it through Config.OnStep.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/streamhooks/webhooks/receiver"
)

// maxReadBytes bounds one stream read, so a huge stream cannot exhaust the
// agent's memory.
const maxReadBytes = 8 << 20

// errNoStream is a read of a stream that does not exist (yet): a consumer
// may subscribe to streams before they are created.
var errNoStream = errors.New("no such stream")

// StepKind names a step of handling a wake.
type StepKind string

// The steps of a wake, in order. StepFailed ends a wake early.
const (
	StepWoken   StepKind = "woken"   // a notification arrived and verified
	StepClaimed StepKind = "claimed" // the first callback claimed the wake
	StepRead    StepKind = "read"    // a stream was read up to date
	StepAcked   StepKind = "acked"   // a stream's offset was acked
	StepDone    StepKind = "done"    // the done callback succeeded
	StepFailed  StepKind = "failed"  // the wake was abandoned; see Err
)

// Step is one step of handling a wake, reported to Config.OnStep.
type Step struct {
	Kind StepKind
	// Notification is the wake the step belongs to.
	Notification *receiver.Notification
	// Stream is the stream read or acked.
	Stream string
	// From is the offset a read started at.
	From string
	// Offset is the Stream-Next-Offset a read ended at, which is then acked.
	Offset string
	// Events are what a read returned: one JSON message per event for JSON
	// streams, else the raw bytes as a single string.
	Events []string
	// Err is why the wake failed.
	Err error
}

// Config configures an Agent.
type Config struct {
	// Secret is the subscription's webhook_secret. Required.
	Secret string
	// StreamServer is the base URL of the stream server to read from.
	// Required.
	StreamServer string
	// HTTPClient makes reads and callbacks; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Logger receives a line per step; nil means slog.Default().
	Logger *slog.Logger
	// OnStep, if set, is called with every step. Calls for one wake are in
	// order; calls for different wakes may be concurrent.
	OnStep func(Step)
}

// Agent is an http.Handler that receives wake-up webhooks. It handles each
// wake before answering, as a serverless function holding the webhook
// request open would; http.Server.Shutdown therefore waits for wakes in
// progress.
type Agent struct {
	verifier *receiver.Verifier
	server   *url.URL
	hc       *http.Client
	log      *slog.Logger
	onStep   func(Step)
}

// New returns an agent configured by cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.Secret == "" {
		return nil, errors.New("agent: a webhook secret is required")
	}
	server, err := url.Parse(cfg.StreamServer)
	if err != nil || (server.Scheme != "http" && server.Scheme != "https") || server.Host == "" {
		return nil, fmt.Errorf("agent: stream server %q is not an absolute http(s) URL", cfg.StreamServer)
	}
	v, err := receiver.NewVerifier(receiver.WithSecret(cfg.Secret))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{verifier: v, server: server, hc: cfg.HTTPClient, log: cfg.Logger, onStep: cfg.OnStep}
	if a.hc == nil {
		a.hc = http.DefaultClient
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a, nil
}

// ServeHTTP verifies a notification and handles its wake. A bad signature
// is answered 401 and a malformed notification 400, so that the server
// retries neither as a success; a wake that fails after it was verified is
// answered 500, and the server's WAKING or liveness timeout recovers it.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	n, err := a.verifier.ParseNotification(r)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, receiver.ErrInvalidSignature) {
			status = http.StatusUnauthorized
		}
		a.log.WarnContext(r.Context(), "agent: rejected notification", "status", status, "error", err)
		http.Error(w, err.Error(), status)
		return
	}
	if err := a.handle(r.Context(), n); err != nil {
		a.report(r.Context(), Step{Kind: StepFailed, Notification: n, Err: err})
		http.Error(w, "wake failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handle runs one wake: claim, then read and ack each stream, then done.
// A STALE_EPOCH, ALREADY_CLAIMED or CONSUMER_GONE refusal ends it: a newer
// wake, or nobody, owns the consumer now.
func (a *Agent) handle(ctx context.Context, n *receiver.Notification) error {
	a.report(ctx, Step{Kind: StepWoken, Notification: n})
	cc := receiver.NewCallbackClient(n, a.hc)
	// The first callback carries the wake_id, which claims the wake.
	if _, err := cc.Send(ctx, receiver.CallbackRequest{}); err != nil {
		return fmt.Errorf("claiming the wake: %w", err)
	}
	a.report(ctx, Step{Kind: StepClaimed, Notification: n})
	for _, s := range n.Streams {
		events, next, err := a.read(ctx, s.Path, s.Offset)
		if errors.Is(err, errNoStream) {
			continue // nothing to read, so nothing to ack
		}
		if err != nil {
			return err
		}
		a.report(ctx, Step{Kind: StepRead, Notification: n, Stream: s.Path, From: s.Offset, Offset: next, Events: events})
		// Stream-Next-Offset is the tail the read reached; acking it marks
		// everything read as processed.
		if _, err := cc.Ack(ctx, receiver.StreamOffset{Path: s.Path, Offset: next}); err != nil {
			return fmt.Errorf("acking %s at %s: %w", s.Path, next, err)
		}
		a.report(ctx, Step{Kind: StepAcked, Notification: n, Stream: s.Path, Offset: next})
	}
	if _, err := cc.Done(ctx); err != nil {
		return fmt.Errorf("done: %w", err)
	}
	a.report(ctx, Step{Kind: StepDone, Notification: n})
	return nil
}

// read reads the stream at path from offset until it is up to date, and
// returns the events and the final Stream-Next-Offset.
func (a *Agent) read(ctx context.Context, path, offset string) (events []string, next string, err error) {
	next = offset
	for {
		u := *a.server
		u.Path = strings.TrimSuffix(u.Path, "/") + path
		u.RawPath = ""
		u.RawQuery = url.Values{"offset": {next}}.Encode()
		batch, off, upToDate, err := a.get(ctx, u.String())
		if err != nil {
			return nil, "", fmt.Errorf("reading %s from %s: %w", path, next, err)
		}
		if upToDate {
			return append(events, batch...), off, nil
		}
		if off == next {
			return nil, "", fmt.Errorf("reading %s: not up to date, yet Stream-Next-Offset stays %s", path, off)
		}
		events, next = append(events, batch...), off
	}
}

// get makes one catch-up read.
func (a *Agent) get(ctx context.Context, target string) (events []string, next string, upToDate bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, "", false, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, "", false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReadBytes+1))
	switch {
	case err != nil:
		return nil, "", false, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, "", false, errNoStream
	case resp.StatusCode != http.StatusOK:
		return nil, "", false, fmt.Errorf("status %s: %s", resp.Status, strings.TrimSpace(string(body)))
	case len(body) > maxReadBytes:
		return nil, "", false, fmt.Errorf("response exceeds %d bytes", maxReadBytes)
	}
	next = resp.Header.Get("Stream-Next-Offset")
	if next == "" {
		return nil, "", false, errors.New("response has no Stream-Next-Offset")
	}
	upToDate = resp.Header.Get("Stream-Up-To-Date") == "true"
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		if len(body) > 0 {
			events = []string{string(body)}
		}
		return events, next, upToDate, nil
	}
	// A JSON stream reads as an array of the messages appended.
	var msgs []json.RawMessage
	if err := json.Unmarshal(body, &msgs); err != nil {
		return nil, "", false, fmt.Errorf("decoding JSON messages: %w", err)
	}
	for _, m := range msgs {
		events = append(events, string(m))
	}
	return events, next, upToDate, nil
}

// report logs a step and passes it to OnStep.
func (a *Agent) report(ctx context.Context, s Step) {
	n := s.Notification
	attrs := []any{"consumer_id", n.ConsumerID, "epoch", n.Epoch, "wake_id", n.WakeID}
	level := slog.LevelInfo
	switch s.Kind {
	case StepRead:
		attrs = append(attrs, "stream", s.Stream, "from", s.From, "next_offset", s.Offset, "events", s.Events)
	case StepAcked:
		attrs = append(attrs, "stream", s.Stream, "offset", s.Offset)
	case StepFailed:
		level = slog.LevelWarn
		attrs = append(attrs, "error", s.Err)
	}
	a.log.Log(ctx, level, "agent: "+string(s.Kind), attrs...)
	if a.onStep != nil {
		a.onStep(s)
	}
}
