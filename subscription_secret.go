package webhooks

import (
	"encoding/base64"
	"strings"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// minSecretDistinctBytes is how many distinct byte values a client's key
// must hold: 24 random bytes hold 16 or more but with a chance below
// 1e-9, while a word, a repeated pattern or a counter hold far fewer.
const minSecretDistinctBytes = 16

// ValidateSecret reports whether a client may choose secret as a
// subscription's signing secret, with a *ValidationError of field
// "secret" if not. The rule is Standard Webhooks' (and Svix's) for every
// signature scheme: "whsec_" and the standard base64 of a key of 24 to 64
// bytes. The key must also look random: at least 16 distinct byte values.
// A spec-001 subscription (SignatureStreamhooks) signs with the whole
// string, as it does with the secrets the engine makes, which pass this
// check too. The error never quotes the secret.
func ValidateSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, webhooksig.SecretPrefix)
	if !ok {
		return invalid("secret", "secret must start with %q", webhooksig.SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return invalid("secret", "secret must be %q and standard base64", webhooksig.SecretPrefix)
	}
	if len(key) < minStandardKey || len(key) > maxStandardKey {
		return invalid("secret", "secret's key must be %d to %d bytes; it is %d", minStandardKey, maxStandardKey, len(key))
	}
	var seen [256]bool
	distinct := 0
	for _, c := range key {
		if !seen[c] {
			seen[c], distinct = true, distinct+1
		}
	}
	if distinct < minSecretDistinctBytes {
		return invalid("secret", "secret's key has too little entropy: use %d or more random bytes", minStandardKey)
	}
	return nil
}
