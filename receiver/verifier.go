package receiver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// DefaultTolerance is the clock skew allowed between the signing time and
// verification, in either direction: spec 001's five minutes, which
// Standard Webhooks recommends too.
const DefaultTolerance = 5 * time.Minute

// maxSignatures bounds the signatures Verify reads from one header: a
// rotation sends two, and a cap keeps a hostile header cheap.
const maxSignatures = 8

// ErrInvalidSignature is wrapped by every error Verify returns, so that a
// handler can answer 401 on errors.Is(err, ErrInvalidSignature).
var ErrInvalidSignature = errors.New("receiver: invalid webhook signature")

// A Verifier checks the signatures of the requests an engine sends, in
// whichever scheme the subscription uses: with its secrets (WithSecret)
// for the HMAC schemes, with the engine's published keys (WithJWKS) for
// Ed25519. It is safe for concurrent use.
type Verifier struct {
	secrets   []secret
	jwks      *jwksCache // nil without WithJWKS
	tolerance time.Duration
	now       func() time.Time
}

// secret is one configured secret with the key each scheme derives from
// it.
type secret struct {
	raw string // spec 001 keys with the whole string
	// standard is the Standard Webhooks key, the base64 after "whsec_";
	// nil if the secret is not base64 there, so not one of that scheme.
	standard []byte
}

// An Option configures a Verifier.
type Option func(*Verifier) error

// WithSecret adds a subscription secret, the webhook_secret its creation
// returned. A Verifier given two, as while a receiver moves to a rotated
// secret, accepts a signature made with either.
func WithSecret(s string) Option {
	return func(v *Verifier) error {
		if s == "" {
			return errors.New("receiver: empty secret")
		}
		// Standard Webhooks: the key is the base64 after the prefix.
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, webhooksig.SecretPrefix))
		if err != nil || len(key) == 0 {
			key = nil
		}
		v.secrets = append(v.secrets, secret{raw: s, standard: key})
		return nil
	}
}

// WithTolerance sets the clock skew allowed in either direction between
// a signature's time and the verifier's clock; the default is
// DefaultTolerance. Times are compared in whole seconds.
func WithTolerance(d time.Duration) Option {
	return func(v *Verifier) error {
		if d < 0 {
			return errors.New("receiver: negative tolerance")
		}
		v.tolerance = d
		return nil
	}
}

// WithClock sets the clock the Verifier checks signature times against;
// the default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(v *Verifier) error {
		if now == nil {
			return errors.New("receiver: nil clock")
		}
		v.now = now
		return nil
	}
}

// NewVerifier returns a Verifier with opts. It needs at least one secret
// or a key set (WithJWKS).
func NewVerifier(opts ...Option) (*Verifier, error) {
	v := &Verifier{tolerance: DefaultTolerance, now: time.Now}
	for _, opt := range opts {
		if err := opt(v); err != nil {
			return nil, err
		}
	}
	if len(v.secrets) == 0 && v.jwks == nil {
		return nil, errors.New("receiver: no secret and no key set; use WithSecret or WithJWKS")
	}
	return v, nil
}

// Verify checks that h, the headers of a request, sign body, the request
// body exactly as received: re-encoded JSON does not verify. It reads the
// scheme from SignatureHeader: "t=<unix>,kid=" starts the Ed25519 one,
// verified with the key set of WithJWKS; "t=" otherwise starts spec 001's,
// which signs the time and body; anything else is Standard Webhooks',
// which signs IDHeader, TimestampHeader and the body. Every error wraps
// ErrInvalidSignature, except a failure to fetch the key set, which wraps
// ErrKeySetUnavailable.
//
// ctx bounds fetching the key set, which only the Ed25519 scheme needs.
func (v *Verifier) Verify(ctx context.Context, h http.Header, body []byte) error {
	sig := h.Get(SignatureHeader)
	switch {
	case sig == "":
		return invalid("missing %s header", SignatureHeader)
	case strings.HasPrefix(sig, "t=") && isEd25519Header(sig):
		return v.verifyEd25519(ctx, sig, body)
	case strings.HasPrefix(sig, "t="):
		return v.verifyStreamhooks(sig, body)
	default:
		return v.verifyStandard(h.Get(IDHeader), h.Get(TimestampHeader), sig, body)
	}
}

// checkTime checks ts, decimal digits, against the clock and tolerance,
// in whole seconds on both sides, as spec 001's reference verifier
// compares them.
func (v *Verifier) checkTime(ts string) error {
	if ts == "" || strings.Trim(ts, "0123456789") != "" {
		return invalid("malformed header: timestamp is not a decimal number")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return invalid("malformed header: timestamp out of range")
	}
	// The distance is taken in uint64, which holds that of any two int64s:
	// a time.Duration saturates, and a far-off timestamp would pass.
	nowSec := v.now().Unix()
	if sec <= nowSec && v.outsideTolerance(uint64(nowSec)-uint64(sec)) {
		return invalid("timestamp too old")
	}
	if sec > nowSec && v.outsideTolerance(uint64(sec)-uint64(nowSec)) {
		return invalid("timestamp in the future")
	}
	return nil
}

// outsideTolerance reports whether a skew of seconds exceeds the
// tolerance.
func (v *Verifier) outsideTolerance(seconds uint64) bool {
	return seconds > uint64(v.tolerance/time.Second)
}

// invalid returns an error wrapping ErrInvalidSignature.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSignature}, args...)...)
}
