// Package seal encrypts the secrets a durable Store keeps (webhook secrets,
// the token signing key) with AES-256-GCM, binding each to where it is
// stored so that a sealed value copied elsewhere does not open there.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// Additional data of the values every Store seals. A Store seals a known
// value with ADKeyCheck when it creates an encrypted database, so that a
// wrong key fails when it opens rather than at the first secret read.
const (
	ADKeyCheck   = "key-check"
	ADSigningKey = "signing-key"
	// ADWebhookKeys seals the Ed25519 webhook signing keys
	// (webhooks.WebhookKeyStore).
	ADWebhookKeys = "webhook-keys"
)

// ADSecret is the additional data of subscription id's webhook secret.
func ADSecret(subscriptionID string) string { return "subscription-secret:" + subscriptionID }

// ADSubscriptionData is the additional data of subscription id's data
// (webhooks.Subscription.MarshalData).
func ADSubscriptionData(subscriptionID string) string { return "subscription-data:" + subscriptionID }

// ADDeliveryAttempt is the associated data of a consumer's logged delivery
// attempt, whose response preview may hold what a webhook echoed back.
func ADDeliveryAttempt(consumerID string) string { return "delivery-attempt:" + consumerID }

// Sealer encrypts values with AES-256-GCM. A nil *Sealer leaves them as
// they are, for a Store without an encryption key.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a Sealer for a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("encryption key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce || ciphertext of plain, or plain itself without a key.
func (s *Sealer) Seal(plain []byte, ad string) []byte {
	if s == nil {
		return plain
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	// crypto/rand.Read never fails; it crashes the program if it must.
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, []byte(ad))
}

// Open reverses Seal with the same additional data.
func (s *Sealer) Open(sealed []byte, ad string) ([]byte, error) {
	if s == nil {
		return sealed, nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value is truncated")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(ad))
	if err != nil {
		return nil, errors.New("cannot decrypt a stored secret: wrong encryption key or corrupt data")
	}
	return plain, nil
}
