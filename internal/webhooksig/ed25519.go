package webhooksig

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
)

// KeyIDPrefix starts every Ed25519 key id: the protocol's "ds_".
const KeyIDPrefix = "ds_"

// JWK is the public half of an Ed25519 signing key as a JSON Web Key
// (RFC 8037), with the members the protocol's JWKS shows.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	X   string `json:"x"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns pub as a JWK with its key id.
func PublicJWK(pub ed25519.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", Kid: KeyID(pub), Use: "sig", Alg: "EdDSA",
		X: base64.RawURLEncoding.EncodeToString(pub)}
}

// KeyID is "ds_" and the RFC 7638 thumbprint of pub: the unpadded base64url
// SHA-256 of its canonical JWK, the required members in lexical order with
// no whitespace. Every member is base64url or a fixed name, so the JSON
// needs no escaping.
func KeyID(pub ed25519.PublicKey) string {
	canonical := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canonical))
	return KeyIDPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// Ed25519Key decodes the public key of j, which must be an Ed25519 OKP
// key for signatures. Its kid need not be its thumbprint, which the
// protocol only recommends: the key, not the kid, makes a signature
// verify.
func Ed25519Key(j JWK) (ed25519.PublicKey, error) {
	if j.Kty != "OKP" || j.Crv != "Ed25519" {
		return nil, errors.New("not an Ed25519 OKP key")
	}
	if j.Use != "" && j.Use != "sig" {
		return nil, errors.New("key is not for signatures")
	}
	if j.Alg != "" && j.Alg != "EdDSA" {
		return nil, errors.New("key is not for EdDSA")
	}
	x, err := base64.RawURLEncoding.DecodeString(j.X)
	if err != nil || len(x) != ed25519.PublicKeySize {
		return nil, errors.New("x is not a base64url Ed25519 public key")
	}
	return ed25519.PublicKey(x), nil
}

// Ed25519Message is what an Ed25519 webhook signature signs:
// "<ts>.<body>".
func Ed25519Message(ts string, body []byte) []byte {
	msg := make([]byte, 0, len(ts)+1+len(body))
	msg = append(msg, ts...)
	msg = append(msg, '.')
	return append(msg, body...)
}
