package webhooks

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
	"github.com/streamhooks/webhooks/internal/webhooksig"
	"github.com/streamhooks/webhooks/receiver"
)

// The timing of Ed25519 webhook key rotation. Every attempt is signed
// afresh when it is sent, so no retry carries an old signature: a
// signature lives only as long as a receiver's replay window accepts it.
const (
	// WebhookKeyActivation is how long after a rotation its new key
	// starts to sign. Meanwhile every engine on the Store, which rereads
	// the key set twice in that time, publishes the key in its JWKS, so
	// that no receiver meets a signature whose key it cannot fetch.
	WebhookKeyActivation = 2 * webhookKeyRefresh
	// WebhookKeyRetention is how long the JWKS goes on publishing a key
	// after its successor starts to sign: a receiver's replay window
	// (receiver.DefaultTolerance), during which it still accepts what the
	// old key signed, and a minute for clocks that disagree.
	WebhookKeyRetention = receiver.DefaultTolerance + time.Minute
)

// webhookKeyRefresh is how often an engine rereads the key set, to learn
// of rotations made through other engines on its Store.
const webhookKeyRefresh = 30 * time.Second

// webhookKeySetVersion versions the key set's encoding in the Store.
const webhookKeySetVersion = 1

// webhookKeySet is the stored key set, oldest key first.
type webhookKeySet struct {
	V    int                `json:"v"`
	Keys []storedWebhookKey `json:"keys"`
}

// storedWebhookKey is one key pair, kept as its 32-byte seed, with the
// time from which it signs; the first key signs from the zero time.
type storedWebhookKey struct {
	Seed []byte    `json:"seed"`
	From time.Time `json:"from"`
}

// webhookKey is a key pair ready to sign, with its publication window.
type webhookKey struct {
	kid     string
	private ed25519.PrivateKey
	from    time.Time
	// until is when a later key starts to sign; zero while none is due.
	until time.Time
}

// webhookKeyring is an engine's copy of the key set: it signs and
// publishes from memory, and rereads the Store every webhookKeyRefresh.
type webhookKeyring struct {
	startstop.Base
	store WebhookKeyStore // nil: the keys are this engine's own
	clock clock.Clock
	log   *slog.Logger
	// reread tells a test that a periodic reread of the Store ended.
	reread func()

	mu   sync.RWMutex
	keys []webhookKey // oldest first; never empty once loaded
	own  []byte       // the encoded set of a ring without a Store
}

func newWebhookKeyring(store Store, cfg *config, reread func()) *webhookKeyring {
	ks, _ := store.(WebhookKeyStore)
	return &webhookKeyring{store: ks, clock: cfg.clock, log: cfg.logger, reread: reread}
}

// load reads the key set, creating its first key if none is stored.
func (r *webhookKeyring) load(ctx context.Context) error {
	if err := r.reload(ctx); err != nil {
		return err
	}
	r.mu.RLock()
	have := len(r.keys) > 0
	r.mu.RUnlock()
	if have {
		return nil
	}
	// Engines starting together race here; the first key stored wins.
	return r.update(ctx, func(set *webhookKeySet) {
		if len(set.Keys) == 0 {
			set.Keys = []storedWebhookKey{newStoredWebhookKey(time.Time{})}
		}
	})
}

// reload rereads the Store's key set.
func (r *webhookKeyring) reload(ctx context.Context) error {
	if r.store == nil {
		return nil
	}
	data, err := r.store.WebhookKeys(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: loading the webhook signing keys: %w", err)
	}
	return r.set(data)
}

// update applies fn to the stored key set, drops the keys past their
// retention, and keeps the result.
func (r *webhookKeyring) update(ctx context.Context, fn func(set *webhookKeySet)) error {
	now := r.clock.Now()
	change := func(old []byte) ([]byte, error) {
		set, err := decodeWebhookKeySet(old)
		if err != nil {
			return nil, err
		}
		fn(set)
		set.prune(now)
		return json.Marshal(set)
	}
	if r.store == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		data, err := change(r.own)
		if err != nil {
			return err
		}
		r.own = data
		return r.setLocked(data)
	}
	data, err := r.store.UpdateWebhookKeys(ctx, change)
	if err != nil {
		return fmt.Errorf("webhooks: storing the webhook signing keys: %w", err)
	}
	return r.set(data)
}

// set keeps the key set encoded in data.
func (r *webhookKeyring) set(data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setLocked(data)
}

func (r *webhookKeyring) setLocked(data []byte) error {
	set, err := decodeWebhookKeySet(data)
	if err != nil {
		return err
	}
	keys := make([]webhookKey, len(set.Keys))
	for i, k := range set.Keys {
		private := ed25519.NewKeyFromSeed(k.Seed)
		keys[i] = webhookKey{kid: webhooksig.KeyID(private.Public().(ed25519.PublicKey)), private: private, from: k.From}
	}
	for i := range keys {
		keys[i].until = set.until(i)
	}
	r.keys = keys
	return nil
}

