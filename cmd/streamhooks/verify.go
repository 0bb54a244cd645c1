package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// verify checks the signature of a webhook request saved as raw HTTP, in
// either scheme, with the receiver package's Verifier.
func (c *cli) verify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	secret := fs.String("secret", "", "the subscription's webhook_secret, whole, as the API returned it")
	maxAge := fs.Duration("max-age", 0, "refuse a signature older than this (default: check the MAC only, as a saved request is old)")
	pos, err := flags(fs, args, 1)
	if err != nil {
		return err
	}
	if *secret == "" {
		return usageError("verify needs --secret")
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return err
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
	if err != nil {
		return fmt.Errorf("%s is not a saved HTTP request: %w", pos[0], err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return fmt.Errorf("reading the body of %s: %w", pos[0], err)
	}
	now, tolerance := c.now, *maxAge
	if tolerance == 0 {
		// Verify as of the signing time: only the MAC is checked.
		signed, err := signedAt(req.Header)
		if err != nil {
			return err
		}
		now, tolerance = func() time.Time { return signed }, time.Second
	}
	v, err := receiver.NewVerifier(receiver.WithSecret(*secret), receiver.WithTolerance(tolerance), receiver.WithClock(now))
	if err != nil {
		return usageError("--secret: %v", err)
	}
	if err := v.Verify(ctx, req.Header, body); err != nil {
		return err
	}
	return c.done("signature valid")
}

// signedAt is the signing time a request's headers state: the t= of a
// spec 001 Webhook-Signature, or the Standard Webhooks webhook-timestamp.
func signedAt(h http.Header) (time.Time, error) {
	ts := h.Get("Webhook-Timestamp")
	if sig, ok := strings.CutPrefix(h.Get("Webhook-Signature"), "t="); ok {
		ts, _, _ = strings.Cut(sig, ",")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: no signing time in the request's headers", receiver.ErrInvalidSignature)
	}
	return time.Unix(sec, 0), nil
}
