// Package webhooksig holds the MACs of the two HMAC signature schemes, so
// that the engine, which signs, and package receiver, which verifies,
// compute them in one place. The header formats are receiver's.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
)

// SecretPrefix starts every webhook secret, in both schemes.
const SecretPrefix = "whsec_"

// StreamhooksMAC is spec 001's HMAC-SHA256(secret, "<ts>.<body>"), keyed
// with the whole secret string, prefix included.
func StreamhooksMAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// StandardMAC is Standard Webhooks' HMAC-SHA256(key, "<id>.<ts>.<body>").
func StandardMAC(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
