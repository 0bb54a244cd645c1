package inbox

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// GitHub is GitHub's scheme: X-Hub-Signature-256 is "sha256=" and the hex
// HMAC-SHA256 of the body under Secret; X-GitHub-Delivery is the delivery
// id. A record keeps X-GitHub-Event for dispatch.
type GitHub struct {
	Secret string
}

// Headers implements Scheme.
func (GitHub) Headers() []string {
	return []string{"X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event", "X-GitHub-Hook-ID"}
}

// DeliveryID implements Scheme.
func (GitHub) DeliveryID(h http.Header, _ []byte) string { return h.Get("X-GitHub-Delivery") }

// Verify implements Scheme.
func (s GitHub) Verify(rec *Record) error {
	if s.Secret == "" {
		return fmt.Errorf("%w: empty", ErrUnusableSecret)
	}
	const name = "X-Hub-Signature-256"
	v, err := header(rec, name)
	if err != nil {
		return err
	}
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok {
		return fmt.Errorf("%w: %s does not start with sha256=", ErrMalformedSignature, name)
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%w: %s is not hex", ErrMalformedSignature, name)
	}
	if !matchAny(sum([]byte(s.Secret), rec.Body), [][]byte{sig}) {
		return ErrSignatureMismatch
	}
	return nil
}

// Stripe is Stripe's scheme: Stripe-Signature is "t=<Unix seconds>" and one
// or more "v1=<hex HMAC-SHA256 of "<t>.<body>" under Secret>", separated by
// commas; the delivery id is the event's id, the body's "id" field.
type Stripe struct {
	Secret string
	// Tolerance bounds the distance between t and the record's
	// ReceivedAt; DefaultTolerance if zero.
	Tolerance time.Duration
}

// Headers implements Scheme.
func (Stripe) Headers() []string { return []string{"Stripe-Signature"} }

// DeliveryID implements Scheme.
func (Stripe) DeliveryID(_ http.Header, body []byte) string { return jsonField(body, "id") }

// Verify implements Scheme.
func (s Stripe) Verify(rec *Record) error {
	if s.Secret == "" {
		return fmt.Errorf("%w: empty", ErrUnusableSecret)
	}
	const name = "Stripe-Signature"
	v, err := header(rec, name)
	if err != nil {
		return err
	}
	var ts string
	var sigs [][]byte
	for _, item := range strings.Split(v, ",") {
		key, value, _ := strings.Cut(strings.TrimSpace(item), "=")
		switch key {
		case "t":
			ts = value
		case "v1":
			sig, err := hex.DecodeString(value)
			if err != nil {
				return fmt.Errorf("%w: a v1 in %s is not hex", ErrMalformedSignature, name)
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" {
		return fmt.Errorf("%w: %s has no t=", ErrMalformedSignature, name)
	}
	sec, err := parseTimestamp(name+" t", ts)
	switch {
	case err != nil:
		return err
	case len(sigs) == 0:
		return fmt.Errorf("%w: %s has no v1 signature", ErrMissingSignature, name)
	case !matchAny(sum([]byte(s.Secret), []byte(ts), []byte("."), rec.Body), sigs):
		return ErrSignatureMismatch
	}
	return checkTolerance(rec, sec, s.Tolerance)
}

// StandardWebhooks is the scheme of the Standard Webhooks specification,
// which Svix also follows under svix- header names; both are accepted.
// Webhook-Signature is a space-separated list of "v1,<base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>">", from Webhook-Id and Webhook-Timestamp (Unix
// seconds); Webhook-Id is the delivery id. The key is Secret base64-decoded
// after its "whsec_" prefix. Signatures of other versions are ignored.
type StandardWebhooks struct {
	Secret string
	// Tolerance bounds the distance between Webhook-Timestamp and the
	// record's ReceivedAt; DefaultTolerance if zero.
	Tolerance time.Duration
}

// Headers implements Scheme.
func (StandardWebhooks) Headers() []string {
	return []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Svix-Id", "Svix-Timestamp", "Svix-Signature"}
}

// DeliveryID implements Scheme.
func (StandardWebhooks) DeliveryID(h http.Header, _ []byte) string {
	if id := h.Get("Webhook-Id"); id != "" {
		return id
	}
	return h.Get("Svix-Id")
}

// key is the HMAC key of the secret.
func (s StandardWebhooks) key() ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.Secret, "whsec_"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: not base64 after whsec_", ErrUnusableSecret)
	case len(key) == 0:
		return nil, fmt.Errorf("%w: empty", ErrUnusableSecret)
	}
	return key, nil
}

