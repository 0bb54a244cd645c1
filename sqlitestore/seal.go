package sqlitestore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// Additional data bound into each sealed value, so that a sealed value
// copied into another row does not open there.
const (
	adKeyCheck   = "key-check"
	adSigningKey = "signing-key"
)

func adSecret(subscriptionID string) string { return "subscription-secret:" + subscriptionID }

// sealer encrypts secrets with AES-256-GCM. A nil *sealer stores them as
// they are.
type sealer struct {
	aead cipher.AEAD
}

func newSealer(key []byte) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// seal returns nonce || ciphertext, or plain itself without a key.
func (s *sealer) seal(plain []byte, ad string) []byte {
	if s == nil {
		return plain
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	// crypto/rand.Read never fails; it crashes the program if it must.
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, []byte(ad))
}

// open reverses seal.
func (s *sealer) open(sealed []byte, ad string) ([]byte, error) {
	if s == nil {
		return sealed, nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sqlitestore: sealed value is truncated")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(ad))
	if err != nil {
		return nil, errors.New("sqlitestore: cannot decrypt a stored secret: wrong encryption key or corrupt data")
	}
	return plain, nil
}
