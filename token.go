package webhooks

import (
	"errors"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/golang-jwt/jwt/v5"
)

// Token verification failures. errTokenExpired is returned only for a token
// whose signature is valid, so its claims can be trusted.
var (
	errTokenInvalid = errors.New("token is malformed or its signature is invalid")
	errTokenExpired = errors.New("token has expired")
)

// tokenClaims are the claims of a callback token: the consumer ID as the
// subject, the epoch and wake it was issued for, and the expiry. The wake
// ID tells incarnations apart: a consumer removed and spawned again under
// the same ID counts its epochs from the start, but its wake IDs are new.
type tokenClaims struct {
	Epoch  int64  `json:"epoch"`
	WakeID string `json:"wake"`
	jwt.RegisteredClaims
}

// tokens issues and verifies callback tokens: HS256 JWTs bound to one
// consumer and epoch.
type tokens struct {
	key    []byte
	ttl    time.Duration
	clock  clock.Clock
	parser *jwt.Parser
}

func newTokens(key []byte, ttl time.Duration, clk clock.Clock) *tokens {
	return &tokens{
		key:   key,
		ttl:   ttl,
		clock: clk,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithTimeFunc(clk.Now),
			jwt.WithExpirationRequired(),
			// Lax base64 ignores a segment's unused low bits, so other
			// strings than the issued one would verify.
			jwt.WithStrictDecoding(),
		),
	}
}

// issue returns a fresh token for the consumer's wake wakeID at epoch.
func (t *tokens) issue(consumerID string, epoch int64, wakeID string) (string, error) {
	now := t.clock.Now()
	claims := tokenClaims{
		Epoch:  epoch,
		WakeID: wakeID,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   consumerID,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(t.ttl)),
		},
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.key)
}

// verify checks raw's signature and expiry. On errTokenExpired the returned
// claims are those of a validly signed token.
func (t *tokens) verify(raw string) (*tokenClaims, error) {
	// Even strict base64 skips line breaks; no issued token has one.
	if strings.ContainsAny(raw, "\r\n") {
		return nil, errTokenInvalid
	}
	var claims tokenClaims
	_, err := t.parser.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return t.key, nil })
	switch {
	case claims.WakeID == "":
		// Every token is issued for a wake; one without is not ours.
		return nil, errTokenInvalid
	case err == nil:
		return &claims, nil
	case errors.Is(err, jwt.ErrTokenExpired) && !errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return &claims, errTokenExpired
	default:
		return nil, errTokenInvalid
	}
}

// renew returns raw itself while more than a quarter of its lifetime
// remains, and a fresh token for the same consumer and epoch after that.
func (t *tokens) renew(raw string, claims *tokenClaims) (string, error) {
	if claims.ExpiresAt != nil && t.clock.Until(claims.ExpiresAt.Time) > t.ttl/4 {
		return raw, nil
	}
	return t.issue(claims.Subject, claims.Epoch, claims.WakeID)
}