// checkSecret implements secretChecker: a secret that is set must be
// usable.
func (s StandardWebhooks) checkSecret() error {
	if s.Secret == "" {
		return nil
	}
	if _, err := s.key(); err != nil {
		return errors.New("is not base64 after whsec_, or is empty: a Standard Webhooks secret is whsec_ and the base64 of the key")
	}
	return nil
}

// Verify implements Scheme.
func (s StandardWebhooks) Verify(rec *Record) error {
	key, err := s.key()
	if err != nil {
		return err
	}
	prefix := "Webhook-"
	if rec.Header.Get("Webhook-Signature") == "" && rec.Header.Get("Svix-Signature") != "" {
		prefix = "Svix-"
	}
	var id, ts, list string
	for _, h := range []struct {
		name string
		v    *string
	}{{prefix + "Id", &id}, {prefix + "Timestamp", &ts}, {prefix + "Signature", &list}} {
		if *h.v, err = header(rec, h.name); err != nil {
			return err
		}
	}
	sec, err := parseTimestamp(prefix+"Timestamp", ts)
	if err != nil {
		return err
	}
	var sigs [][]byte
	for _, item := range strings.Fields(list) {
		version, b64, _ := strings.Cut(item, ",")
		if version != "v1" {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("%w: a v1 in %sSignature is not base64", ErrMalformedSignature, prefix)
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: %sSignature has no v1 signature", ErrMissingSignature, prefix)
	}
	if !matchAny(sum(key, []byte(id), []byte("."), []byte(ts), []byte("."), rec.Body), sigs) {
		return ErrSignatureMismatch
	}
	return checkTolerance(rec, sec, s.Tolerance)
}

// Slack is Slack's scheme: X-Slack-Signature is "v0=" and the hex
// HMAC-SHA256 of "v0:<X-Slack-Request-Timestamp>:<body>" under the signing
// Secret. Slack sends no delivery id in a header; the delivery id is the
// Events API's "event_id" field of a JSON body, and other deliveries
// (slash commands, interactivity) are not deduplicated.
type Slack struct {
	Secret string
	// Tolerance bounds the distance between X-Slack-Request-Timestamp and
	// the record's ReceivedAt; DefaultTolerance if zero.
	Tolerance time.Duration
}

// Headers implements Scheme.
func (Slack) Headers() []string {
	return []string{"X-Slack-Signature", "X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "X-Slack-Retry-Reason"}
}

// DeliveryID implements Scheme.
func (Slack) DeliveryID(_ http.Header, body []byte) string { return jsonField(body, "event_id") }

// Verify implements Scheme.
func (s Slack) Verify(rec *Record) error {
	if s.Secret == "" {
		return fmt.Errorf("%w: empty", ErrUnusableSecret)
	}
	const sigName, tsName = "X-Slack-Signature", "X-Slack-Request-Timestamp"
	v, err := header(rec, sigName)
	if err != nil {
		return err
	}
	ts, err := header(rec, tsName)
	if err != nil {
		return err
	}
	sec, err := parseTimestamp(tsName, ts)
	if err != nil {
		return err
	}
	hexSig, ok := strings.CutPrefix(v, "v0=")
	if !ok {
		return fmt.Errorf("%w: %s does not start with v0=", ErrMalformedSignature, sigName)
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return fmt.Errorf("%w: %s is not hex", ErrMalformedSignature, sigName)
	}
	if !matchAny(sum([]byte(s.Secret), []byte("v0:"), []byte(ts), []byte(":"), rec.Body), [][]byte{sig}) {
		return ErrSignatureMismatch
	}
	return checkTolerance(rec, sec, s.Tolerance)
}

// Encoding is how HMAC writes a signature.
type Encoding int

// Encodings of a signature.
const (
	Hex    Encoding = iota // lowercase or uppercase hex
	Base64                 // standard base64, with padding
)

// HMAC is a generic scheme: the header named Header holds Prefix and the
// HMAC-SHA256 of the body under Secret, in Encoding. It signs no timestamp,
// so it cannot tell a replay.
type HMAC struct {
	Secret string
	// Header names the header with the signature; it is required.
	Header string
	// Prefix, if set, precedes the signature, e.g. "sha256=".
	Prefix   string
	Encoding Encoding
	// DeliveryIDHeader, if set, names the header with the delivery id.
	DeliveryIDHeader string
}

// Headers implements Scheme.
func (s HMAC) Headers() []string {
	if s.DeliveryIDHeader == "" {
		return []string{s.Header}
	}
	return []string{s.Header, s.DeliveryIDHeader}
}

// DeliveryID implements Scheme.
func (s HMAC) DeliveryID(h http.Header, _ []byte) string {
	if s.DeliveryIDHeader == "" {
		return ""
	}
	return h.Get(s.DeliveryIDHeader)
}

// Verify implements Scheme.
func (s HMAC) Verify(rec *Record) error {
	if s.Secret == "" {
		return fmt.Errorf("%w: empty", ErrUnusableSecret)
	}
	v, err := header(rec, s.Header)
	if err != nil {
		return err
	}
	text, ok := strings.CutPrefix(v, s.Prefix)
	if !ok {
		return fmt.Errorf("%w: %s does not start with %s", ErrMalformedSignature, s.Header, s.Prefix)
	}
	var sig []byte
	switch s.Encoding {
	case Hex:
		sig, err = hex.DecodeString(text)
	case Base64:
		sig, err = base64.StdEncoding.DecodeString(text)
	default:
		return fmt.Errorf("%w: unknown encoding %d", ErrMalformedSignature, s.Encoding)
	}
	if err != nil {
		return fmt.Errorf("%w: %s is not in the expected encoding", ErrMalformedSignature, s.Header)
	}
	if !matchAny(sum([]byte(s.Secret), rec.Body), [][]byte{sig}) {
		return ErrSignatureMismatch
	}
	return nil
}

// Telegram is the Telegram Bot API's scheme: a bot registered with
// setWebhook's secret_token receives it, as sent, in
// X-Telegram-Bot-Api-Secret-Token on every update. Telegram signs no body
// and no timestamp, so the token proves only the sender. The token is a
// credential, so a record keeps only its SHA-256, never the token. The
// delivery id is the update's "update_id".
type Telegram struct {
	// SecretToken is setWebhook's secret_token: 1 to 256 characters of
	// A-Z, a-z, 0-9, '_' and '-'.
	SecretToken string
}

// telegramTokenHeader carries a bot's secret_token.
const telegramTokenHeader = "X-Telegram-Bot-Api-Secret-Token"

// Headers implements Scheme.
func (Telegram) Headers() []string { return []string{telegramTokenHeader} }

// DeliveryID implements Scheme: the update's update_id, a number.
func (Telegram) DeliveryID(_ http.Header, body []byte) string {
	return jsonNumberField(body, "update_id")
}

// telegramDigestPrefix starts the header value a record keeps in place of
// the token: the prefix and the hex SHA-256 of the token.
const telegramDigestPrefix = "sha256:"

// sealHeaders implements headerSealer: the record keeps the token's digest.
func (Telegram) sealHeaders(h http.Header) {
	if v := h.Get(telegramTokenHeader); v != "" {
		d := sha256.Sum256([]byte(v))
		h.Set(telegramTokenHeader, telegramDigestPrefix+hex.EncodeToString(d[:]))
	}
}

// Verify implements Scheme, on a record's digest of the token or on the
// token itself. It compares digests, so the time it takes tells nothing of
// the token's content or length.
func (s Telegram) Verify(rec *Record) error {
	if !validTelegramToken(s.SecretToken) {
		return fmt.Errorf("%w: a Telegram secret_token is 1 to 256 characters of A-Z, a-z, 0-9, _ and -", ErrUnusableSecret)
	}
	got, err := header(rec, telegramTokenHeader)
	if err != nil {
		return err
	}
	sent := sha256.Sum256([]byte(got))
	if hexDigest, ok := strings.CutPrefix(got, telegramDigestPrefix); ok {
		d, err := hex.DecodeString(hexDigest)
		if err != nil || len(d) != sha256.Size {
			return fmt.Errorf("%w: %s holds no SHA-256 digest after %s", ErrMalformedSignature, telegramTokenHeader, telegramDigestPrefix)
		}
		copy(sent[:], d)
	}
	want := sha256.Sum256([]byte(s.SecretToken))
	if subtle.ConstantTimeCompare(want[:], sent[:]) != 1 {
		return ErrSignatureMismatch
	}
	return nil
}

// validTelegramToken reports whether t is a secret_token setWebhook takes.
func validTelegramToken(t string) bool {
	if len(t) == 0 || len(t) > 256 {
		return false
	}
	for _, c := range []byte(t) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
