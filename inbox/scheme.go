package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Scheme is a provider's webhook conventions: which request headers a
// record keeps, where a delivery's id is, and how its signature is checked.
// GitHub, Stripe, StandardWebhooks, Slack, Telegram and HMAC implement it.
type Scheme interface {
	// Headers names the request headers a record keeps, besides
	// Content-Type: those Verify and a processor need.
	Headers() []string
	// DeliveryID returns the delivery's id from the request, or "" if it
	// has none, which turns deduplication off for it.
	DeliveryID(header http.Header, body []byte) string
	// Verify checks the signature of rec on its raw Body, and returns an
	// error wrapping ErrInvalidSignature if it does not hold.
	Verify(rec *Record) error
}

// DefaultTolerance is how far a signed timestamp may be from the record's
// ReceivedAt, either way, for schemes that sign one.
const DefaultTolerance = 5 * time.Minute

// ErrInvalidSignature is wrapped by every error Verify returns, through
// one of the errors below, which say why.
var ErrInvalidSignature = errors.New("invalid signature")

var (
	// ErrUnusableSecret: the scheme's secret is empty or malformed, so no
	// record can verify. An empty secret never verifies anything.
	ErrUnusableSecret = fmt.Errorf("%w: no usable secret", ErrInvalidSignature)
	// ErrMissingSignature: a header the signature needs is absent, or
	// holds no signature of a version the scheme checks.
	ErrMissingSignature = fmt.Errorf("%w: missing", ErrInvalidSignature)
	// ErrMalformedSignature: a header is not in the scheme's format.
	ErrMalformedSignature = fmt.Errorf("%w: malformed", ErrInvalidSignature)
	// ErrSignatureMismatch: no signature given matches the body.
	ErrSignatureMismatch = fmt.Errorf("%w: no signature matches the body", ErrInvalidSignature)
	// ErrTimestampOutOfTolerance: the signature matches, but its signed
	// timestamp is further than the tolerance from the record's ReceivedAt:
	// the delivery may be a replay.
	ErrTimestampOutOfTolerance = fmt.Errorf("%w: timestamp outside tolerance", ErrInvalidSignature)
)

// sum returns the HMAC-SHA256 of the concatenated parts under key.
func sum(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// matchAny reports whether any of sigs equals want, in constant time for
// each.
func matchAny(want []byte, sigs [][]byte) bool {
	ok := false
	for _, s := range sigs {
		if hmac.Equal(want, s) {
			ok = true
		}
	}
	return ok
}

// header returns the named header of rec, or an ErrMissingSignature.
func header(rec *Record, name string) (string, error) {
	v := rec.Header.Get(name)
	if v == "" {
		return "", fmt.Errorf("%w: no %s header", ErrMissingSignature, name)
	}
	return v, nil
}

// parseTimestamp parses ts, the text of a signed timestamp in Unix seconds
// from the header named.
func parseTimestamp(name, ts string) (int64, error) {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s is not Unix seconds", ErrMalformedSignature, name)
	}
	return sec, nil
}

// checkTolerance checks that sec, a signed timestamp in Unix seconds, is
// within tolerance (DefaultTolerance if zero) of when rec was received.
// Whole seconds are compared, as senders sign them.
func checkTolerance(rec *Record, sec int64, tolerance time.Duration) error {
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	// As int64 seconds, which cannot overflow for any plausible receive
	// time; a time.Duration would saturate for a far-off timestamp.
	received, tol := rec.ReceivedAt.Unix(), int64(tolerance/time.Second)
	if sec < received-tol || sec > received+tol {
		return fmt.Errorf("%w: signed at %d, received at %d (Unix seconds), tolerance %s",
			ErrTimestampOutOfTolerance, sec, received, tolerance)
	}
	return nil
}

// jsonField returns the top-level string field name of a JSON object body,
// or "" if the body is not one or has no such string.
func jsonField(body []byte, name string) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(fields[name], &s) != nil {
		return ""
	}
	return s
}

// jsonNumberField returns the integer field name of the JSON object body,
// in decimal, or "" if body has no such field.
func jsonNumberField(body []byte, name string) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	raw := fields[name]
	if len(raw) == 0 || raw[0] == '"' {
		return ""
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return ""
	}
	if _, err := n.Int64(); err != nil {
		return ""
	}
	return n.String()
}
