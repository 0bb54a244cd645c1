package webhooks

import "context"

// WebhookKeyStore is an optional Store capability: it keeps the Ed25519
// key pairs that sign webhooks (SignatureEd25519) and whose public halves
// the JWKS publishes, so that they survive restarts and every engine on
// the Store signs with, and publishes, the same keys. The engine finds it
// by type assertion on its Store; without it each engine makes a key pair
// of its own at Start, which a restart loses, so engines must not share
// such a Store for Ed25519 subscriptions. memstore, sqlitestore and pgstore
// implement it.
//
// The key set is one opaque value that the engine encodes and versions, so
// a change to it needs no migration in the Store. It holds private keys: a
// Store that seals secrets at rest seals it too.
type WebhookKeyStore interface {
	// WebhookKeys returns the stored key set, or nil if none is stored.
	WebhookKeys(ctx context.Context) ([]byte, error)
	// UpdateWebhookKeys is an atomic read-modify-write of the key set. It
	// calls fn with the stored value, nil if none is stored, and stores
	// what fn returns, which is not empty, and returns it. Racing calls,
	// through this Store or another on the same backend, take effect one
	// after the other: each fn sees what the one before stored. If fn
	// returns an error nothing changes and UpdateWebhookKeys returns that
	// error. fn may run more than once, each time on a fresh copy.
	UpdateWebhookKeys(ctx context.Context, fn func(old []byte) ([]byte, error)) ([]byte, error)
}
