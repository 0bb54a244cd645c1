// The engine signs every POST it sends; package receiver verifies them,
// with the same MACs (internal/webhooksig).

package webhooks

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
	"github.com/streamhooks/webhooks/receiver"
)

// Standard Webhooks asks for keys of 24 to 64 bytes.
const (
	minStandardKey = 24
	maxStandardKey = 64
)

// errStandardSecret reports a secret the Standard Webhooks scheme cannot
// key with. It never quotes the secret, so that it is safe to log.
var errStandardSecret = errors.New("webhooks: secret is not whsec_ and 24 to 64 bytes in base64")

// signDelivery sets h's delivery id, timestamp and signature headers for a
// POST of body with id deliveryID, signed at now in sub's scheme. Until
// sub.PreviousSecretExpiresAt, the previous secret signs too, after the
// current one: a verifier that reads only the first signature, as spec
// 001's reference does, needs the new secret. On error h is unchanged.
func signDelivery(h http.Header, sub *Subscription, deliveryID string, now time.Time, body []byte) error {
	secrets := []string{sub.Secret}
	if sub.PreviousSecret != "" && now.Before(sub.PreviousSecretExpiresAt) {
		secrets = append(secrets, sub.PreviousSecret)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	var sig string
	switch sub.Signature {
	case "", SignatureStreamhooks:
		sig = "t=" + ts
		for _, s := range secrets {
			sig += ",sha256=" + hex.EncodeToString(webhooksig.StreamhooksMAC(s, ts, body))
		}
	case SignatureStandard:
		sigs := make([]string, len(secrets))
		for i, s := range secrets {
			key, err := standardKey(s)
			if err != nil {
				return err
			}
			sigs[i] = "v1," + base64.StdEncoding.EncodeToString(webhooksig.StandardMAC(key, deliveryID, ts, body))
		}
		sig = strings.Join(sigs, " ")
	default:
		return fmt.Errorf("webhooks: unknown signature scheme %q", sub.Signature)
	}
	// The Standard Webhooks names canonicalise to the ones spec 001 uses.
	h.Set(receiver.IDHeader, deliveryID)
	h.Set(receiver.TimestampHeader, ts)
	h.Set(receiver.SignatureHeader, sig)
	return nil
}

// standardKey returns the HMAC key of a Standard Webhooks secret: the
// base64 after "whsec_". A spec-001 secret's 64 hex digits decode too, to
// 48 bytes, so a subscription can change scheme and keep its secret.
func standardKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, webhooksig.SecretPrefix)
	if !ok {
		return nil, errStandardSecret
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < minStandardKey || len(key) > maxStandardKey {
		return nil, errStandardSecret
	}
	return key, nil
}

// newSecret returns a random secret for scheme: "whsec_" and 32 random
// bytes, in hex for spec 001 as before, in base64 for Standard Webhooks,
// whose verifiers decode their key from it.
func newSecret(scheme SignatureScheme) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails: it crashes the program instead
	if scheme == SignatureStandard {
		return webhooksig.SecretPrefix + base64.StdEncoding.EncodeToString(b)
	}
	return webhooksig.SecretPrefix + hex.EncodeToString(b)
}
