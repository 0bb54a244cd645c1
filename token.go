package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
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
// subject, the epoch it was issued for, and the expiry.
type tokenClaims struct {
	Epoch int64 `json:"epoch"`
	jwt.RegisteredClaims
}

// tokenHeader is the first segment of every token: the base64url of
// {"alg":"HS256","typ":"JWT"}, as a JWT library writes it. The engine is the
// only issuer, so a token with any other header is not one of its own; this
// also rules out every other algorithm, "none" included.
const tokenHeader = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// tokenEncoding decodes segments strictly: lax base64 ignores the unused
// low bits of a segment's last character, so other strings than the issued
// one would verify.
var tokenEncoding = base64.RawURLEncoding.Strict()

// tokens issues and verifies callback tokens: HS256 JWTs bound to one
// consumer and epoch. It writes and checks them itself rather than through a
// JWT library, whose generic parsing was the largest cost of a callback.
type tokens struct {
	key   []byte
	ttl   time.Duration
	clock clock.Clock
}

func newTokens(key []byte, ttl time.Duration, clk clock.Clock) *tokens {
	return &tokens{key: key, ttl: ttl, clock: clk}
}

// tokenPayload is the claims segment as the engine writes it: the fields of
// tokenClaims that it sets, in the order a JWT library writes them, with
// times in whole seconds. Decoding it is much cheaper than decoding
// jwt.RegisteredClaims.
type tokenPayload struct {
	Epoch     int64  `json:"epoch"`
	Subject   string `json:"sub,omitempty"`
	ExpiresAt int64  `json:"exp,omitempty"`
	IssuedAt  int64  `json:"iat,omitempty"`
}

// issue returns a fresh token for the consumer at epoch.
func (t *tokens) issue(consumerID string, epoch int64) (string, error) {
	now := t.clock.Now()
	payload, err := json.Marshal(tokenPayload{
		Epoch:     epoch,
		Subject:   consumerID,
		ExpiresAt: now.Add(t.ttl).Unix(),
		IssuedAt:  now.Unix(),
	})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	b := make([]byte, 0, len(tokenHeader)+2+enc.EncodedLen(len(payload))+enc.EncodedLen(sha256.Size))
	b = append(b, tokenHeader+"."...)
	b = enc.AppendEncode(b, payload)
	sig := t.sign(b)
	b = append(b, '.')
	return string(enc.AppendEncode(b, sig)), nil
}

func (t *tokens) sign(signingInput []byte) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write(signingInput)
	return m.Sum(nil)
}

// verify checks raw's signature and expiry. On errTokenExpired the returned
// claims are those of a validly signed token.
func (t *tokens) verify(raw string) (*tokenClaims, error) {
	// Even strict base64 skips line breaks; no issued token has one.
	if strings.ContainsAny(raw, "\r\n") {
		return nil, errTokenInvalid
	}
	rest, ok := strings.CutPrefix(raw, tokenHeader+".")
	if !ok {
		return nil, errTokenInvalid
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, errTokenInvalid
	}
	mac, err := tokenEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, t.sign([]byte(raw[:len(raw)-len(sig)-1]))) {
		return nil, errTokenInvalid
	}
	data, err := tokenEncoding.DecodeString(payload)
	if err != nil {
		return nil, errTokenInvalid
	}
	var p tokenPayload
	if json.Unmarshal(data, &p) != nil || p.ExpiresAt == 0 {
		return nil, errTokenInvalid
	}
	claims := &tokenClaims{Epoch: p.Epoch, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   p.Subject,
		ExpiresAt: jwt.NewNumericDate(time.Unix(p.ExpiresAt, 0)),
	}}
	if p.IssuedAt != 0 {
		claims.IssuedAt = jwt.NewNumericDate(time.Unix(p.IssuedAt, 0))
	}
	if !t.clock.Now().Before(claims.ExpiresAt.Time) {
		return claims, errTokenExpired
	}
	return claims, nil
}

// renew returns raw itself while more than a quarter of its lifetime
// remains, and a fresh token for the same consumer and epoch after that.
func (t *tokens) renew(raw string, claims *tokenClaims) (string, error) {
	if claims.ExpiresAt != nil && t.clock.Until(claims.ExpiresAt.Time) > t.ttl/4 {
		return raw, nil
	}
	return t.issue(claims.Subject, claims.Epoch)
}