// Start rereads the keys, in ctx, every webhookKeyRefresh until Stop, so
// that keys another engine added sign here too. A failed reread keeps the
// keys it had.
func (r *webhookKeyring) Start(ctx context.Context) {
	if r.store == nil {
		return
	}
	run, ok, stopped := r.StartInit(ctx)
	if !ok {
		return
	}
	// Made before Start returns, so no tick of a mock clock is missed.
	ticker := r.clock.Ticker(webhookKeyRefresh)
	go func() {
		defer stopped()
		defer ticker.Stop()
		for {
			select {
			case <-run.Done():
				return
			case <-ticker.C:
				if err := r.reload(run); err != nil && run.Err() == nil {
					r.log.ErrorContext(run, "webhooks: rereading the webhook signing keys", "error", err)
				}
				r.reread()
			}
		}
	}()
}

// signing returns the key that signs at now: the latest whose time has
// come.
func (r *webhookKeyring) signing(now time.Time) webhookKey {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range slices.Backward(r.keys) {
		if !k.from.After(now) {
			return k
		}
	}
	return r.keys[0]
}

// published returns the public keys the JWKS shows at now, oldest first:
// every key until its retention after its successor started to sign.
func (r *webhookKeyring) published(now time.Time) []webhooksig.JWK {
	r.mu.RLock()
	defer r.mu.RUnlock()
	jwks := make([]webhooksig.JWK, 0, len(r.keys))
	for _, k := range r.keys {
		if k.until.IsZero() || now.Before(k.until.Add(WebhookKeyRetention)) {
			jwks = append(jwks, webhooksig.PublicJWK(k.private.Public().(ed25519.PublicKey)))
		}
	}
	return jwks
}

// RotateWebhookKey makes a new Ed25519 webhook signing key, which every
// engine on the Store publishes at once and signs with from activeAt,
// WebhookKeyActivation from now; the JWKS goes on publishing the keys it
// replaces for WebhookKeyRetention after that. It returns the new key's
// id. A rotation before activeAt replaces the key that was to sign then,
// which never signs.
func (e *Engine) RotateWebhookKey(ctx context.Context) (kid string, activeAt time.Time, err error) {
	if err := e.checkLoaded(); err != nil {
		return "", time.Time{}, err
	}
	activeAt = e.clock.Now().Add(WebhookKeyActivation)
	next := newStoredWebhookKey(activeAt)
	if err := e.keys.update(ctx, func(set *webhookKeySet) {
		set.Keys = append(set.Keys, next)
	}); err != nil {
		return "", time.Time{}, err
	}
	e.tel.operated(ctx, "rotate_webhook_key")
	return webhooksig.KeyID(ed25519.NewKeyFromSeed(next.Seed).Public().(ed25519.PublicKey)), activeAt, nil
}

func newStoredWebhookKey(from time.Time) storedWebhookKey {
	seed := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(seed) // crypto/rand never fails: it crashes the program instead
	return storedWebhookKey{Seed: seed, From: from}
}

// decodeWebhookKeySet reads a stored key set; nil is an empty one.
func decodeWebhookKeySet(data []byte) (*webhookKeySet, error) {
	set := &webhookKeySet{V: webhookKeySetVersion}
	if len(data) == 0 {
		return set, nil
	}
	if err := json.Unmarshal(data, set); err != nil {
		return nil, fmt.Errorf("webhooks: decoding the webhook signing keys: %w", err)
	}
	if set.V != webhookKeySetVersion {
		return nil, fmt.Errorf("webhooks: webhook signing keys of version %d, which this build does not know; use a newer build", set.V)
	}
	for _, k := range set.Keys {
		if len(k.Seed) != ed25519.SeedSize {
			return nil, errors.New("webhooks: decoding the webhook signing keys: a seed is not 32 bytes")
		}
	}
	return set, nil
}

// until is when a key later than key i starts to sign, or zero if none
// does: the earliest start of the keys after it, since engines' clocks
// may have put them out of order.
func (s *webhookKeySet) until(i int) time.Time {
	var t time.Time
	for _, k := range s.Keys[i+1:] {
		if t.IsZero() || k.From.Before(t) {
			t = k.From
		}
	}
	return t
}

// prune drops the keys whose retention has passed at now.
func (s *webhookKeySet) prune(now time.Time) {
	keep := s.Keys[:0:0]
	for i, k := range s.Keys {
		if until := s.until(i); until.IsZero() || now.Before(until.Add(WebhookKeyRetention)) {
			keep = append(keep, k)
		}
	}
	s.Keys = keep
}
