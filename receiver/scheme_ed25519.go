package receiver

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"strings"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// isEd25519Header reports whether a header that starts "t=" is the
// Ed25519 scheme's, whose second entry is the kid.
func isEd25519Header(header string) bool {
	_, rest, _ := strings.Cut(header, ",")
	return strings.HasPrefix(rest, "kid=")
}

// verifyEd25519 checks an Ed25519 header, "t=<unix>,kid=<key id>,
// ed25519=<unpadded base64url signature>": the timestamp first, so that a
// stale request fetches nothing, then the signature of "<t>.<body>" under
// the key the JWKS gives kid.
func (v *Verifier) verifyEd25519(ctx context.Context, header string, body []byte) error {
	parts := strings.Split(header, ",")
	if len(parts) != 3 {
		return invalid("malformed header: want t=<unix>,kid=<key id>,ed25519=<base64url>")
	}
	ts := strings.TrimPrefix(parts[0], "t=")
	kid, ok1 := strings.CutPrefix(parts[1], "kid=")
	b64, ok2 := strings.CutPrefix(parts[2], "ed25519=")
	if !ok1 || !ok2 || kid == "" {
		return invalid("malformed header: want t=<unix>,kid=<key id>,ed25519=<base64url>")
	}
	sig, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return invalid("malformed header: signature is not %d bytes of unpadded base64url", ed25519.SignatureSize)
	}
	if err := v.checkTime(ts); err != nil {
		return err
	}
	if v.jwks == nil {
		return invalid("an Ed25519 signature, and no key set to verify it; use WithJWKS")
	}
	pub, err := v.jwks.key(ctx, kid, v.now)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, webhooksig.Ed25519Message(ts, body), sig) {
		return invalid("signature mismatch")
	}
	return nil
}
