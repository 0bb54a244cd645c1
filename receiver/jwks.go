package receiver

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// Limits of the JWKS cache of a Verifier (WithJWKS).
const (
	// JWKSMaxAge is how long a fetched key set serves before the next
	// Verify fetches it again: the engine's Cache-Control max-age. A key
	// set that cannot be fetched then goes on serving.
	JWKSMaxAge = 5 * time.Minute
	// JWKSRefetchInterval is the least time between two fetches made
	// because a signature named a kid the cache lacks, so that forged
	// kids cannot make a receiver hammer the engine. The engine publishes
	// a new key a minute before it signs with it, well after this.
	JWKSRefetchInterval = 10 * time.Second
	// maxJWKSBytes bounds a key set's body.
	maxJWKSBytes = 1 << 20
)

// ErrKeySetUnavailable is wrapped by the error Verify returns when it
// needed the JWKS and could not fetch it. The signature may be good:
// answer 503, so that the engine retries, rather than 401.
var ErrKeySetUnavailable = errors.New("receiver: webhook key set unavailable")

// WithJWKS verifies Ed25519 signatures ("t=…,kid=…,ed25519=…") with the
// public keys of the JSON Web Key Set at url: the engine's
// Engine.JWKSHandler, at "{stream root}/__ds/jwks.json". The Verifier
// fetches it with client (http.DefaultClient if nil) at the first such
// signature, within Verify's context, and caches it for JWKSMaxAge. A
// signature whose kid the cache lacks, as after a key rotation, fetches it
// again, at most once every JWKSRefetchInterval.
func WithJWKS(url string, client *http.Client) Option {
	return func(v *Verifier) error {
		if url == "" {
			return errors.New("receiver: empty JWKS URL")
		}
		if client == nil {
			client = http.DefaultClient
		}
		v.jwks = &jwksCache{url: url, client: client}
		return nil
	}
}

// jwksCache holds the keys of one JWKS, by kid.
type jwksCache struct {
	url    string
	client *http.Client

	// fetching is held for a fetch, so that racing Verifies that need
	// one make one.
	fetching sync.Mutex

	mu        sync.Mutex
	keys      map[string]ed25519.PublicKey
	fetchedAt time.Time // when keys were fetched; zero before the first
	triedAt   time.Time // when the last fetch began
}

// key returns the public key kid names, fetching the key set if it has
// none cached, if the cache is older than JWKSMaxAge, or if kid is not in
// it and no fetch began in the last JWKSRefetchInterval.
func (c *jwksCache) key(ctx context.Context, kid string, now func() time.Time) (ed25519.PublicKey, error) {
	k, ok, fetch := c.lookup(kid, now())
	if fetch || !ok {
		// A fetch in flight may bring kid: wait for it, then look again.
		c.fetching.Lock()
		defer c.fetching.Unlock()
		k, ok, fetch = c.lookup(kid, now())
	}
	if fetch {
		c.mu.Lock()
		c.triedAt = now()
		c.mu.Unlock()
		keys, err := c.fetch(ctx)
		switch {
		case err == nil:
			c.mu.Lock()
			c.keys, c.fetchedAt = keys, now()
			c.mu.Unlock()
			k, ok = keys[kid]
		case !ok:
			return nil, err
		} // else a stale key set serves while the fetch fails
	}
	if !ok {
		if c.fetched() {
			return nil, invalid("unknown key id %q", kid)
		}
		return nil, fmt.Errorf("%w: the last fetch failed", ErrKeySetUnavailable)
	}
	return k, nil
}

// fetched reports whether a key set was ever fetched.
func (c *jwksCache) fetched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.fetchedAt.IsZero()
}

// lookup returns the cached key of kid, and whether to fetch the key set.
func (c *jwksCache) lookup(kid string, now time.Time) (k ed25519.PublicKey, ok, fetch bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok = c.keys[kid]
	switch {
	case c.fetchedAt.IsZero() && c.triedAt.IsZero():
		fetch = true
	case !ok:
		fetch = now.Sub(c.triedAt) >= JWKSRefetchInterval
	default:
		fetch = now.Sub(c.fetchedAt) >= JWKSMaxAge && now.Sub(c.triedAt) >= JWKSRefetchInterval
	}
	return k, ok, fetch
}

// fetch reads the key set, keeping its Ed25519 signing keys: a key set
// may hold keys of other kinds, which no signature of the engine names.
func (c *jwksCache) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeySetUnavailable, err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeySetUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s answered %s", ErrKeySetUnavailable, c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeySetUnavailable, err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("%w: key set exceeds %d bytes", ErrKeySetUnavailable, maxJWKSBytes)
	}
	var set webhooksig.JWKS
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("%w: decoding the key set: %w", ErrKeySetUnavailable, err)
	}
	keys := make(map[string]ed25519.PublicKey, len(set.Keys))
	for _, j := range set.Keys {
		if pub, err := webhooksig.Ed25519Key(j); err == nil && j.Kid != "" {
			keys[j.Kid] = pub
		}
	}
	return keys, nil
}
