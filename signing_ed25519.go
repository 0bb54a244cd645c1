package webhooks

import (
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
	"github.com/streamhooks/webhooks/receiver"
)

// SignatureEd25519 signs with the engine's Ed25519 key, as the upstream
// Durable Streams protocol does: "t=<unix>,kid=<key id>,ed25519=<base64url
// signature of "<unix>.<body>">". Receivers verify with the public keys of
// the engine's JWKS (Engine.JWKSHandler), which they select by kid; the
// subscription's secret signs nothing. Keys rotate engine-wide
// (Engine.RotateWebhookKey).
const SignatureEd25519 SignatureScheme = "ed25519"

// signEd25519 sets h's delivery id, timestamp and signature headers for a
// POST of body with id deliveryID, signed at now with the key that signs
// then.
func (r *webhookKeyring) signEd25519(h http.Header, deliveryID string, now time.Time, body []byte) {
	ts := strconv.FormatInt(now.Unix(), 10)
	k := r.signing(now)
	sig := ed25519.Sign(k.private, webhooksig.Ed25519Message(ts, body))
	h.Set(receiver.IDHeader, deliveryID)
	h.Set(receiver.TimestampHeader, ts)
	h.Set(receiver.SignatureHeader, "t="+ts+",kid="+k.kid+",ed25519="+base64.RawURLEncoding.EncodeToString(sig))
}
