package webhooksig

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"
)

// rfc8037X is the public key of RFC 8037's Ed25519 example (appendix A.2).
const rfc8037X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"

// TestKeyIDKnownAnswer: RFC 8037 appendix A.3 gives the RFC 7638
// thumbprint of its example key, and python3's hashlib and base64 over the
// canonical JSON give the same.
func TestKeyIDKnownAnswer(t *testing.T) {
	x, err := base64.RawURLEncoding.DecodeString(rfc8037X)
	if err != nil {
		t.Fatal(err)
	}
	const want = "ds_kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
	if got := KeyID(ed25519.PublicKey(x)); got != want {
		t.Errorf("KeyID = %s, want %s", got, want)
	}
	j := PublicJWK(ed25519.PublicKey(x))
	if j.X != rfc8037X || j.Kid != want || j.Kty != "OKP" || j.Crv != "Ed25519" || j.Alg != "EdDSA" || j.Use != "sig" {
		t.Errorf("PublicJWK = %+v", j)
	}
}

// TestEd25519KeyRefuses keys a verifier must not use.
func TestEd25519KeyRefuses(t *testing.T) {
	good := JWK{Kty: "OKP", Crv: "Ed25519", Kid: "k", X: rfc8037X}
	if _, err := Ed25519Key(good); err != nil {
		t.Fatalf("good key: %v", err)
	}
	for name, mut := range map[string]func(*JWK){
		"kty":   func(j *JWK) { j.Kty = "EC" },
		"crv":   func(j *JWK) { j.Crv = "X25519" },
		"use":   func(j *JWK) { j.Use = "enc" },
		"alg":   func(j *JWK) { j.Alg = "ES256" },
		"short": func(j *JWK) { j.X = j.X[:20] },
		"pad":   func(j *JWK) { j.X += "=" },
	} {
		j := good
		mut(&j)
		if _, err := Ed25519Key(j); err == nil {
			t.Errorf("%s: accepted %+v", name, j)
		}
	}
}
