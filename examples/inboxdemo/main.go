// Command inboxdemo shows the durable inbox in one process: the example
// stream server takes a GitHub-signed delivery while its processor is down,
// answers 202 at once because the raw request is stored, and processes the
// delivery once the processor is back; a forged delivery goes to the dead
// letters, never processed.
//
//	go run ./examples/inboxdemo
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/examples/internal/narrate"
	"github.com/streamhooks/webhooks/inbox"
)

// timeout bounds the whole demo; the retries take about a second.
const timeout = 20 * time.Second

// secret is the GitHub webhook secret the demo's deliveries are signed with.
const secret = "demo-github-secret"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "inboxdemo failed:", err)
		os.Exit(1)
	}
}

// run runs the demo, narrating to out.
func run(ctx context.Context, out io.Writer) (err error) {
	p := narrate.NewPrinter(out)
	var down atomic.Bool
	down.Store(true)
	attempts := make(chan error, 16)
	processed := make(chan *inbox.Record, 4)
	token := rand.Text()
	srv, err := exampleserver.Start(ctx, exampleserver.Config{
		Addr: "127.0.0.1:0", Dev: true, Logger: narrate.Logger(), APIToken: token,
		Inbox: true, InboxSecrets: map[string]string{"github": secret},
		InboxHandler: func(_ context.Context, rec *inbox.Record) error {
			if down.Load() {
				err := errors.New("the processor's database is down")
				attempts <- err
				return err
			}
			processed <- rec
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("starting the stream server: %w", err)
	}
	defer func() { err = errors.Join(err, narrate.CloseWithin("stream server", srv.Close)) }()
	p.Say("server", "stream server with the inbox at %s/inbox/github", srv.URL)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer hc.CloseIdleConnections()

	body := []byte(`{ "action": "opened",   "issue": {"number": 7, "title": "It broke"} }`)
	status, err := deliver(ctx, hc, srv.URL, "delivery-1", body, sign(body))
	if err != nil {
		return err
	}
	p.Say("GitHub", "POST /inbox/github, delivery-1, X-Hub-Signature-256 over the raw bytes: %d", status)
	p.Say("stored", "the raw request is in /inbox/github/records before the answer")

	for i := 1; i <= 2; i++ {
		select {
		case err := <-attempts:
			p.Say("processor", "attempt %d failed: %v; the record waits, retried on the backoff", i, err)
		case <-ctx.Done():
			return fmt.Errorf("no processing attempt: %w", ctx.Err())
		}
	}
	down.Store(false)
	p.Say("outage", "over")
	select {
	case rec := <-processed:
		p.Say("processed", "%s, %s event, signature verified on the %d bytes received", rec.DeliveryID, inbox.EventType(rec), len(rec.Body))
	case <-ctx.Done():
		return fmt.Errorf("the record was never processed: %w", ctx.Err())
	}

	status, err = deliver(ctx, hc, srv.URL, "forged-1", []byte(`{"action":"deleted"}`), "sha256="+hex.EncodeToString(make([]byte, 32)))
	if err != nil {
		return err
	}
	p.Say("forger", "POST /inbox/github, forged-1, a made-up signature: %d (receipt checks no signature)", status)
	dead, err := nextDeadLetter(ctx, hc, srv.URL, token)
	if err != nil {
		return err
	}
	p.Say("dead letter", "%s in /inbox/github/dead: %s; never processed", dead.DeliveryID, dead.Reason)
	p.Say("ok", "accepted during an outage and processed after it; the forgery set aside")
	return nil
}

// sign is GitHub's X-Hub-Signature-256 of body.
func sign(body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// deliver POSTs a GitHub delivery to the inbox and returns the status.
func deliver(ctx context.Context, hc *http.Client, server, id string, body []byte, signature string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+"/inbox/github", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "issues")
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", signature)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("delivering %s: %w", id, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return 0, fmt.Errorf("delivering %s: %s", id, resp.Status)
	}
	return resp.StatusCode, nil
}

// nextDeadLetter long-polls the dead-letter stream for its first entry,
// as an operator, with the API token.
func nextDeadLetter(ctx context.Context, hc *http.Client, server, token string) (*inbox.DeadLetter, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/inbox/github/dead?offset=-1&live=long-poll", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters: %w", err)
	}
	defer resp.Body.Close()
	var dead []inbox.DeadLetter
	if err := json.NewDecoder(resp.Body).Decode(&dead); err != nil || len(dead) == 0 {
		return nil, fmt.Errorf("reading the dead letters: %s, %d, %v", resp.Status, len(dead), err)
	}
	return &dead[0], nil
}
