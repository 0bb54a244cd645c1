package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the header that carries a notification's signature:
// "t=<unix seconds>,sha256=<lowercase hex HMAC-SHA256>". While a rotated
// secret's overlap lasts, a second ",sha256=" entry follows, made with the
// previous secret.
const SignatureHeader = "Webhook-Signature"

// maxSignatures bounds the sha256 entries VerifySignature accepts in one
// header: rotation sends two, and a cap keeps a hostile header short.
const maxSignatures = 8

// DefaultSignatureTolerance is the clock skew the spec allows between the
// signing time and verification, in either direction.
const DefaultSignatureTolerance = 5 * time.Minute

// ErrInvalidSignature is wrapped by every error VerifySignature returns, so
// a webhook handler can answer 401 on errors.Is(err, ErrInvalidSignature).
var ErrInvalidSignature = errors.New("webhooks: invalid webhook signature")

// SignPayload returns the SignatureHeader value for body signed at t with
// secret. The key is the whole secret string, "whsec_" prefix included, as
// the reference verifier uses it.
func SignPayload(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(signatureMAC(secret, ts, body))
}

// VerifySignature checks that header is a valid signature of the raw body
// under secret, made no more than tolerance away from now. Pass the body
// bytes exactly as received: re-encoded JSON will not verify. An empty
// secret is refused, so that a missing configuration value cannot make
// forged notifications verify.
//
// The header is "t=<unix>" followed by one to eight ",sha256=<hex>"
// entries, each 64 lowercase hex digits; anything else, such as another
// key or a space, is malformed. The header verifies if any entry is the
// MAC under secret, so a receiver holding either secret verifies during a
// rotation's overlap.
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return fmt.Errorf("%w: empty secret", ErrInvalidSignature)
	}
	ts, sigs, err := parseSignatureHeader(header)
	if err != nil {
		return err
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed header: timestamp out of range", ErrInvalidSignature)
	}
	// Whole seconds on both sides, as the reference verifier compares them.
	// The distance is taken in uint64, which holds that of any two int64s:
	// a time.Duration saturates, and a far-off timestamp would pass.
	nowSec := now.Unix()
	if sec <= nowSec && outsideTolerance(uint64(nowSec)-uint64(sec), tolerance) {
		return fmt.Errorf("%w: timestamp too old", ErrInvalidSignature)
	}
	if sec > nowSec && outsideTolerance(uint64(sec)-uint64(nowSec), tolerance) {
		return fmt.Errorf("%w: timestamp in the future", ErrInvalidSignature)
	}
	// The timestamp is signed as written, like the reference verifier does.
	want := signatureMAC(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: signature mismatch", ErrInvalidSignature)
}

// outsideTolerance reports whether a skew of seconds exceeds tolerance.
func outsideTolerance(seconds uint64, tolerance time.Duration) bool {
	return tolerance < 0 || seconds > uint64(tolerance/time.Second)
}

// parseSignatureHeader splits "t=<digits>" and its ",sha256=<64 lowercase
// hex>" entries into the timestamp as written and the decoded MACs.
func parseSignatureHeader(header string) (ts string, sigs [][]byte, err error) {
	malformed := func(why string) error {
		return fmt.Errorf("%w: malformed header: %s", ErrInvalidSignature, why)
	}
	tPart, rest, ok := strings.Cut(header, ",")
	if !ok {
		return "", nil, malformed("want t=<unix>,sha256=<hex>")
	}
	ts, ok = strings.CutPrefix(tPart, "t=")
	if !ok {
		return "", nil, malformed("missing t=")
	}
	if ts == "" || strings.Trim(ts, "0123456789") != "" {
		return "", nil, malformed("timestamp is not a decimal number")
	}
	for part := range strings.SplitSeq(rest, ",") {
		if len(sigs) == maxSignatures {
			return "", nil, malformed("too many signatures")
		}
		hexSig, ok := strings.CutPrefix(part, "sha256=")
		if !ok {
			return "", nil, malformed("missing sha256=")
		}
		sig, err := hex.DecodeString(hexSig)
		if err != nil || len(sig) != sha256.Size || hexSig != strings.ToLower(hexSig) {
			return "", nil, malformed("signature is not 64 lowercase hex digits")
		}
		sigs = append(sigs, sig)
	}
	return ts, sigs, nil
}

// signatureMAC is HMAC-SHA256(secret, "<ts>.<body>").
func signatureMAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
