package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// verify checks the signature of a webhook request saved as raw HTTP, in
// the scheme of spec 001. It uses the root package's VerifySignature; the
// receiver package, once it lands, is the stdlib-only verifier to use.
func (c *cli) verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	secret := fs.String("secret", "", "the subscription's webhook_secret, whole, prefix included")
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
	header := req.Header.Get(webhooks.SignatureHeader)
	if header == "" {
		return fmt.Errorf("%s has no %s header", pos[0], webhooks.SignatureHeader)
	}
	now, tolerance := c.now(), *maxAge
	if tolerance == 0 {
		// Verify as of the signing time: only the MAC is checked.
		ts, _, _ := strings.Cut(strings.TrimPrefix(header, "t="), ",")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: malformed header", webhooks.ErrInvalidSignature)
		}
		now, tolerance = time.Unix(sec, 0), time.Second
	}
	if err := webhooks.VerifySignature(*secret, header, body, now, tolerance); err != nil {
		return err
	}
	return c.done("signature valid")
}
